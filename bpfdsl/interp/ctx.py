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

from bpfdsl.abi.uapi import MAX_SKB_FRAGS, XDP_PACKET_HEADROOM, AttachType
from bpfdsl.interp.memory import Fault, PacketRegion, Ptr, Region

XDP_FRAME_SIZE = 4096  # PAGE_SIZE: frame_sz of BPF_PROG_TEST_RUN buffers
XDP_SHINFO_TAILROOM = 320  # SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) on x86_64
XDP_FRAME_STRUCT = 40  # sizeof(struct xdp_frame), kept at the start of the headroom
XDP_MAX_LINEAR = XDP_FRAME_SIZE - XDP_PACKET_HEADROOM - XDP_SHINFO_TAILROOM  # 3520 bytes
# the longest frame bpf_prog_test_run_xdp takes: linear part + a page per frag
# (net/bpf/test_run.c: -ENOMEM past MAX_SKB_FRAGS), 73152 bytes
XDP_TEST_RUN_MAX = XDP_MAX_LINEAR + MAX_SKB_FRAGS * XDP_FRAME_SIZE
ETH_HLEN = 14

# struct xdp_md (include/uapi/linux/bpf.h): six u32 fields
_XDP_FIELDS = {
    0: "data",
    4: "data_end",
    8: "data_meta",
    12: "ingress_ifindex",
    16: "rx_queue_index",
    20: "egress_ifindex",
}


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
        super().__init__("ctx", bytearray(24), name="xdp_md", writable=False)
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
        name = _XDP_FIELDS.get(o)
        if name is None or size != 4:
            raise Fault(f"invalid xdp_md access: offset {o} size {size} (only whole u32 fields)")
        pk = self.pkt
        if name == "data":
            return Ptr(pk, pk.data, pk.gen)
        if name == "data_end":
            return Ptr(pk, pk.hi, pk.gen)
        if name == "data_meta":
            return Ptr(pk, pk.lo, pk.gen)
        if name == "egress_ifindex" and self.attach != AttachType.XDP_DEVMAP:
            raise Fault("xdp_md.egress_ifindex is readable only in xdp(devmap) programs")
        return getattr(self, name)


def _ip4(addr: str | int | bytes) -> bytes:
    if isinstance(addr, bytes):
        return addr
    if isinstance(addr, int):
        return addr.to_bytes(4, "big")
    return ipaddress.IPv4Address(addr).packed


def _ip6(addr: str | bytes) -> bytes:
    return addr if isinstance(addr, bytes) else ipaddress.IPv6Address(addr).packed


# Settable fields of the socket contexts (include/uapi/linux/bpf.h struct sk_msg_md and
# struct bpf_sock_ops): name -> (byte offset, size, form).  Forms: "u32"/"u64" plain
# numbers; "family" AF_INET/AF_INET6; "ip4"/"ip6" addresses (network order in the struct);
# "port_be" remote port (the struct holds it in network order, in the upper 16 bits of the
# u32 on little endian: skc_dport << 16); "port_host" local port (host order, skc_num);
# "op" a BPF_SOCK_OPS_* callback; "args" args[0..3]; "state" a BPF_TCP_* state;
# "cb_flags" BPF_SOCK_OPS_*_CB_FLAG bits.  Pointers (data, data_end, sk, skb_data) and
# ``sk_msg_md.size`` (the message length) follow from the run's input instead.
_SOCK_FIELDS = {
    "family": (0, 4, "family"),
    "remote_ip4": (4, 4, "ip4"),
    "local_ip4": (8, 4, "ip4"),
    "remote_ip6": (12, 16, "ip6"),
    "local_ip6": (28, 16, "ip6"),
    "remote_port": (44, 4, "port_be"),
    "local_port": (48, 4, "port_host"),
}
SK_MSG_MD_FIELDS: dict[str, tuple[int, int, str]] = {
    k: (o + 16, n, f) for k, (o, n, f) in _SOCK_FIELDS.items()
}
# the u32 run of struct bpf_sock_ops after the socket fields, from offset 72 on
_SOCK_OPS_U32 = (
    "is_fullsock", "snd_cwnd", "srtt_us", "bpf_sock_ops_cb_flags", "state", "rtt_min",
    "snd_ssthresh", "rcv_nxt", "snd_nxt", "snd_una", "mss_cache", "ecn_flags",
    "rate_delivered", "rate_interval_us", "packets_out", "retrans_out", "total_retrans",
    "segs_in", "data_segs_in", "segs_out", "data_segs_out", "lost_out", "sacked_out",
    "sk_txhash",
)  # fmt: skip
_SOCK_OPS_FORMS = {"state": "state", "bpf_sock_ops_cb_flags": "cb_flags"}
BPF_SOCK_OPS_FIELDS: dict[str, tuple[int, int, str]] = {
    "op": (0, 4, "op"),
    "args": (4, 16, "args"),
    **{k: (o + 20, n, f) for k, (o, n, f) in _SOCK_FIELDS.items()},
    **{n: (72 + 4 * i, 4, _SOCK_OPS_FORMS.get(n, "u32")) for i, n in enumerate(_SOCK_OPS_U32)},
    "bytes_received": (168, 8, "u64"),
    "bytes_acked": (176, 8, "u64"),
    "skb_len": (208, 4, "u32"),
    "skb_tcp_flags": (212, 4, "u32"),
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


def _addr_image(img: bytearray, s: SockInfo, at: int) -> None:
    """family, remote_ip4, local_ip4, remote_ip6, local_ip6, remote_port, local_port from
    byte ``at`` on: the same run of fields in sk_msg_md and bpf_sock_ops."""
    img[at : at + 4] = s.family.to_bytes(4, "little")
    if s.family == socket.AF_INET:
        img[at + 4 : at + 8] = _ip4(s.remote_ip)
        img[at + 8 : at + 12] = _ip4(s.local_ip)
    else:
        img[at + 12 : at + 28] = _ip6(s.remote_ip)
        img[at + 28 : at + 44] = _ip6(s.local_ip)
    port_be = int.from_bytes(s.remote_port.to_bytes(2, "big"), "little")
    img[at + 44 : at + 48] = (port_be << 16).to_bytes(4, "little")  # skc_dport << 16
    img[at + 48 : at + 52] = s.local_port.to_bytes(4, "little")  # skc_num, host order


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
        super().__init__("ctx", bytearray(80), name="sk_msg_md", writable=False)
        self.sock = sock or SockInfo()
        self.pkt = PacketRegion(bytearray(message), 0, len(message), name="message")
        self.apply_bytes = 0
        self.cork_bytes = 0
        self.redirect: tuple | None = None
        # (map name, key bytes, flags, why) of the last msg_redirect_* that found no socket
        self.redirect_miss: tuple | None = None
        img = bytearray(80)
        _addr_image(img, self.sock, 16)
        self.image = img

    def data_out(self) -> bytes:
        return bytes(self.pkt.buf)

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        o = p.off + off
        pk = self.pkt
        if o == 0 and size == 8:
            return Ptr(pk, pk.data, pk.gen)
        if o == 8 and size == 8:
            return Ptr(pk, pk.hi, pk.gen)
        if o == 72 and size == 8:
            return Ptr(Region("sock", bytearray(80), name="bpf_sock", writable=False), 0)
        if 16 <= o < 72 and size == 4 and o % 4 == 0:
            if o == 68:  # size: total message bytes (msg->sg.size)
                return len(pk.buf)
            return int.from_bytes(self.image[o : o + 4], "little")
        raise Fault(f"invalid sk_msg_md access: offset {o} size {size}")


class SockOpsContext(CtxRegion):
    """``struct bpf_sock_ops`` for one callback ``op`` (``BPF_SOCK_OPS_*``) on a full TCP
    socket described by ``sock``; ``args`` fill ``args[0..3]``; ``fields`` set other
    numeric fields of :data:`BPF_SOCK_OPS_FIELDS` (``snd_cwnd``, ``srtt_us``,
    ``bpf_sock_ops_cb_flags``...; ``is_fullsock`` is 1 unless given).  Programs may write
    ``reply``/``replylong`` and ``sk_txhash``; other fields are read-only
    (``sock_ops_is_valid_access``).  Loads follow ``sock_ops_convert_ctx_access``."""

    __slots__ = ("sock", "op", "image", "cb_flags")
    SIZE = 224
    _WRITABLE = ((4, 20), (164, 168))  # reply/replylong, sk_txhash
    _U64 = (168, 176, 184, 192, 200, 216)  # bytes_received/acked, sk, skb_data*, hwtstamp

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
        img = bytearray(self.SIZE)
        img[0:4] = op.to_bytes(4, "little")
        for i, a in enumerate(args[:4]):
            img[4 + 4 * i : 8 + 4 * i] = (a & 0xFFFFFFFF).to_bytes(4, "little")
        _addr_image(img, self.sock, 20)
        img[72:76] = (1).to_bytes(4, "little")  # is_fullsock
        img[88:92] = self.sock.state.to_bytes(4, "little")
        for name, value in (fields or {}).items():
            off, size, form = BPF_SOCK_OPS_FIELDS[name]
            if form in ("u32", "u64", "cb_flags"):
                img[off : off + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        self.cb_flags = int.from_bytes(img[84:88], "little")
        self.image = img

    @property
    def reply(self) -> int:
        return int.from_bytes(self.image[4:8], "little")

    def data_out(self) -> bytes:
        return b""

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        o = p.off + off
        if o in self._U64 and size == 8:
            if o in (184, 192, 200):
                raise Fault(f"bpf_sock_ops field at offset {o} is not modelled")
            return int.from_bytes(self.image[o : o + 8], "little")
        if 0 <= o < 168 and size == 4 and o % 4 == 0:
            if o == 84:
                return self.cb_flags
            return int.from_bytes(self.image[o : o + 4], "little")
        raise Fault(f"invalid bpf_sock_ops access: offset {o} size {size}")

    def store(self, p: Ptr, off: int, size: int, value: object) -> None:
        o = p.off + off
        if type(value) is int and size == 4 and any(a <= o < b for a, b in self._WRITABLE):
            self.image[o : o + 4] = (value & 0xFFFFFFFF).to_bytes(4, "little")
            return
        raise Fault(f"write to bpf_sock_ops at offset {o} (only reply and sk_txhash)")
