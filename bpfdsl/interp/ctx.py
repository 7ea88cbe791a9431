"""Program contexts of the userspace machine: ``struct xdp_md`` and ``struct sk_msg_md``.

Each context is a read-only region whose loads follow the kernel's ctx conversion
(net/core/filter.c ``xdp_convert_ctx_access`` / ``sk_msg_convert_ctx_access``) and access
rules (``xdp_is_valid_access`` / ``sk_msg_is_valid_access``), over a buffer laid out as
BPF_PROG_TEST_RUN lays it out (net/bpf/test_run.c): a 4096-byte frame, 256 bytes of XDP
headroom (the first 40 hold ``struct xdp_frame``), the packet, and 320 bytes of
``skb_shared_info`` tailroom at the end that adjust_tail may not grow into.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass

from bpfdsl.abi.ctx import BPF_SOCK_OPS, SK_MSG_MD, XDP_MD, CtxStruct, valid_access
from bpfdsl.abi.limits import XDP_FRAME_SIZE, XDP_MAX_LINEAR, XDP_PACKET_HEADROOM
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.interp.memory import Fault, PacketRegion, Ptr, Region

# struct xdp_md (bpfdsl.abi.ctx): offset -> member
_XDP_FIELDS = {f.off: f for f in XDP_MD.fields}


class CtxRegion(Region):
    """Base for context regions: loads are computed, stores are refused."""

    __slots__ = ()

    def store(self, p: Ptr, off: int, size: int, value: object) -> None:
        raise Fault(f"write to the {self.name} context (the kernel allows no ctx writes here)")

    def write_bytes(self, p: Ptr, data: bytes) -> None:
        self.store(p, 0, len(data), 0)

    def read_bytes(self, p: Ptr, size: int) -> bytes:
        raise Fault(f"the {self.name} context passed where memory was expected")


class XdpContext(CtxRegion):
    """``struct xdp_md`` over one frame.

    ``packet``: the frame bytes (wire order).  ``attach``: the program's expected attach
    type (``AttachType.XDP``, ``XDP_CPUMAP`` or ``XDP_DEVMAP``): ``egress_ifindex`` is
    readable only in devmap programs (``xdp_is_valid_access``).  ``meta``: initial
    metadata bytes placed just before the packet (as ``ctx_in.data`` of a test run).
    ``hints``: the RX hints a driver would give the metadata kfuncs (interp.kfuncs).
    """

    __slots__ = (
        "pkt", "frags", "ingress_ifindex", "rx_queue_index", "egress_ifindex", "attach", "hints"
    )  # fmt: skip

    def __init__(
        self,
        packet: bytes,
        *,
        attach: AttachType | None = AttachType.XDP,
        ingress_ifindex: int = 1,
        rx_queue_index: int = 0,
        egress_ifindex: int = 0,
        meta: bytes = b"",
        hints: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__("ctx", bytearray(XDP_MD.size), name="xdp_md", writable=False)
        self.hints = dict(hints or {})
        # like bpf_prog_test_run_xdp: the first 3520 bytes are linear, the rest goes into
        # page-sized frags (skb_shared_info) that programs reach only through helpers
        rest = packet[XDP_MAX_LINEAR:]
        self.frags = [
            bytearray(rest[i : i + XDP_FRAME_SIZE]) for i in range(0, len(rest), XDP_FRAME_SIZE)
        ]
        packet = packet[:XDP_MAX_LINEAR]
        buf = bytearray(XDP_FRAME_SIZE)
        start = XDP_PACKET_HEADROOM
        buf[start : start + len(packet)] = packet
        if meta:
            buf[start - len(meta) : start] = meta
        self.pkt = PacketRegion(buf, start, start + len(packet))
        self.pkt.lo = start - len(meta)
        self.attach = attach
        self.ingress_ifindex = ingress_ifindex
        self.rx_queue_index = rx_queue_index
        self.egress_ifindex = egress_ifindex

    # ---- packet geometry, in offsets of the frame buffer ----
    @property
    def data(self) -> int:
        return self.pkt.data

    @property
    def data_end(self) -> int:
        return self.pkt.hi

    @property
    def data_meta(self) -> int:
        return self.pkt.lo

    def data_out(self) -> bytes:
        """What BPF_PROG_TEST_RUN copies out: metadata + packet (data_meta..data_end),
        then the frags."""
        out = bytes(self.pkt.buf[self.pkt.lo : self.pkt.hi])
        return out + b"".join(self.frags) if self.frags else out

    def buff_len(self) -> int:
        """``xdp_get_buff_len``: linear bytes from data, plus the frags."""
        return self.pkt.hi - self.pkt.data + sum(len(f) for f in self.frags)

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        o = p.off + off
        f = _XDP_FIELDS.get(o)
        if f is None or size != f.size:
            raise Fault(f"invalid xdp_md access: offset {o} size {size} (only whole u32 fields)")
        name, pk = f.name, self.pkt
        if name == "data":
            return Ptr(pk, pk.data, pk.gen)
        if name == "data_end":
            return Ptr(pk, pk.hi, pk.gen)
        if name == "data_meta":
            return Ptr(pk, pk.lo, pk.gen)
        if f.attach is not None and self.attach not in f.attach:  # egress_ifindex
            raise Fault(f"xdp_md.{name} is readable only in xdp(devmap) programs")
        return getattr(self, name)


def _ip4(addr: str | int | bytes) -> bytes:
    if isinstance(addr, bytes):
        return addr
    if isinstance(addr, int):
        return addr.to_bytes(4, "big")
    return ipaddress.IPv4Address(addr).packed


def _ip6(addr: str | bytes) -> bytes:
    return addr if isinstance(addr, bytes) else ipaddress.IPv6Address(addr).packed


# Settable fields of the socket contexts (struct sk_msg_md and struct bpf_sock_ops, layouts
# from bpfdsl.abi.ctx): name -> (byte offset, size, form).  Forms: "u32"/"u64" plain
# numbers; "family" AF_INET/AF_INET6; "ip4"/"ip6" addresses (network order in the struct);
# "port_be" remote port (the struct holds it in network order, in the upper 16 bits of the
# u32 on little endian: skc_dport << 16); "port_host" local port (host order, skc_num);
# "op" a BPF_SOCK_OPS_* callback; "args" args[0..3]; "state" a BPF_TCP_* state;
# "cb_flags" BPF_SOCK_OPS_*_CB_FLAG bits.  Pointers (data, data_end, sk, skb_data) and
# ``sk_msg_md.size`` (the message length) follow from the run's input instead; the union's
# reply/replylong are the program's, skb_hwtstamp is not modelled.
_SOCK_FORMS = {
    "family": "family",
    "remote_ip4": "ip4",
    "local_ip4": "ip4",
    "remote_ip6": "ip6",
    "local_ip6": "ip6",
    "remote_port": "port_be",
    "local_port": "port_host",
}
SK_MSG_MD_FIELDS: dict[str, tuple[int, int, str]] = {
    n: (SK_MSG_MD[n].off, SK_MSG_MD[n].size, form) for n, form in _SOCK_FORMS.items()
}
_SOCK_OPS_FORMS = {
    "op": "op", "args": "args", **_SOCK_FORMS, "state": "state",
    "bpf_sock_ops_cb_flags": "cb_flags",
}  # fmt: skip
BPF_SOCK_OPS_FIELDS: dict[str, tuple[int, int, str]] = {
    f.name: (f.off, f.size, _SOCK_OPS_FORMS.get(f.name, "u64" if f.size == 8 else "u32"))
    for f in BPF_SOCK_OPS.fields
    if not (f.union or f.is_pointer or f.name == "skb_hwtstamp")
}
CTX_FIELDS: dict[str, dict[str, tuple[int, int, str]]] = {
    "sk_msg_md": SK_MSG_MD_FIELDS,
    "bpf_sock_ops": BPF_SOCK_OPS_FIELDS,
}


@dataclass
class SockInfo:
    """The socket an sk_msg program runs for, as the user describes it.

    Addresses as text (``"10.0.0.1"``, ``"fd00::1"``) or network-order bytes; ports are
    host-order numbers.  ``family``: ``socket.AF_INET`` or ``socket.AF_INET6``.
    """

    family: int = socket.AF_INET
    local_ip: str | bytes = "127.0.0.1"
    remote_ip: str | bytes = "127.0.0.1"
    local_port: int = 0
    remote_port: int = 0
    cookie: int = 1  # bpf_get_socket_cookie
    state: int = 1  # TCP_ESTABLISHED (include/net/tcp_states.h)

    @classmethod
    def from_fields(cls, fields: dict) -> SockInfo:
        """The socket a context's fields describe: ``family``, ``remote_ip4``/``local_ip4``
        or ``remote_ip6``/``local_ip6`` (text or network-order bytes), ``remote_port`` /
        ``local_port`` (host-order numbers), ``state``; others are ignored."""
        six = socket.AF_INET6 if {"remote_ip6", "local_ip6"} & set(fields) else socket.AF_INET
        family = fields.get("family", six)
        v, loopback = ("6", "::1") if family == socket.AF_INET6 else ("4", "127.0.0.1")
        return cls(
            family=family,
            local_ip=fields.get(f"local_ip{v}", loopback),
            remote_ip=fields.get(f"remote_ip{v}", loopback),
            local_port=fields.get("local_port", 0),
            remote_port=fields.get("remote_port", 0),
            state=fields.get("state", 1),  # BPF_TCP_ESTABLISHED
        )

    def describe(self) -> str:
        """``local 10.0.0.1:80 remote 10.0.0.2:4000`` (IPv6 in brackets)."""

        def ep(ip: str | bytes, port: int) -> str:
            if isinstance(ip, bytes):
                ip = str(ipaddress.ip_address(ip))
            return f"[{ip}]:{port}" if ":" in str(ip) else f"{ip}:{port}"

        return (
            f"local {ep(self.local_ip, self.local_port)} "
            f"remote {ep(self.remote_ip, self.remote_port)}"
        )

    def peer(self) -> SockInfo:
        """The other end of this connection (addresses and ports swapped), e.g. the socket
        a local-acceleration sk_msg program redirects into; cookie + 1."""
        return SockInfo(
            self.family,
            self.remote_ip,
            self.local_ip,
            self.remote_port,
            self.local_port,
            self.cookie + 1,
            self.state,
        )


def _put(img: bytearray, ctx: CtxStruct, name: str, data: bytes) -> None:
    """``data`` (exactly the member's size) into member ``name`` of the ``ctx`` image."""
    f = ctx[name]
    assert len(data) == f.size, (ctx.name, name, len(data))
    img[f.off : f.end] = data


def _addr_image(img: bytearray, s: SockInfo, ctx: CtxStruct) -> None:
    """family, remote_ip4, local_ip4, remote_ip6, local_ip6, remote_port, local_port of
    ``ctx``: the same run of fields in sk_msg_md and bpf_sock_ops."""
    _put(img, ctx, "family", s.family.to_bytes(4, "little"))
    if s.family == socket.AF_INET:
        _put(img, ctx, "remote_ip4", _ip4(s.remote_ip))
        _put(img, ctx, "local_ip4", _ip4(s.local_ip))
    else:
        _put(img, ctx, "remote_ip6", _ip6(s.remote_ip))
        _put(img, ctx, "local_ip6", _ip6(s.local_ip))
    port_be = int.from_bytes(s.remote_port.to_bytes(2, "big"), "little")
    _put(img, ctx, "remote_port", (port_be << 16).to_bytes(4, "little"))  # skc_dport << 16
    _put(img, ctx, "local_port", s.local_port.to_bytes(4, "little"))  # skc_num, host order


class SkMsgContext(CtxRegion):
    """``struct sk_msg_md`` over one message (one scatterlist element, all linear).

    Field values follow ``sk_msg_convert_ctx_access``: ``remote_port`` is the network-
    order port in the upper 16 bits (``skc_dport << 16`` on little endian), ``local_port``
    the host-order number (``skc_num``); addresses are the raw network-order words.
    """

    __slots__ = (
        "pkt",
        "sock",
        "image",
        "apply_bytes",
        "cork_bytes",
        "redirect",
        "redirect_miss",
    )

    def __init__(self, message: bytes, sock: SockInfo | None = None) -> None:
        super().__init__("ctx", bytearray(SK_MSG_MD.size), name="sk_msg_md", writable=False)
        self.sock = sock or SockInfo()
        self.pkt = PacketRegion(bytearray(message), 0, len(message), name="message")
        self.apply_bytes = 0
        self.cork_bytes = 0
        self.redirect: tuple | None = None
        # (map name, key bytes, flags, why) of the last msg_redirect_* that found no socket
        self.redirect_miss: tuple | None = None
        img = bytearray(SK_MSG_MD.size)
        _addr_image(img, self.sock, SK_MSG_MD)
        self.image = img

    def data_out(self) -> bytes:
        return bytes(self.pkt.buf)

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        o = p.off + off
        pk = self.pkt
        f = valid_access(SK_MSG_MD, o, size, False, None)
        if f is None:
            raise Fault(f"invalid sk_msg_md access: offset {o} size {size}")
        if f.name == "data":
            return Ptr(pk, pk.data, pk.gen)
        if f.name == "data_end":
            return Ptr(pk, pk.hi, pk.gen)
        if f.name == "sk":
            return Ptr(Region("sock", bytearray(80), name="bpf_sock", writable=False), 0)
        if f.name == "size":  # total message bytes (msg->sg.size)
            return len(pk.buf)
        return int.from_bytes(self.image[o : o + size], "little")


class SockOpsContext(CtxRegion):
    """``struct bpf_sock_ops`` for one callback ``op`` (``BPF_SOCK_OPS_*``) on a full TCP
    socket described by ``sock``; ``args`` fill ``args[0..3]``; ``fields`` set other
    numeric fields of :data:`BPF_SOCK_OPS_FIELDS` (``snd_cwnd``, ``srtt_us``,
    ``bpf_sock_ops_cb_flags``...; ``is_fullsock`` is 1 unless given).  Programs may write
    ``reply`` and ``sk_txhash`` (4 bytes at their offsets); other fields are read-only
    (``sock_ops_is_valid_access``, through :func:`bpfdsl.abi.ctx.valid_access`).  Loads
    follow ``sock_ops_convert_ctx_access``; the pointers and the skb_* fields of the
    header-option callbacks are not modelled."""

    __slots__ = ("sock", "op", "image", "cb_flags")
    SIZE = BPF_SOCK_OPS.size
    _UNMODELLED = ("skb_len", "skb_tcp_flags")  # and every pointer

    def __init__(
        self,
        op: int,
        sock: SockInfo | None = None,
        args: tuple[int, ...] = (),
        fields: dict[str, int] | None = None,
    ):
        super().__init__("ctx", bytearray(self.SIZE), name="bpf_sock_ops", writable=False)
        self.sock = sock or SockInfo()
        self.op = op
        self.cb_flags = 0
        ops = BPF_SOCK_OPS
        img = bytearray(self.SIZE)
        _put(img, ops, "op", op.to_bytes(4, "little"))
        at = ops["args"].off
        for i, a in enumerate(args[:4]):
            img[at + 4 * i : at + 4 + 4 * i] = (a & 0xFFFFFFFF).to_bytes(4, "little")
        _addr_image(img, self.sock, ops)
        _put(img, ops, "is_fullsock", (1).to_bytes(4, "little"))
        _put(img, ops, "state", self.sock.state.to_bytes(4, "little"))
        for name, value in (fields or {}).items():
            off, size, form = BPF_SOCK_OPS_FIELDS[name]
            if form in ("u32", "u64", "cb_flags"):
                img[off : off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        cb = ops["bpf_sock_ops_cb_flags"]
        self.cb_flags = int.from_bytes(img[cb.off : cb.end], "little")
        self.image = img

    @property
    def reply(self) -> int:
        f = BPF_SOCK_OPS["reply"]
        return int.from_bytes(self.image[f.off : f.end], "little")

    def data_out(self) -> bytes:
        return b""

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        o = p.off + off
        f = valid_access(BPF_SOCK_OPS, o, size, False, None)
        if f is None:
            raise Fault(f"invalid bpf_sock_ops access: offset {o} size {size}")
        if f.is_pointer or f.name in self._UNMODELLED:
            raise Fault(f"bpf_sock_ops field at offset {o} is not modelled")
        if f.name == "bpf_sock_ops_cb_flags":
            return self.cb_flags
        return int.from_bytes(self.image[o : o + size], "little")

    def store(self, p: Ptr, off: int, size: int, value: object) -> None:
        o = p.off + off
        if type(value) is int and valid_access(BPF_SOCK_OPS, o, size, True, None) is not None:
            self.image[o : o + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
            return
        raise Fault(f"write to bpf_sock_ops at offset {o} (only reply and sk_txhash)")
