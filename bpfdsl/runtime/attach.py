"""Kernel side: attach XDP programs to interfaces, replace them atomically, detach them.

Takes a loaded program fd and an interface name; returns an :class:`XdpAttachment`.
Prefers a BPF link (BPF_LINK_CREATE, attach type BPF_XDP, pinned in bpffs so it outlives
the process, replaced with BPF_LINK_UPDATE + BPF_F_REPLACE) and falls back to netlink
(IFLA_XDP, replaced with XDP_FLAGS_REPLACE + IFLA_XDP_EXPECTED_FD) where links are not
supported -- the same order libxdp and cilium/ebpf use.  Errors say what to do.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
from dataclasses import dataclass, field, fields

from bpfdsl.abi.flags import BPF_F_REPLACE, XdpFlags
from bpfdsl.abi.insn import decode
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, LinkType, ProgramType, XdpAction
from bpfdsl.diagnostics import Diagnostic, DiagnosticError, UsageError, error
from bpfdsl.kernel import kallsyms, netlink, syscall
from bpfdsl.obj.verdicts import may_return
from bpfdsl.runtime.bpffs import BPF_FS_MAGIC, BPFFS, ensure_bpffs, is_bpffs
from bpfdsl.runtime.cpumap import refuse_dev_bound, refuse_on_interface

__all__ = ["BPF_FS_MAGIC", "BPFFS", "ensure_bpffs", "is_bpffs"]  # kept here for their users

MODES = ("native", "generic")  # offload is refused: it needs a device-bound program
DEFAULT_PIN_ROOT = BPFFS + "/bpfdsl"  # where the CLI pins programs when no --pin-dir is given


@dataclass(frozen=True, slots=True)
class XdpAttachment:
    """One XDP program on one interface.

    ``method``: ``link`` (a BPF link, ``link_id``; pinned at ``link_pin`` unless None) or
    ``netlink`` (no link object).  ``mode``: ``native`` (XDP_FLAGS_DRV_MODE) or ``generic``
    (XDP_FLAGS_SKB_MODE).  ``prog_id``: kernel program id now attached.
    """

    dev: str
    ifindex: int
    mode: str
    method: str
    prog_id: int
    prog_name: str = ""
    link_id: int | None = None
    link_pin: str | None = None
    link_fd: syscall.Fd | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict:
        """The fields by name for JSON output (attach, detach, show), without the fd."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.compare}


def link_pin_path(pin_dir: str, dev: str) -> str:
    """Where the CLI pins the XDP link of ``dev`` under ``pin_dir`` (no dots: bpffs refuses them)."""
    return os.path.join(pin_dir, f"link_xdp_{dev.replace('.', '_')}")


def check_mode(mode: str) -> XdpFlags:
    """XDP_FLAGS_* bit of ``mode``; raises UsageError for offload or an unknown mode."""
    if mode == "offload":
        raise UsageError(
            error(
                "bad-mode",
                "XDP offload (hardware) mode is not supported by bpfdsl",
                hint="offload needs a NIC with BPF offload and a device-bound program; "
                "use --mode native or --mode generic",
            )
        )
    if mode not in netlink.MODE_FLAGS:
        raise UsageError(
            error(
                "bad-mode", f"unknown XDP mode {mode!r}", hint="use --mode native or --mode generic"
            )
        )
    return netlink.MODE_FLAGS[mode]


def prog_id_of(fd: int | syscall.Fd) -> int:
    """Kernel id of the program behind ``fd`` (BPF_OBJ_GET_INFO_BY_FD)."""
    return int(syscall.prog_info(int(fd)).id)


def _prog_id_name(fd: int) -> tuple[int, str, int]:
    info = syscall.prog_info(fd)
    return int(info.id), info.name.decode(errors="replace"), int(info.type)


def find_xdp_link(index: int, prog_id: int) -> tuple[int, int] | None:
    """(link_id, prog_id) of the BPF XDP link on interface ``index`` of this netns, or None.

    Link info holds only the ifindex, which repeats across namespaces, so the link must
    also run ``prog_id``, the program netlink reports on that interface of this netns.
    """
    if not prog_id:
        return None
    link_id = 0
    while (next_id := syscall.get_next_id("link", link_id)) is not None:
        link_id = next_id
        try:
            with syscall.get_fd_by_id("link", link_id) as fd:
                info = syscall.link_info(fd)
        except syscall.BpfError:
            continue  # gone meanwhile
        if info.type == LinkType.XDP and info.xdp_ifindex == index and info.prog_id == prog_id:
            return link_id, int(info.prog_id)
    return None


def attach_xdp(
    prog_fd: int | syscall.Fd,
    dev: str,
    *,
    mode: str = "native",
    link_pin: str | None = None,
    replace: bool = False,
    method: str = "auto",
) -> XdpAttachment:
    """Attach XDP program ``prog_fd`` to interface ``dev``.

    ``mode``: ``native``/``generic``.  ``link_pin``: bpffs path for the new link (needed for
    the program to stay attached after this process exits; parent dirs are created).
    ``replace``: if a program is already attached, swap it atomically (link update or
    netlink REPLACE with the expected fd): there is no moment without a program.
    ``method``: ``auto`` (link, netlink where links are unsupported), ``link`` or ``netlink``.
    Raises DiagnosticError for an unknown interface, a program that is not a plain XDP
    program, an occupied interface without ``replace``, or a kernel refusal.
    """
    prog_fd = int(prog_fd)
    flags = check_mode(mode)
    index = netlink.ifindex(dev)
    prog_id, prog_name, prog_type = _prog_id_name(prog_fd)
    if prog_type != ProgramType.XDP:
        raise DiagnosticError(
            error(
                "attach-failed",
                f"program {prog_name!r} is not an XDP program "
                f"({ProgramType(prog_type).name.lower()}); only XDP programs attach to interfaces",
            )
        )
    if replace and method == "netlink" and (cur := _current(dev, index)) is not None:
        return _replace(prog_fd, dev, index, mode, cur)
    link = None
    if method in ("auto", "link"):
        try:
            link = syscall.link_create(prog_fd, index, AttachType.XDP, int(flags))
        except syscall.BpfError as e:
            if e.errno in (errno.EBUSY, errno.EEXIST):  # occupied: nothing was changed
                cur = _current(dev, index)
                if replace and cur is not None:
                    return _replace(prog_fd, dev, index, mode, cur)
                raise _occupied(dev, cur) from None
            if e.errno == errno.EOPNOTSUPP and mode == "native":
                raise DiagnosticError(
                    error(
                        "attach-failed",
                        f"{dev} has no native XDP support (driver mode)",
                        hint="use --mode generic",
                    )
                ) from None
            if e.errno == errno.EINVAL:
                refuse_on_interface(prog_fd, prog_name, dev)  # explains xdp(cpumap/devmap)
                refuse_dev_bound(prog_fd, prog_name, dev, mode)  # and device-bound ones
            if (
                method == "link"
                or isinstance(e, PermissionError)
                or e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP)
            ):
                raise _attach_error(e, dev) from None
            # links unsupported here (kernel < 5.9) or refused: netlink says why
        if link is not None:
            try:
                link_id = int(syscall.link_info(link).id)
                if link_pin:
                    ensure_bpffs()
                    os.makedirs(os.path.dirname(link_pin), exist_ok=True)
                    syscall.obj_pin(link, link_pin)
            except BaseException:
                link.close()  # the link dies with its last fd: nothing stays attached
                raise
            if link_pin:
                link.close()
                link = None
            # without a pin the caller owns the link: it detaches when .link_fd closes
            return XdpAttachment(
                dev, index, mode, "link", prog_id, prog_name, link_id, link_pin, link
            )
    if (cur := _current(dev, index)) is not None:
        if replace:
            return _replace(prog_fd, dev, index, mode, cur)
        raise _occupied(dev, cur)
    netlink.xdp_set(index, prog_fd, flags | XdpFlags.UPDATE_IF_NOEXIST, dev=dev)
    return XdpAttachment(dev, index, mode, "netlink", prog_id, prog_name)


def _replace(prog_fd: int, dev: str, index: int, mode: str, cur: XdpAttachment) -> XdpAttachment:
    if cur.mode != mode:  # a swap keeps the mode; say so instead of changing it silently
        raise DiagnosticError(
            error(
                "attach-failed",
                f"{dev} runs XDP in {cur.mode} mode, not {mode}",
                hint=f"use --mode {cur.mode} to replace it atomically, or detach it first",
            )
        )
    if cur.method == "link" and cur.link_id is not None:
        return _replace_link(prog_fd, dev, index, (cur.link_id, cur.prog_id))
    return _replace_netlink(prog_fd, dev, index, mode, cur.prog_id)


def _occupied(dev: str, cur: XdpAttachment | None) -> DiagnosticError:
    what = "an XDP program"
    if cur is not None:
        how = "a BPF link" if cur.method == "link" else "netlink"
        what = f"XDP program {cur.prog_name!r} (id {cur.prog_id}, {cur.mode} mode, via {how})"
    return DiagnosticError(
        error(
            "attach-failed",
            f"{dev} already has {what}",
            hint="replace it atomically (`bpfdsl attach` without --no-replace), or "
            f"`bpfdsl detach --dev {dev}` first",
        )
    )


def _attach_error(e: syscall.BpfError, dev: str) -> DiagnosticError:
    hint = None
    if e.errno == errno.EINVAL:
        hint = (
            "only programs of section `xdp` attach to interfaces; xdp/cpumap and "
            "xdp/devmap programs go into map entries"
        )
    elif isinstance(e, PermissionError):
        hint = "run as root (needs CAP_BPF and CAP_NET_ADMIN)"
    return DiagnosticError(
        error("attach-failed", f"attaching XDP to {dev}: {os.strerror(e.errno)}", hint=hint)
    )


def _replace_link(prog_fd: int, dev: str, index: int, existing: tuple[int, int]) -> XdpAttachment:
    link_id, old_id = existing
    with syscall.get_fd_by_id("link", link_id) as link, syscall.get_fd_by_id("prog", old_id) as old:
        try:
            syscall.link_update(link, prog_fd, old, BPF_F_REPLACE)
        except syscall.BpfError as e:
            raise DiagnosticError(
                error(
                    "attach-failed",
                    f"replacing the XDP program on {dev}: {os.strerror(e.errno)}",
                    hint="the attached program changed meanwhile; look with `bpfdsl show`"
                    if e.errno == errno.EPERM
                    else None,
                )
            ) from None
    st = netlink.xdp_state(index)  # a link keeps its mode; the new program runs in it
    cur_mode = st.mode if st.mode in MODES else "native"
    prog_id, name, _t = _prog_id_name(prog_fd)
    return XdpAttachment(dev, index, cur_mode, "link", prog_id, name, link_id, None)


def _replace_netlink(prog_fd: int, dev: str, index: int, mode: str, old_id: int) -> XdpAttachment:
    with syscall.get_fd_by_id("prog", old_id) as old:  # the kernel swaps only if still attached
        netlink.xdp_set(
            index, prog_fd, check_mode(mode) | XdpFlags.REPLACE, expected_fd=int(old), dev=dev
        )
    prog_id, name, _t = _prog_id_name(prog_fd)
    return XdpAttachment(dev, index, mode, "netlink", prog_id, name)


def xdp_attachment(dev: str) -> XdpAttachment | None:
    """What is attached on ``dev`` now (link or netlink), or None."""
    return _current(dev, netlink.ifindex(dev))


def _current(dev: str, index: int) -> XdpAttachment | None:
    st = netlink.xdp_state(index)
    if st.mode is None:
        return None
    pid = st.prog_id or st.drv_prog_id or st.skb_prog_id
    link = find_xdp_link(index, pid)
    if link is not None:
        return XdpAttachment(dev, index, st.mode, "link", pid, _name_of(pid), link[0])
    return XdpAttachment(dev, index, st.mode, "netlink", pid, _name_of(pid))


def _name_of(prog_id: int) -> str:
    try:
        with syscall.get_fd_by_id("prog", prog_id) as fd:
            return syscall.prog_info(fd).name.decode(errors="replace")
    except syscall.BpfError:
        return ""


def detach_xdp(
    dev: str, *, pin_roots: tuple[str, ...] = (DEFAULT_PIN_ROOT,), extra_pins: tuple[str, ...] = ()
) -> XdpAttachment | None:
    """Detach whatever XDP program is on ``dev``; returns what was attached (None: nothing).

    A link is detached with BPF_LINK_DETACH and its pins under ``pin_roots`` (or listed in
    ``extra_pins``) are removed; a netlink attachment is removed with IFLA_XDP_FD = -1.
    Raises DiagnosticError for an unknown interface or a kernel refusal.
    """
    cur = xdp_attachment(dev)
    if cur is None:
        return None
    if cur.method == "link" and cur.link_id is not None:
        with syscall.get_fd_by_id("link", cur.link_id) as link:
            syscall.link_detach(link)
        for path in list(extra_pins) + _pins_of_link(cur.link_id, pin_roots):
            try:
                os.unlink(path)
                os.rmdir(os.path.dirname(path))  # only if the link was all it held
            except OSError:
                pass
        return cur
    flags = netlink.MODE_FLAGS.get(cur.mode, XdpFlags.NONE)
    netlink.xdp_set(cur.ifindex, -1, flags, dev=dev)
    return cur


def _pins_of_link(link_id: int | None, roots: tuple[str, ...]) -> list[str]:
    """Paths under ``roots`` (bpffs) pinning the link with ``link_id``."""
    out: list[str] = []
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for f in files:
                path = os.path.join(dirpath, f)
                try:
                    with syscall.obj_get(path) as fd:
                        if syscall.fd_kind(int(fd)) != "link":
                            continue
                        info = syscall.link_info(fd)
                except (syscall.BpfError, OSError):
                    continue
                if info.id == link_id:
                    out.append(path)
    return out


def move_link_pin(att: XdpAttachment, link_pin: str) -> XdpAttachment:
    """Pin ``att``'s link at ``link_pin`` and unpin it elsewhere in bpffs.

    Used after a replace: the link now runs a program of another pin dir, so unloading
    the old dir must not take the link (and the new program) down with it.
    """
    if att.link_id is None:
        return att
    old = _pins_of_link(att.link_id, (BPFFS,))
    if link_pin not in old:
        os.makedirs(os.path.dirname(link_pin), exist_ok=True)
        with syscall.get_fd_by_id("link", att.link_id) as link:
            syscall.obj_pin(link, link_pin)
    for p in old:
        if p != link_pin:
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass
    return XdpAttachment(
        att.dev,
        att.ifindex,
        att.mode,
        att.method,
        att.prog_id,
        att.prog_name,
        att.link_id,
        link_pin,
    )


def devmap_target_warning(map_name: str, key: int, ifindex: int) -> Diagnostic | None:
    """A warning Diagnostic (``redirect-target-drops``) when devmap ``map_name`` slot
    ``key`` sends to interface ``ifindex`` (this network namespace) and the kernel would
    drop every frame redirected there (:func:`bpfdsl.kernel.netlink.redirect_target_problem`:
    a veth whose peer has no XDP program nor GRO, a device without XDP transmit, a
    device that is down); None when the target takes them."""
    found = netlink.redirect_target_problem(ifindex)
    if found is None:
        return None
    msg, remedy = found
    return Diagnostic(
        "warning", "redirect-target-drops", f"devmap '{map_name}' key {key}: {msg}", hints=[remedy]
    )


def xdp_tx_warning(prog_fd: int, dev: str, mode: str = "native") -> Diagnostic | None:
    """A warning Diagnostic (``xdp-tx-drops``) when XDP program ``prog_fd``, attached to
    interface ``dev`` in ``mode``, can return XDP_TX (its instructions as the kernel holds
    them, :func:`bpfdsl.obj.verdicts.may_return`; bpf_redirect_map's result is XDP_REDIRECT
    or its flags' fallback action, its call told by
    :func:`bpfdsl.kernel.kallsyms.xlated_helper`) and the kernel would drop every such
    frame (:func:`bpfdsl.kernel.netlink.xdp_tx_problem`: a veth whose peer has no XDP
    program nor GRO); None otherwise.  Generic mode sends XDP_TX frames with the stack's
    transmit path (generic_xdp_tx), which does not need the peer.  Never raises (it runs
    after an attach succeeded, or for a listing)."""
    if mode != "native":
        return None
    try:
        insns = decode(syscall.prog_xlated(prog_fd))
        if not may_return(insns, XdpAction.TX, kallsyms.xlated_helper):
            return None
        found = netlink.xdp_tx_problem(netlink.ifindex(dev))
    except (OSError, ValueError, DiagnosticError):
        return None
    if found is None:
        return None
    msg, remedy = found
    return Diagnostic(
        "warning",
        "xdp-tx-drops",
        f"the program can return XDP_TX: {msg}",
        hints=[remedy],
    )


def attached_xdp_tx_warning(att: XdpAttachment) -> Diagnostic | None:
    """:func:`xdp_tx_warning` for what is attached now (``bpfdsl show``); never raises."""
    try:
        with syscall.get_fd_by_id("prog", att.prog_id) as fd:
            return xdp_tx_warning(int(fd), att.dev, att.mode)
    except (OSError, ValueError):
        return None


def devmap_warnings(prog_fd: int, limit: int = 1024) -> list[Diagnostic]:
    """:func:`devmap_target_warning` for every entry (at most ``limit`` per map) of the
    devmaps XDP program ``prog_fd`` uses (its map ids, BPF_OBJ_GET_INFO_BY_FD).  Never
    raises: it runs after an attach succeeded, which a failed look must not undo."""
    try:
        return _devmap_warnings(prog_fd, limit)
    except OSError:  # BpfError, netlink: no warning rather than a failed attach
        return []


def _devmap_warnings(prog_fd: int, limit: int) -> list[Diagnostic]:
    info = syscall.prog_info(prog_fd)
    n = int(info.nr_map_ids)
    if not n:
        return []
    ids = (ctypes.c_uint32 * n)()
    syscall.obj_get_info_by_fd(
        prog_fd, syscall.ProgInfo(nr_map_ids=n, map_ids=ctypes.addressof(ids))
    )
    out = []
    for map_id in ids:
        try:
            fd = syscall.get_fd_by_id("map", int(map_id))
        except syscall.BpfError:
            continue
        with fd:
            mi = syscall.map_info(fd)
            if mi.type not in (MapType.DEVMAP, MapType.DEVMAP_HASH):
                continue
            name = mi.name.decode(errors="replace")
            key, seen = None, set()
            for _ in range(limit):
                key = syscall.map_get_next_key(fd, key, 4)
                if key is None:
                    break
                value = syscall.map_lookup(fd, key, mi.value_size)
                if value is None:
                    continue
                ifindex = struct.unpack_from("<I", value)[0]
                if ifindex in seen:
                    continue
                seen.add(ifindex)
                w = devmap_target_warning(name, struct.unpack("<I", key)[0], ifindex)
                if w is not None:
                    out.append(w)
    return out
