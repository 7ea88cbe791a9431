"""Kernel side, rtnetlink: interfaces, XDP over netlink, network namespaces, veth pairs.

Takes interface / namespace names, returns ifindexes and :class:`XdpState`; the only
module that talks rtnetlink (through pyroute2, imported only when netlink is used).
XDP over netlink is ``RTM_SETLINK`` with a nested ``IFLA_XDP`` (``IFLA_XDP_FD``,
``IFLA_XDP_FLAGS``, ``IFLA_XDP_EXPECTED_FD``), as in linux/if_link.h and iproute2.
Errors are :class:`~bpfdsl.diagnostics.DiagnosticError` saying what to do.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec

from bpfdsl.abi.flags import XdpFlags
from bpfdsl.abi.net import (
    CTRL_ATTR_FAMILY_ID,
    CTRL_ATTR_FAMILY_NAME,
    CTRL_CMD_GETFAMILY,
    GENL_ID_CTRL,
    IFF_LOWER_UP,
    IFF_UP,
    IFLA_IFNAME,
    IFLA_INFO_KIND,
    IFLA_LINK,
    IFLA_LINK_NETNSID,
    IFLA_LINKINFO,
    IFLA_XDP,
    IFLA_XDP_ATTACHED,
    IFLA_XDP_DRV_PROG_ID,
    IFLA_XDP_PROG_ID,
    IFLA_XDP_SKB_PROG_ID,
    NETDEV_A_DEV_IFINDEX,
    NETDEV_A_DEV_XDP_FEATURES,
    NETDEV_CMD_DEV_GET,
    NETDEV_XDP_ACT_NDO_XMIT,
    NETLINK_GENERIC,
    NETLINK_ROUTE,
    NETNSA_FD,
    NETNSA_NSID,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    RTM_GETLINK,
    RTM_GETNSID,
)
from bpfdsl.diagnostics import DiagnosticError, HostError, UsageError, error
from bpfdsl.kernel import libc
from bpfdsl.kernel.libc import CLONE_NEWNET, MNT_DETACH, MS_BIND

if TYPE_CHECKING:  # pragma: no cover
    from pyroute2 import IPRoute
    from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg

_P = ParamSpec("_P")

NETNS_RUN_DIR = "/run/netns"  # iproute2's directory of named namespaces

# IFLA_XDP_ATTACHED values (linux/if_link.h XDP_ATTACHED_*)
_ATTACHED_MODES = {0: None, 1: "native", 2: "generic", 3: "offload", 4: "multi"}
MODE_FLAGS = {"native": XdpFlags.DRV_MODE, "generic": XdpFlags.SKB_MODE}


@dataclass(frozen=True, slots=True)
class XdpState:
    """What netlink reports about XDP on one interface (``IFLA_XDP`` of RTM_GETLINK).

    ``mode``: None (nothing attached), ``native``, ``generic``, ``offload`` or ``multi``;
    ``prog_id``: the kernel program id of the single attached program (0 when none or multi);
    ``drv_prog_id``/``skb_prog_id``: per-mode ids (0 when none).
    """

    ifindex: int
    mode: str | None
    prog_id: int
    drv_prog_id: int = 0
    skb_prog_id: int = 0


def interface_names() -> list[str]:
    """Names of the interfaces of the current network namespace."""
    return [name for _i, name in socket.if_nameindex()]


def ifindex(name: str) -> int:
    """The ifindex of interface ``name`` in the current network namespace.

    Raises UsageError (``unknown-interface``) for a name no interface can have, HostError
    (the same code) for a valid name that no interface here has, naming those that exist.
    """
    if not name or len(name) >= 16 or "/" in name:
        raise UsageError(
            error(
                "unknown-interface",
                f"invalid interface name {name!r}",
                hint="interface names are 1-15 characters, e.g. eth0",
            )
        )
    try:
        return socket.if_nametoindex(name)
    except OSError:
        have = ", ".join(interface_names()) or "none"
        raise HostError(
            error(
                "unknown-interface",
                f"no network interface named {name!r}",
                hint=f"interfaces here: {have} (see `ip link`)",
            )
        ) from None


def ifname(index: int) -> str:
    """Name of interface ``index``, or ``if<index>`` when it no longer exists."""
    try:
        return socket.if_indextoname(index)
    except OSError:
        return f"if{index}"


def _ipr(netns: str | None = None) -> IPRoute:
    """A pyroute2 IPRoute whose socket lives in ``netns`` (created there with setns, so
    pyroute2 never forks a helper process)."""
    from pyroute2 import IPRoute  # only when netlink is needed

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

    Raises DiagnosticError when the interface is gone.  In this namespace it is one raw
    RTM_GETLINK (no pyroute2 import: the attach path's start-up time).
    """
    if netns is None:
        st = _xdp_state_raw(index)
        if st is not None:
            return st
    from pyroute2.netlink.exceptions import NetlinkError

    try:
        with _ipr(netns) as ipr:
            link = ipr.get_links(index)[0]
    except NetlinkError as e:
        raise _netlink_error(e, "reading XDP state", ifname(index)) from None
    return _state(index, link)


def _state(index: int, link: ifinfmsg) -> XdpState:
    xdp = link.get_attr("IFLA_XDP")
    attrs = dict(xdp["attrs"]) if xdp else {}
    mode_raw = attrs.get("IFLA_XDP_ATTACHED")
    if isinstance(mode_raw, str) or mode_raw is None:  # pyroute2 maps the value to a name
        mode = {
            "xdp": "native",
            "xdpgeneric": "generic",
            "xdpoffload": "offload",
            "xdpmulti": "multi",
        }.get(mode_raw or "")
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
    from pyroute2.netlink.exceptions import NetlinkError

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


def create_netns(name: str) -> None:
    """Create the named network namespace ``/run/netns/NAME`` (as ``ip netns add``) with
    its loopback up.  Done in a short-lived thread: unshare(CLONE_NEWNET) there, bind-mount
    that thread's namespace on the name; no fork.  Raises OSError (EEXIST if it exists)."""
    os.makedirs(NETNS_RUN_DIR, exist_ok=True)
    path = os.path.join(NETNS_RUN_DIR, name)
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0o444))
    failure: list[OSError] = []

    def worker() -> None:
        try:
            libc.unshare(CLONE_NEWNET)
            src = f"/proc/self/task/{threading.get_native_id()}/ns/net".encode()
            libc.mount(src, path, b"none", MS_BIND, what=f"bind mount of {path}")
        except OSError as e:
            failure.append(e)

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
        libc.umount2(path, MNT_DETACH)
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
            libc.setns(new, CLONE_NEWNET)
        finally:
            os.close(new)
        try:
            yield
        finally:
            libc.setns(old, CLONE_NEWNET)
    finally:
        os.close(old)


def _unknown_netns(name: str) -> DiagnosticError:
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


def create_veth(
    name: str, peer: str, *, peer_netns: str | None = None, queues: int | None = None
) -> None:
    """Create veth pair ``name`` (current namespace) <-> ``peer`` (in ``peer_netns``).

    ``queues``: rx and tx queues of each end (IFLA_NUM_RX_QUEUES / IFLA_NUM_TX_QUEUES,
    as ``ip link add ... numrxqueues N numtxqueues N``); None keeps the kernel's 1.
    Both ends are left down; see :func:`configure`.
    """
    counts: dict = {} if queues is None else {"num_rx_queues": queues, "num_tx_queues": queues}
    peer_spec: dict = {"ifname": peer, **counts}
    if peer_netns:
        peer_spec["net_ns_fd"] = peer_netns
    with _ipr() as ipr:
        ipr.link("add", ifname=name, kind="veth", peer=peer_spec, **counts)


def _index(dev: str, netns: str | None) -> int:
    """ifindex of ``dev`` in ``netns`` (if_nametoindex, in that namespace); raises OSError."""
    if netns:
        with in_netns(netns):
            return socket.if_nametoindex(dev)
    return socket.if_nametoindex(dev)


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


def unique_name(prefix: str) -> str:
    """``prefix`` + 6 random hex digits; for interface names keep ``prefix`` <= 9
    characters (IFNAMSIZ: names are at most 15)."""
    return f"{prefix}{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True, slots=True)
class VethEnd:
    """One end of a :func:`veth_pair`: interface ``name``, its ``ifindex`` inside
    ``netns`` (None: the namespace of the caller), ``mac`` (text, ``aa:bb:...``) and
    ``address`` (IPv4 text without prefix length, or None)."""

    name: str
    ifindex: int
    netns: str | None
    mac: str
    address: str | None


@dataclass(frozen=True, slots=True)
class VethPair:
    """What :func:`veth_pair` made: ends ``a`` and ``b`` and the namespaces it created
    (``made_netns``; removed on exit)."""

    a: VethEnd
    b: VethEnd
    made_netns: tuple[str, ...]


def _disable_ipv6(dev: str, netns: str | None) -> None:
    """``net.ipv6.conf.DEV.disable_ipv6 = 1`` (/proc/sys/net is the calling thread's
    namespace); no error where IPv6 is not built in."""
    try:
        with in_netns(netns) if netns else nullcontext():
            with open(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", "w") as f:
                f.write("1")
    except OSError:
        pass


def _if_mine(
    mine: list[bool], fn: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs
) -> None:
    if mine[0]:
        fn(*args, **kwargs)


def _make_netns(stack: ExitStack, name: str) -> None:
    """Create namespace ``name`` with its removal on ``stack``, registered before the
    creation (an interrupt may come at any moment); a name that exists (EEXIST) is
    someone else's and stays."""
    mine = [True]
    stack.callback(_if_mine, mine, remove_netns, name)
    try:
        create_netns(name)
    except OSError as e:
        if e.errno == errno.EEXIST:
            mine[0] = False
        raise


@contextmanager
def netns(name: str) -> Iterator[str]:
    """A new network namespace ``/run/netns/NAME`` (loopback up) for the body; yields
    ``name``.  Removed on exit, also on exceptions and KeyboardInterrupt, taking the
    interfaces in it (a veth with one end there: the whole pair) and their XDP programs.
    The namespace of :func:`veth_pair`, for tests that need one without a veth, or one
    namespace several pairs share (``veth_pair(make_netns=(False, True))``).
    Raises OSError: EEXIST when the name is taken (that namespace is left alone)."""
    with ExitStack() as stack:
        _make_netns(stack, name)
        yield name


@contextmanager
def veth_pair(
    name_a: str | None = None,
    name_b: str | None = None,
    *,
    netns_a: str | None = None,
    netns_b: str | None = None,
    make_netns: bool | tuple[bool, bool] = True,
    addrs: tuple[str | None, str | None] = (None, None),
    prefixlen: int = 24,
    up: bool = True,
    mtu: int | None = None,
    neighbours: bool = False,
    disable_ipv6: bool = False,
    queues: int | None = None,
    prefix: str = "veth",
) -> Iterator[VethPair]:
    """A veth pair ``name_a`` <-> ``name_b`` for the body; everything made is removed on
    exit, also on exceptions and KeyboardInterrupt (turn SIGTERM into one with
    :func:`bpfdsl.runtime.demo.sigterm_as_interrupt`).

    ``name_a``/``name_b``: interface names (1-15 characters); None makes a unique one,
    ``prefix`` + ``a``/``b`` + 6 hex digits.  ``netns_a``/``netns_b``: the named network
    namespace (``/run/netns/NAME``) of each end, None for the caller's namespace.  With
    ``make_netns`` (the default) the given namespaces are created here (loopback up)
    and removed on exit, which takes the veth and any XDP program on it with them; with
    ``make_netns=False`` they must exist and are left alone; ``(make_a, make_b)`` says it
    per end (one namespace several pairs share, made with :func:`netns`: ``(False,
    True)``; an end in the caller's namespace ignores its flag).  ``addrs``: IPv4 address
    (text) of end a and end b or None, each ``/prefixlen``.  ``up``: bring both ends up
    (a veth has carrier only while both are).  ``mtu``: bytes of L3 payload per frame
    (IFLA_MTU) of both ends; None keeps the kernel's default (1500).  ``neighbours``:
    permanent neighbour (ARP) entries for the other end's address on each end, so no ARP
    round trip is needed (needs both ``addrs``).  ``disable_ipv6``: IPv6 off on both
    ends before they come up (no router solicitation, DAD or MLD frames).  ``queues``: rx
    and tx queues of each end (:func:`create_veth`; an XDP program sees its queue as
    ``rx_queue_index``), None for one.

    Cleaned up on exit: a namespace this call created (removed, taking its interfaces);
    else the veth itself (deleting one end deletes the pair, drivers/net/veth.c).
    Removal is registered before each creation, so an interrupt at any moment leaves
    nothing; a link that was never made by this call is not deleted.
    Raises OSError / pyroute2 NetlinkError from the kernel (EEXIST for a taken name);
    ValueError for one namespace given two different ``make_netns`` flags.
    """
    make_a, make_b = make_netns if isinstance(make_netns, tuple) else (make_netns, make_netns)
    if netns_a is not None and netns_a == netns_b and make_a != make_b:
        raise ValueError(f"veth_pair: namespace {netns_a!r} is both to be made and not")
    name_a = name_a or unique_name(f"{prefix}a")
    name_b = name_b or unique_name(f"{prefix}b")
    with ExitStack() as stack:
        made: list[str] = []
        for made_ns, make in ((netns_a, make_a), (netns_b, make_b)):
            if made_ns and make and made_ns not in made:
                _make_netns(stack, made_ns)
                made.append(made_ns)
        # create in the namespace of one end, with the peer moved to the other's
        here_ns: str | None = netns_a
        there_ns: str | None = netns_b
        here, there = name_a, name_b
        if netns_a is not None and netns_b is None:
            here_ns, here, there_ns, there = netns_b, name_b, netns_a, name_a
        peer_ns = there_ns if there_ns != here_ns else None
        owned = [True]
        if here_ns not in made:  # the veth outlives no namespace of ours: delete it
            stack.callback(_if_mine, owned, delete_link, here, netns=here_ns)
        try:
            with in_netns(here_ns) if here_ns else nullcontext():
                create_veth(here, there, peer_netns=peer_ns, queues=queues)
        except Exception:
            owned[0] = False  # refused (a taken name...): never ours
            raise
        ends = ((name_a, netns_a), (name_b, netns_b))
        if disable_ipv6:
            for dev, ns in ends:
                _disable_ipv6(dev, ns)
        macs = []
        for (dev, ns), addr in zip(ends, addrs, strict=True):
            if mtu is not None:
                with _ipr(ns) as ipr:
                    ipr.link("set", index=_index(dev, ns), mtu=mtu)
            macs.append(configure(dev, netns=ns, address=addr, prefixlen=prefixlen, up=up))
        if neighbours:
            if None in addrs:
                raise ValueError("veth_pair(neighbours=True) needs both addrs")
            add_neighbour(name_a, str(addrs[1]), macs[1], netns=netns_a)
            add_neighbour(name_b, str(addrs[0]), macs[0], netns=netns_b)
        a, b = (
            VethEnd(dev, _index(dev, ns), ns, mac, addr)
            for (dev, ns), mac, addr in zip(ends, macs, addrs, strict=True)
        )
        yield VethPair(a, b, tuple(made))


# ---- can an interface transmit XDP-redirected frames? (raw netlink: the attach path) --
#
# A devmap redirect hands the frame to the target's ndo_xdp_xmit; the kernel refuses it
# (the frame is dropped, counted in the driver's xdp drop stats) unless the target's
# xdp_features have NETDEV_XDP_ACT_NDO_XMIT (kernel/bpf/devmap.c __xdp_enqueue) and the
# target is up.  A veth sets that bit only while its *peer* has an XDP program or GRO
# turned on (drivers/net/veth.c veth_set_xdp_features / xdp_features_set_redirect_target),
# because veth_xdp_xmit queues the frame for the peer's NAPI, which runs only then, and
# only while both ends are up.  The xdp_features come from the generic-netlink family
# "netdev" (NETDEV_CMD_DEV_GET, Linux 6.3+); the veth's kind and peer from RTM_GETLINK.
# Both are spoken here with socket and struct, without pyroute2 (constants: bpfdsl.abi.net).


def _nl_attrs(data: bytes) -> dict[int, bytes]:
    """Netlink attributes (struct nlattr, 4-byte aligned) -> {type: payload}."""
    out, off = {}, 0
    while off + 4 <= len(data):
        length, kind = struct.unpack_from("<HH", data, off)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[off + 4 : off + length]  # without NLA_F_NESTED/BYTEORDER
        off += (length + 3) & ~3
    return out


def _nl_attr(kind: int, payload: bytes) -> bytes:
    raw = struct.pack("<HH", 4 + len(payload), kind) + payload
    return raw + bytes(-len(raw) % 4)


def _nl_call(proto: int, msg_type: int, payload: bytes) -> bytes | None:
    """One request, one answer: the payload of the first reply (after struct nlmsghdr),
    None when the kernel answers with an error (or netlink is unavailable)."""
    try:
        s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, proto)
    except OSError:
        return None
    try:
        s.settimeout(2.0)
        s.bind((0, 0))
        s.send(struct.pack("<IHHII", 16 + len(payload), msg_type, NLM_F_REQUEST, 1, 0) + payload)
        data = s.recv(65536)
    except OSError:
        return None
    finally:
        s.close()
    if len(data) < 16:
        return None
    length, kind = struct.unpack_from("<IH", data, 0)
    if kind == NLMSG_ERROR:
        return None
    return data[16:length]


def _genl_family(name: str) -> int | None:
    reply = _nl_call(
        NETLINK_GENERIC,
        GENL_ID_CTRL,
        struct.pack("<BBH", CTRL_CMD_GETFAMILY, 1, 0)
        + _nl_attr(CTRL_ATTR_FAMILY_NAME, name.encode() + b"\0"),
    )
    fid = _nl_attrs(reply[4:]).get(CTRL_ATTR_FAMILY_ID) if reply else None
    return struct.unpack("<H", fid[:2])[0] if fid else None


def xdp_features(index: int) -> int | None:
    """``NETDEV_XDP_ACT_*`` bits of interface ``index`` in the calling thread's network
    namespace (generic netlink ``netdev`` NETDEV_CMD_DEV_GET); None where the kernel does
    not say (before Linux 6.3, or no such interface)."""
    fam = _genl_family("netdev")
    if fam is None:
        return None
    reply = _nl_call(
        NETLINK_GENERIC,
        fam,
        struct.pack("<BBH", NETDEV_CMD_DEV_GET, 1, 0)
        + _nl_attr(NETDEV_A_DEV_IFINDEX, struct.pack("<I", index)),
    )
    raw = _nl_attrs(reply[4:]).get(NETDEV_A_DEV_XDP_FEATURES) if reply else None
    return struct.unpack("<Q", raw[:8])[0] if raw and len(raw) >= 8 else None


@dataclass(frozen=True, slots=True)
class LinkFacts:
    """RTM_GETLINK facts about one interface: ``name``, ``kind`` (``veth``... or "" for a
    physical device), ``peer`` ifindex (IFLA_LINK; for a veth its other end),
    ``peer_netnsid`` (None: the peer is in this namespace), ``up``/``lower_up``
    (IFF_UP/IFF_LOWER_UP: a veth has carrier only while both ends are up), ``xdp``
    (an XDP program is attached)."""

    name: str
    kind: str
    peer: int
    peer_netnsid: int | None
    up: bool
    lower_up: bool
    xdp: bool


def link_facts(index: int) -> LinkFacts | None:
    """:class:`LinkFacts` of interface ``index`` in this namespace; None if it is gone."""
    reply = _nl_call(NETLINK_ROUTE, RTM_GETLINK, struct.pack("<BxHiII", 0, 0, index, 0, 0))
    if not reply or len(reply) < 16:
        return None
    flags = struct.unpack_from("<I", reply, 8)[0]
    a = _nl_attrs(reply[16:])
    info = _nl_attrs(a.get(IFLA_LINKINFO, b""))
    xdp = _nl_attrs(a.get(IFLA_XDP, b""))
    nsid = a.get(IFLA_LINK_NETNSID)
    return LinkFacts(
        a.get(IFLA_IFNAME, b"").rstrip(b"\0").decode(errors="replace"),
        info.get(IFLA_INFO_KIND, b"").rstrip(b"\0").decode(errors="replace"),
        struct.unpack("<I", a[IFLA_LINK][:4])[0] if IFLA_LINK in a else 0,
        struct.unpack("<i", nsid[:4])[0] if nsid else None,
        bool(flags & IFF_UP),
        bool(flags & IFF_LOWER_UP),
        bool(xdp.get(IFLA_XDP_ATTACHED, b"\0")[:1] != b"\0"),
    )


def _xdp_state_raw(index: int) -> XdpState | None:
    """:func:`xdp_state` of ``index`` in this namespace by one RTM_GETLINK; None when the
    kernel answers with an error (the caller then asks through pyroute2, which says why)."""
    reply = _nl_call(NETLINK_ROUTE, RTM_GETLINK, struct.pack("<BxHiII", 0, 0, index, 0, 0))
    if not reply or len(reply) < 16:
        return None
    xdp = _nl_attrs(_nl_attrs(reply[16:]).get(IFLA_XDP, b""))

    def u32(kind: int) -> int:
        raw = xdp.get(kind, b"")
        return struct.unpack("<I", raw[:4])[0] if len(raw) >= 4 else 0

    attached = xdp.get(IFLA_XDP_ATTACHED, b"\0")[:1] or b"\0"
    return XdpState(
        ifindex=index,
        mode=_ATTACHED_MODES.get(attached[0]),
        prog_id=u32(IFLA_XDP_PROG_ID),
        drv_prog_id=u32(IFLA_XDP_DRV_PROG_ID),
        skb_prog_id=u32(IFLA_XDP_SKB_PROG_ID),
    )


def netns_named(nsid: int) -> str | None:
    """The name under /run/netns of the namespace this one calls ``nsid`` (the
    IFLA_LINK_NETNSID of a veth whose peer lives there); None when none matches."""
    try:
        names = sorted(os.listdir(NETNS_RUN_DIR))
    except OSError:
        return None
    for name in names[:4096]:
        try:
            fd = os.open(os.path.join(NETNS_RUN_DIR, name), os.O_RDONLY)
        except OSError:
            continue
        try:
            reply = _nl_call(
                NETLINK_ROUTE,
                RTM_GETNSID,
                struct.pack("<Bxxx", 0) + _nl_attr(NETNSA_FD, struct.pack("<I", fd)),
            )
        finally:
            os.close(fd)
        got = _nl_attrs(reply[4:]).get(NETNSA_NSID) if reply else None
        if got and struct.unpack("<i", got[:4])[0] == nsid:
            return name
    return None


def _peer(facts: LinkFacts) -> tuple[str | None, str | None]:
    """(peer name, its /run/netns name or None when here); (None, None) when the peer
    lives in a namespace without a name here."""
    if facts.peer_netnsid is None:
        return ifname(facts.peer), None
    ns = netns_named(facts.peer_netnsid)
    if ns is None:
        return None, None
    with in_netns(ns):
        return ifname(facts.peer), ns


def redirect_target_problem(index: int) -> tuple[str, str] | None:
    """(warning, remedy) when frames XDP-redirected into interface ``index`` (a devmap
    entry) would all be dropped by the kernel; None when it takes them (or cannot say).
    :func:`xdp_xmit_problem` decides."""
    return xdp_xmit_problem(index)


def xdp_tx_problem(index: int) -> tuple[str, str] | None:
    """(warning, remedy) when the frames a native-mode XDP program on interface ``index``
    returns ``XDP_TX`` for would all be dropped: XDP_TX sends the frame back out of the
    same device with its ndo_xdp_xmit path (a veth: drivers/net/veth.c veth_xdp_rcv ->
    veth_xdp_tx -> veth_xdp_flush_bq -> veth_xdp_xmit, which drops the frames unless the
    peer's NAPI runs: the peer has an XDP program or GRO on, and both ends are up), the
    same rule as a redirect into ``index``; :func:`xdp_xmit_problem` decides."""
    return xdp_xmit_problem(index, xdp_tx=True)


def xdp_xmit_problem(index: int, *, xdp_tx: bool = False) -> tuple[str, str] | None:
    """(warning, remedy) when the kernel would drop every frame transmitted out of
    interface ``index`` by XDP (its ndo_xdp_xmit: frames redirected into it, or with
    ``xdp_tx`` the frames its own XDP program returns XDP_TX for); None when it takes
    them (or cannot say).  The one rule both warnings use.

    Cases: a veth whose peer has neither an XDP program nor GRO (no NDO_XMIT); any other
    device without XDP transmit; a target (or veth peer) that is down.
    """
    facts = link_facts(index)
    if facts is None:
        return None
    dev = facts.name or f"ifindex {index}"
    frames = (
        f"every frame the XDP program of {dev} returns XDP_TX for (sent back out of {dev})"
        if xdp_tx
        else f"every frame redirected into {dev}"
    )
    feats = xdp_features(index)
    if facts.kind == "veth":
        name, ns = _peer(facts)
        if name is None:
            peer = f"ifindex {facts.peer} in another network namespace"
        else:
            peer = name + (f" (network namespace {ns})" if ns else "")
        run = f"nsenter --net={NETNS_RUN_DIR}/{ns} " if ns else ""
        if feats is not None and not feats & NETDEV_XDP_ACT_NDO_XMIT:
            remedy = (
                f"attach an XDP program to {name} (one returning XDP_PASS will do: "
                f"`{run}bpfdsl attach progs/xdp_pass.bpfd --dev {name}`), or turn GRO on "
                f"there: `{run}ethtool -K {name} gro on`"
                if name
                else "attach an XDP program to the peer (one returning XDP_PASS will do), "
                "or turn GRO on there (ethtool -K PEER gro on)"
            )
            return (
                f"{dev} is a veth and its peer {peer} has no XDP program (and GRO off): "
                f"the kernel drops {frames} (veth_xdp_xmit needs "
                "the peer's NAPI; the veth lacks NETDEV_XDP_ACT_NDO_XMIT)",
                remedy,
            )
        if not facts.lower_up:
            return (
                f"{dev} is a veth without carrier ({dev} or its peer {peer} is down): the "
                f"kernel drops {frames}",
                f"bring both ends up: `ip link set {dev} up`, and the same for the peer",
            )
        return None
    if xdp_tx:
        return None  # a native driver's XDP_TX is its own TX ring (NETDEV_XDP_ACT_BASIC)
    if feats is not None and not feats & NETDEV_XDP_ACT_NDO_XMIT:
        return (
            f"{dev} cannot transmit XDP-redirected frames (its driver"
            f"{' ' + facts.kind if facts.kind else ''} lacks ndo_xdp_xmit, "
            f"NETDEV_XDP_ACT_NDO_XMIT): the kernel drops {frames}",
            "redirect to an interface whose driver supports XDP transmit "
            "(see `ip -d link`, `ethtool -i`)",
        )
    if not facts.up:
        return (
            f"{dev} is down: the kernel drops {frames}",
            f"`ip link set {dev} up`",
        )
    return None
