"""Program context structs: the one table of their layouts and access rights.

Every module that needs a context field (the back end's BTF, the checker's access rules,
the interpreter's context regions, the language's ``ctx.field`` names, test runs' and
the benchmark's ``ctx_in`` images) reads it from here.

Sources:

- Layouts: include/uapi/linux/bpf.h ``struct xdp_md``, ``struct sk_msg_md``,
  ``struct bpf_sock_ops`` (x86_64/bpf, natural alignment; ``__bpf_md_ptr`` is a pointer
  in a union with a ``__u64``, 8 bytes).  tests/abi/test_ctx.py compares every offset,
  size and struct size with ``offsetof``/``sizeof`` from this machine's header, compiled.
- Rights: net/core/filter.c ``xdp_is_valid_access``, ``sk_msg_is_valid_access``,
  ``sock_ops_is_valid_access`` (Linux 6.18, after e09299225d5b "bpf: Reject narrower
  access to pointer ctx fields", v6.17: a pointer field is reached only by a full 8-byte
  load at its own offset).
- ``since``: the first kernel release whose UAPI header has the field (libbpf's mirror of
  the header from 4.19 on; earlier ones from the kernel commits that added them:
  6a773a15a1e8 xdp 4.8, de8f3a83b0a0 data_meta 4.15, 02dd3291b2f0 xdp_rxq_info 4.16,
  40304b2a1567 sock_ops 4.13, de525be2ca27 / f19397a5c656 / 44f0e43037d3 sock_ops 4.16,
  4f738adba30a sk_msg 4.17, 303def35f64e sk_msg sock fields 4.18).

``__sk_buff`` (the context of the read-only sk_skb/tc/socket kinds) is not described:
bpfdsl does not model it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import Enum

from bpfdsl.abi.prog_types import AttachType, ProgramType


class RegType(Enum):
    """What a context load yields (the kernel's ``info->reg_type``, include/linux/bpf.h)."""

    SCALAR_VALUE = "scalar"
    PTR_TO_PACKET = "pkt"
    PTR_TO_PACKET_META = "pkt_meta"
    PTR_TO_PACKET_END = "pkt_end"
    PTR_TO_SOCKET = "sock"
    PTR_TO_SOCKET_OR_NULL = "sock_or_null"


@dataclass(frozen=True, slots=True)
class CtxField:
    """One member of a context struct.

    ``off``/``size``: bytes (``size`` of the whole member: 16 for ``__u32[4]``).  ``ctype``:
    the C type as bpf.h writes it (``__u32``, ``__u32[4]``, ``__u64``, ``__bpf_md_ptr``).
    ``elem``: the width of one element (4 for ``__u32[4]``; == ``size`` otherwise): a load
    reads one element.  ``reads_as``: the register type a load gives.  ``read``/``write``:
    the directions ``*_is_valid_access`` allows, with exactly ``elem`` bytes; ``narrow``:
    loads of 1 or 2 bytes at its offset are allowed too (``bpf_ctx_narrow_access_ok`` under
    a ``case offsetof()``: a byte after the first falls to the 4-byte default).
    ``write_offloaded``: writable only by a program offloaded to a NIC
    (``bpf_prog_is_offloaded``), which bpfdsl does not load.  ``attach``: the expected
    attach types that may touch it at all (None: every attach type of the program type).
    ``union``: a later member of an anonymous union (the first member names the bytes).
    ``since``: the kernel release (major, minor) that added it.
    """

    name: str
    off: int
    size: int
    ctype: str
    since: tuple[int, int]
    reads_as: RegType = RegType.SCALAR_VALUE
    read: bool = True
    write: bool = False
    narrow: bool = False
    write_offloaded: bool = False
    attach: frozenset[AttachType] | None = None
    union: bool = False
    elem: int = 0

    def __post_init__(self) -> None:
        if not self.elem:
            object.__setattr__(self, "elem", self.size)

    @property
    def end(self) -> int:
        """First byte after the member."""
        return self.off + self.size

    @property
    def is_pointer(self) -> bool:
        """A ``__bpf_md_ptr`` member (or xdp_md's u32 ``data``/``data_end``/``data_meta``):
        its loads give a pointer, not a number."""
        return self.reads_as is not RegType.SCALAR_VALUE

    def elements(self) -> list[tuple[str, int]]:
        """(name, offset) of each element a load may read: ``remote_ip6[0]`` .. ``[3]`` for
        an array, the member itself otherwise."""
        if self.elem == self.size:
            return [(self.name, self.off)]
        n = self.size // self.elem
        return [(f"{self.name}[{i}]", self.off + i * self.elem) for i in range(n)]


@dataclass(frozen=True, slots=True)
class CtxStruct:
    """A context struct: ``name`` as in bpf.h (``xdp_md``), ``size`` = ``sizeof`` in bytes,
    ``fields`` in declaration order, ``program_types`` whose context it is."""

    name: str
    size: int
    fields: tuple[CtxField, ...]
    program_types: tuple[ProgramType, ...]

    def field(self, name: str) -> CtxField:
        """The member called ``name`` (KeyError when there is none)."""
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"struct {self.name} has no member {name}")

    def __getitem__(self, name: str) -> CtxField:
        return self.field(name)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.fields)

    def at(self, off: int) -> list[CtxField]:
        """The members whose bytes include byte ``off`` (several inside a union)."""
        return [f for f in self.fields if f.off <= off < f.end]

    def layout(self) -> list[CtxField]:
        """The members that name their bytes: union members after the first left out."""
        return [f for f in self.fields if not f.union]

    def image(self, **values: int) -> bytes:
        """The struct's bytes (little endian) with the given scalar members set, the rest
        zero: the ``ctx_in`` of BPF_PROG_TEST_RUN (``data_end`` = packet length for xdp_md,
        net/bpf/test_run.c ``xdp_convert_md_to_buff``)."""
        buf = bytearray(self.size)
        for name, value in values.items():
            f = self.field(name)
            if f.elem != f.size or f.ctype == PTR:
                raise ValueError(f"{self.name}.{name} is not a scalar member")
            fmt = {4: "<I", 8: "<Q"}[f.size]
            struct.pack_into(fmt, buf, f.off, value & ((1 << (8 * f.size)) - 1))
        return bytes(buf)


U32, U32X4, U64, PTR = "__u32", "__u32[4]", "__u64", "__bpf_md_ptr"
_R = RegType


def _u32(name: str, off: int, since: tuple[int, int], **kw: object) -> CtxField:
    return CtxField(name, off, 4, U32, since, **kw)  # type: ignore[arg-type]


def _u32x4(name: str, off: int, since: tuple[int, int], **kw: object) -> CtxField:
    return CtxField(name, off, 16, U32X4, since, elem=4, **kw)  # type: ignore[arg-type]


def _ptr(name: str, off: int, since: tuple[int, int], reads_as: RegType) -> CtxField:
    return CtxField(name, off, 8, PTR, since, reads_as=reads_as)


# struct xdp_md: xdp_is_valid_access allows only 4-byte loads at a member's offset;
# egress_ifindex only in BPF_XDP_DEVMAP programs; the one write (rx_queue_index) only
# for offloaded programs.
XDP_MD = CtxStruct(
    "xdp_md",
    24,
    (
        _u32("data", 0, (4, 8), reads_as=_R.PTR_TO_PACKET),
        _u32("data_end", 4, (4, 8), reads_as=_R.PTR_TO_PACKET_END),
        _u32("data_meta", 8, (4, 15), reads_as=_R.PTR_TO_PACKET_META),
        _u32("ingress_ifindex", 12, (4, 16)),
        _u32("rx_queue_index", 16, (4, 16), write_offloaded=True),
        _u32("egress_ifindex", 20, (5, 8), attach=frozenset({AttachType.XDP_DEVMAP})),
    ),
    (ProgramType.XDP,),
)

# The socket run sk_msg_md and bpf_sock_ops share (family .. local_port), at ``base``.
_SOCK_RUN = (
    ("family", 0, U32),
    ("remote_ip4", 4, U32),  # network order
    ("local_ip4", 8, U32),  # network order
    ("remote_ip6", 12, U32X4),  # network order
    ("local_ip6", 28, U32X4),  # network order
    ("remote_port", 44, U32),  # network order (skc_dport << 16 on little endian)
    ("local_port", 48, U32),  # host order (skc_num)
)


def _sock_run(base: int, since: tuple[int, int]) -> tuple[CtxField, ...]:
    return tuple(
        (_u32x4 if ct == U32X4 else _u32)(name, base + off, since) for name, off, ct in _SOCK_RUN
    )


# struct sk_msg_md: sk_msg_is_valid_access: no writes; u32 members only as 4-byte loads,
# pointers only as 8-byte loads at their offset.
SK_MSG_MD = CtxStruct(
    "sk_msg_md",
    80,
    (
        _ptr("data", 0, (4, 17), _R.PTR_TO_PACKET),
        _ptr("data_end", 8, (4, 17), _R.PTR_TO_PACKET_END),
        *_sock_run(16, (4, 18)),
        _u32("size", 68, (5, 0)),  # total bytes of the message (msg->sg.size)
        _ptr("sk", 72, (5, 8), _R.PTR_TO_SOCKET),
    ),
    (ProgramType.SK_MSG,),
)

_SOCK_OPS_TCP = (  # u32 members after the socket run, from offset 72 on (all 4.16)
    "is_fullsock", "snd_cwnd", "srtt_us", "bpf_sock_ops_cb_flags", "state", "rtt_min",
    "snd_ssthresh", "rcv_nxt", "snd_nxt", "snd_una", "mss_cache", "ecn_flags",
    "rate_delivered", "rate_interval_us", "packets_out", "retrans_out", "total_retrans",
    "segs_in", "data_segs_in", "segs_out", "data_segs_out", "lost_out", "sacked_out",
    "sk_txhash",
)  # fmt: skip

# struct bpf_sock_ops: sock_ops_is_valid_access: writes only to reply and sk_txhash
# (4 bytes); bytes_received/bytes_acked, skb_hwtstamp and the pointers only as 8-byte
# loads; skb_tcp_flags also narrower; every other member as a 4-byte load.
BPF_SOCK_OPS = CtxStruct(
    "bpf_sock_ops",
    224,
    (
        _u32("op", 0, (4, 13)),
        # union { __u32 args[4]; __u32 reply; __u32 replylong[4]; }
        _u32x4("args", 4, (4, 16)),
        _u32("reply", 4, (4, 13), write=True, union=True),
        _u32x4("replylong", 4, (4, 13), union=True),
        *_sock_run(20, (4, 13)),
        *(
            _u32(n, 72 + 4 * i, (4, 16), write=n == "sk_txhash")
            for i, n in enumerate(_SOCK_OPS_TCP)
        ),
        CtxField("bytes_received", 168, 8, U64, (4, 16)),
        CtxField("bytes_acked", 176, 8, U64, (4, 16)),
        _ptr("sk", 184, (5, 3), _R.PTR_TO_SOCKET_OR_NULL),
        _ptr("skb_data", 192, (5, 10), _R.PTR_TO_PACKET),
        _ptr("skb_data_end", 200, (5, 10), _R.PTR_TO_PACKET_END),
        _u32("skb_len", 208, (5, 10)),
        _u32("skb_tcp_flags", 212, (5, 10), narrow=True),
        CtxField("skb_hwtstamp", 216, 8, U64, (6, 2)),
    ),
    (ProgramType.SOCK_OPS,),
)

CTX_STRUCTS: dict[str, CtxStruct] = {s.name: s for s in (XDP_MD, SK_MSG_MD, BPF_SOCK_OPS)}


def ctx_struct(name: str) -> CtxStruct | None:
    """The context struct called ``name`` (``prog_types.ProgramKind.ctx``), None if not modelled."""
    return CTX_STRUCTS.get(name)


def ctx_for_program_type(pt: ProgramType) -> CtxStruct | None:
    """The context struct of programs of type ``pt``, None if bpfdsl does not model it."""
    for s in CTX_STRUCTS.values():
        if pt in s.program_types:
            return s
    return None


def valid_access(
    ctx: CtxStruct, off: int, size: int, write: bool, attach: AttachType | None
) -> CtxField | None:
    """The member a ``size``-byte access at byte ``off`` reaches, or None when the kernel's
    ``*_is_valid_access`` refuses it (outside the struct, misaligned, wrong width, wrong
    direction or attach type).  Offloaded programs are not modelled (no xdp_md writes)."""
    if off < 0 or size <= 0 or off >= ctx.size or off % size:
        return None
    for f in ctx.at(off):
        if f.attach is not None and attach not in f.attach:
            return None
        start = f.off + (off - f.off) // f.elem * f.elem  # the element holding ``off``
        if write:
            if f.write and off == f.off and size == f.size:
                return f
            continue
        if not f.read:
            continue
        if off == start and size == f.elem:
            return f
        if f.narrow and off == f.off and size < f.elem:
            return f
    return None
