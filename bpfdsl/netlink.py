"""Kernel side, rtnetlink: interfaces, XDP over netlink, network namespaces, veth pairs.

Takes interface / namespace names, returns ifindexes and :class:`XdpState`; the only
module that talks rtnetlink (through pyroute2, imported lazily because it costs ~0.4 s).
XDP over netlink is ``RTM_SETLINK`` with a nested ``IFLA_XDP`` (``IFLA_XDP_FD``,
``IFLA_XDP_FLAGS``, ``IFLA_XDP_EXPECTED_FD``), as in linux/if_link.h and iproute2.
Errors are :class:`~bpfdsl.diagnostics.DiagnosticError` saying what to do.
"""

from __future__ import annotations

import _socket  # socket's C module: if_nametoindex & co. without socket.py's enum set-up
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager

from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.record import FrozenRecord
from bpfdsl.uapi import XdpFlags

CLONE_NEWNET = 0x40000000  # linux/sched.h
MS_BIND = 4096  # linux/mount.h
MNT_DETACH = 2
NETNS_RUN_DIR = "/run/netns"  # iproute2's directory of named namespaces

# IFLA_XDP_ATTACHED values (linux/if_link.h XDP_ATTACHED_*)
_ATTACHED_MODES = {0: None, 1: "native", 2: "generic", 3: "offload", 4: "multi"}
MODE_FLAGS = {"native": XdpFlags.DRV_MODE, "generic": XdpFlags.SKB_MODE}


class XdpState(FrozenRecord):
    """What netlink reports about XDP on one interface (``IFLA_XDP`` of RTM_GETLINK).

    ``mode``: None (nothing attached), ``native``, ``generic``, ``offload`` or ``multi``;
    ``prog_id``: the kernel program id of the single attached program (0 when none or multi);
    ``drv_prog_id``/``skb_prog_id``: per-mode ids (0 when none).
    """

    ifindex: int
    mode: str | None
    prog_id: int
    drv_prog_id: int
    skb_prog_id: int

    __slots__ = ("ifindex", "mode", "prog_id", "drv_prog_id", "skb_prog_id")

    def __init__(
        self,
        ifindex: int,
        mode: str | None,
        prog_id: int,
        drv_prog_id: int = 0,
        skb_prog_id: int = 0,
    ) -> None:
        self.ifindex = ifindex
        self.mode = mode
        self.prog_id = prog_id
        self.drv_prog_id = drv_prog_id
        self.skb_prog_id = skb_prog_id

    def prog_id_for(self, mode: str) -> int:
        """Program id attached in ``mode`` (``native``/``generic``), 0 when none."""
        if mode == "native":
            return self.drv_prog_id or (self.prog_id if self.mode == "native" else 0)
        return self.skb_prog_id or (self.prog_id if self.mode == "generic" else 0)


def interface_names() -> list[str]:
    """Names of the interfaces of the current network namespace."""
    return [name for _i, name in _socket.if_nameindex()]


def ifindex(name: str) -> int:
    """The ifindex of interface ``name`` in the current network namespace.

    Raises DiagnosticError (``unknown-interface``) naming the interfaces that exist.
    """
    if not name or len(name) >= 16 or "/" in name:
        raise DiagnosticError(
            error(
                "unknown-interface",
                f"invalid interface name {name!r}",
                hint="interface names are 1-15 characters, e.g. eth0",
            )
        )
    try:
        return _socket.if_nametoindex(name)
    except OSError:
        have = ", ".join(interface_names()) or "none"
        raise DiagnosticError(
            error(
                "unknown-interface",
                f"no network interface named {name!r}",
                hint=f"interfaces here: {have} (see `ip link`)",
            )
        ) from None


def ifname(index: int) -> str:
    """Name of interface ``index``, or ``if<index>`` when it no longer exists."""
    try:
        return _socket.if_indextoname(index)
    except OSError:
        return f"if{index}"


def _ipr(netns: str | None = None):
    """A pyroute2 IPRoute whose socket lives in ``netns`` (created there with setns, so
    pyroute2 never forks a helper process)."""
    from pyroute2 import IPRoute  # noqa: PLC0415 (slow import, only when netlink is needed)

    if netns:
        with in_netns(netns):
            return IPRoute()
    return IPRoute()


def _netlink_error(e: Exception, what: str, dev: str) -> DiagnosticError:
    code = getattr(e, "code", 0)
    hint = None
    if code == errno.EOPNOTSUPP:
        hint = "the driver has no native XDP support here; use --mode generic"
    elif code == errno.EBUSY:
        hint = (
            f"{dev} already has an XDP program in another mode or through a link; "
            f"detach it first (`bpfdsl detach --dev {dev}`)"
        )
    elif code == errno.EEXIST:
        hint = f"{dev} already has an XDP program; pass --replace to swap it atomically"
    elif code in (errno.EPERM, errno.EACCES):
        hint = "run as root (needs CAP_NET_ADMIN and CAP_BPF)"
    elif code == errno.EINVAL:
        hint = "is the program an XDP program (section `xdp`, not xdp/cpumap or xdp/devmap)?"
    msg = e.args[1] if len(getattr(e, "args", ())) > 1 else os.strerror(code or errno.EIO)
    return DiagnosticError(error("attach-failed", f"{what} on {dev}: {msg}", hint=hint))


def xdp_state(index: int, *, netns: str | None = None) -> XdpState:
    """XDP state of interface ``index`` (RTM_GETLINK, ``IFLA_XDP``).

    Raises DiagnosticError when the interface is gone.
    """
    from pyroute2.netlink.exceptions import NetlinkError  # noqa: PLC0415

    try:
        with _ipr(netns) as ipr:
            link = ipr.get_links(index)[0]
    except NetlinkError as e:
        raise _netlink_error(e, "reading XDP state", ifname(index)) from None
    return _state(index, link)


def _state(index: int, link) -> XdpState:
    xdp = link.get_attr("IFLA_XDP")
    attrs = dict(xdp["attrs"]) if xdp else {}
    mode_raw = attrs.get("IFLA_XDP_ATTACHED")
    if isinstance(mode_raw, str) or mode_raw is None:  # pyroute2 maps the value to a name
        mode = {
            "xdp": "native",
            "xdpgeneric": "generic",
            "xdpoffload": "offload",
            "xdpmulti": "multi",
        }.get(mode_raw)
    else:
        mode = _ATTACHED_MODES.get(int(mode_raw))
    return XdpState(
        ifindex=index,
        mode=mode,
        prog_id=int(attrs.get("IFLA_XDP_PROG_ID", 0) or 0),
        drv_prog_id=int(attrs.get("IFLA_XDP_DRV_PROG_ID", 0) or 0),
        skb_prog_id=int(attrs.get("IFLA_XDP_SKB_PROG_ID", 0) or 0),
    )


def xdp_states(*, netns: str | None = None) -> dict[str, XdpState]:
    """Interface name -> XDP state for every interface of the namespace (one RTM_GETLINK dump)."""
    out: dict[str, XdpState] = {}
    with _ipr(netns) as ipr:
        for link in ipr.get_links():
            out[link.get_attr("IFLA_IFNAME")] = _state(link["index"], link)
    return out


def xdp_set(
    index: int, prog_fd: int, flags: int, *, expected_fd: int | None = None, dev: str | None = None
) -> None:
    """Attach (``prog_fd`` >= 0) or detach (``prog_fd == -1``) XDP on ``index`` via netlink.

    ``flags``: ``XdpFlags`` (mode bit, UPDATE_IF_NOEXIST, REPLACE).  With ``expected_fd``
    (requires ``XdpFlags.REPLACE``) the kernel swaps atomically only if that program is
    still the attached one (``IFLA_XDP_EXPECTED_FD``, kernel 5.7+).
    Raises DiagnosticError with the kernel's reason and what to do.
    """
    from pyroute2.netlink.exceptions import NetlinkError  # noqa: PLC0415

    if flags & XdpFlags.HW_MODE:
        raise DiagnosticError(
            error(
                "attach-failed",
                "XDP offload mode is not supported",
                hint="use --mode native or --mode generic",
            )
        )
    prog_fd = int(prog_fd)
    attrs = [("IFLA_XDP_FD", prog_fd), ("IFLA_XDP_FLAGS", int(flags))]
    if expected_fd is not None:
        attrs.append(("IFLA_XDP_EXPECTED_FD", expected_fd))
    what = "attaching XDP" if prog_fd >= 0 else "detaching XDP"
    try:
        with _ipr() as ipr:
            ipr.link("set", index=index, xdp={"attrs": attrs})
    except NetlinkError as e:
        raise _netlink_error(e, what, dev or ifname(index)) from None


# ---- network namespaces -------------------------------------------------------------


def _libc():
    """libc through ctypes (setns/unshare/mount), loaded on first use."""
    global _LIBC
    if _LIBC is None:
        import ctypes  # noqa: PLC0415

        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


_LIBC = None


def _setns(fd: int) -> None:
    import ctypes  # noqa: PLC0415

    if _libc().setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def create_netns(name: str) -> None:
    """Create the named network namespace ``/run/netns/NAME`` (as ``ip netns add``) with
    its loopback up.  Done in a short-lived thread: unshare(CLONE_NEWNET) there, bind-mount
    that thread's namespace on the name; no fork.  Raises OSError (EEXIST if it exists)."""
    os.makedirs(NETNS_RUN_DIR, exist_ok=True)
    path = os.path.join(NETNS_RUN_DIR, name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
    failure: list[OSError] = []
    import ctypes  # noqa: PLC0415
    import threading  # noqa: PLC0415

    def worker() -> None:
        if _libc().unshare(CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            failure.append(OSError(err, f"unshare(CLONE_NEWNET): {os.strerror(err)}"))
            return
        src = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
        if _libc().mount(src, path.encode(), b"none", MS_BIND, None) != 0:
            err = ctypes.get_errno()
            failure.append(OSError(err, f"bind mount of {path}: {os.strerror(err)}"))

    t = threading.Thread(target=worker, name=f"netns-{name}")
    t.start()
    t.join()
    if failure:
        os.unlink(path)
        raise failure[0]
    with _ipr(name) as ipr:  # loopback up, as a fresh namespace has it down
        ipr.link("set", index=_index("lo", name), state="up")


def remove_netns(name: str) -> None:
    """Remove the named namespace (no error when it is already gone)."""
    path = os.path.join(NETNS_RUN_DIR, name)
    if os.path.lexists(path):
        _libc().umount2(path.encode(), MNT_DETACH)
        os.unlink(path)


@contextmanager
def in_netns(name: str) -> Iterator[None]:
    """Run the body with the calling thread in network namespace ``name`` (setns(2)).

    Unlike ``ip netns exec`` this keeps the mount namespace, so /sys/fs/bpf stays visible.
    Sockets created inside stay in that namespace after the block.  Restores the previous
    namespace on exit, also on exceptions.  Raises UsageError (``unknown-netns``) when
    there is no namespace of that name (no ``/run/netns/NAME``, as ``ip netns`` names them).
    """
    if not name or "/" in name or name in (".", ".."):  # iproute2 refuses these names too
        raise _unknown_netns(name)
    old = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        try:
            new = os.open(os.path.join(NETNS_RUN_DIR, name), os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, ValueError):
            raise _unknown_netns(name) from None
        try:
            _setns(new)
        finally:
            os.close(new)
        try:
            yield
        finally:
            _setns(old)
    finally:
        os.close(old)


def _unknown_netns(name: str) -> DiagnosticError:
    from bpfdsl.diagnostics import UsageError  # noqa: PLC0415

    try:
        known = sorted(os.listdir(NETNS_RUN_DIR))
    except OSError:
        known = []
    return UsageError(
        error(
            "unknown-netns",
            f"no network namespace named {name!r}",
            hint=f"namespaces: {', '.join(known)} (see `ip netns list`)"
            if known
            else "there are no named namespaces (`ip netns list`); create one with `ip netns add`",
        )
    )


# ---- veth pairs ----------------------------------------------------------------------


def create_veth(name: str, peer: str, *, peer_netns: str | None = None) -> None:
    """Create veth pair ``name`` (current namespace) <-> ``peer`` (in ``peer_netns``).

    Both ends are left down; see :func:`configure`.
    """
    peer_spec: dict = {"ifname": peer}
    if peer_netns:
        peer_spec["net_ns_fd"] = peer_netns
    with _ipr() as ipr:
        ipr.link("add", ifname=name, kind="veth", peer=peer_spec)


def _index(dev: str, netns: str | None) -> int:
    """ifindex of ``dev`` in ``netns`` (if_nametoindex, in that namespace); raises OSError."""
    if netns:
        with in_netns(netns):
            return _socket.if_nametoindex(dev)
    return _socket.if_nametoindex(dev)


def configure(
    dev: str,
    *,
    netns: str | None = None,
    address: str | None = None,
    prefixlen: int = 24,
    up: bool = True,
) -> str:
    """Give ``dev`` an IPv4 ``address``/``prefixlen`` and bring it up; returns its MAC."""
    with _ipr(netns) as ipr:
        idx = _index(dev, netns)
        if address:
            ipr.addr("add", index=idx, address=address, prefixlen=prefixlen)
        if up:
            ipr.link("set", index=idx, state="up")
        return ipr.get_links(idx)[0].get_attr("IFLA_ADDRESS")


def add_neighbour(dev: str, ip: str, mac: str, *, netns: str | None = None) -> None:
    """Permanent ARP entry ``ip -> mac`` on ``dev`` (so tests need no ARP round trip)."""
    with _ipr(netns) as ipr:
        idx = _index(dev, netns)
        ipr.neigh("replace", dst=ip, lladdr=mac, ifindex=idx, state=0x80)  # NUD_PERMANENT


def delete_link(dev: str, *, netns: str | None = None) -> None:
    """Delete interface ``dev`` (a veth takes its peer with it); no error if it is gone."""
    with _ipr(netns) as ipr:
        try:
            idx = _index(dev, netns)
        except OSError:
            return  # already gone
        ipr.link("del", index=idx)
