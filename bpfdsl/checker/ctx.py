"""Context access tables per program type: which (offset, size) a program may read or write.

Sources: net/core/filter.c ``xdp_is_valid_access``, ``sk_msg_is_valid_access``,
``sock_ops_is_valid_access`` (Linux 6.x); layouts from include/uapi/linux/bpf.h
(checked against this machine's vmlinux BTF: xdp_md 24 bytes, sk_msg_md 80,
bpf_sock_ops 224).  A load may yield a pointer type (``data`` -> pkt ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.abi.uapi import AttachType, ProgramType
from bpfdsl.checker import domain as D


@dataclass(frozen=True, slots=True)
class CtxField:
    """One context field: ``off``/``size`` in bytes, pointer type it loads as (or SCALAR);
    ``narrow``: narrower (aligned) loads allowed (bpf_ctx_narrow_access_ok)."""

    name: str
    off: int
    size: int
    loads_as: int = D.SCALAR
    writable: bool = False
    narrow: bool = False


def _fields(spec: list[tuple]) -> dict[int, CtxField]:
    return {f[1]: CtxField(*f) for f in spec}


XDP_MD = _fields(
    [
        ("data", 0, 4, D.PKT),
        ("data_end", 4, 4, D.PKT_END),
        ("data_meta", 8, 4, D.PKT_META),
        ("ingress_ifindex", 12, 4),
        ("rx_queue_index", 16, 4),
        ("egress_ifindex", 20, 4),
    ]
)
SK_MSG_MD = _fields(
    [("data", 0, 8, D.PKT), ("data_end", 8, 8, D.PKT_END), ("family", 16, 4)]
    + [("remote_ip4", 20, 4), ("local_ip4", 24, 4)]
    + [(f"remote_ip6[{i}]", 28 + 4 * i, 4) for i in range(4)]
    + [(f"local_ip6[{i}]", 44 + 4 * i, 4) for i in range(4)]
    + [("remote_port", 60, 4), ("local_port", 64, 4), ("size", 68, 4)]
    + [("sk", 72, 8, D.SOCKET)]
)
_SOCK_OPS_U32 = (
    "family remote_ip4 local_ip4 r6_0 r6_1 r6_2 r6_3 l6_0 l6_1 l6_2 l6_3 remote_port "
    "local_port is_fullsock snd_cwnd srtt_us bpf_sock_ops_cb_flags state rtt_min "
    "snd_ssthresh rcv_nxt snd_nxt snd_una mss_cache ecn_flags rate_delivered "
    "rate_interval_us packets_out retrans_out total_retrans segs_in data_segs_in segs_out "
    "data_segs_out lost_out sacked_out"
).split()
BPF_SOCK_OPS = _fields(
    [("op", 0, 4), ("reply", 4, 4, D.SCALAR, True)]
    + [(f"args[{i}]", 8 + 4 * i, 4) for i in range(3)]
    + [(n, 20 + 4 * i, 4) for i, n in enumerate(_SOCK_OPS_U32)]
    + [("sk_txhash", 164, 4, D.SCALAR, True)]
    + [("bytes_received", 168, 8), ("bytes_acked", 176, 8)]
    + [("sk", 184, 8, D.SOCKET_OR_NULL), ("skb_data", 192, 8, D.PKT)]
    + [("skb_data_end", 200, 8, D.PKT_END), ("skb_len", 208, 4)]
    + [("skb_tcp_flags", 212, 4, D.SCALAR, False, True), ("skb_hwtstamp", 216, 8)]
)

CTX_SIZES = {"xdp_md": 24, "sk_msg_md": 80, "bpf_sock_ops": 224}
CTX_TABLES = {"xdp_md": XDP_MD, "sk_msg_md": SK_MSG_MD, "bpf_sock_ops": BPF_SOCK_OPS}


def ctx_access(
    ctx: str, off: int, size: int, write: bool, attach: AttachType | None
) -> CtxField | None:
    """The field a ``size``-byte access at byte ``off`` of context ``ctx`` reaches, or None
    when the kernel's ``*_is_valid_access`` refuses it (wrong offset, width or direction)."""
    table = CTX_TABLES.get(ctx)
    if table is None:
        return None
    if off < 0 or off >= CTX_SIZES[ctx] or off % size:
        return None
    if ctx == "xdp_md" and off == 20 and attach != AttachType.XDP_DEVMAP:
        return None
    f = table.get(off)
    if f is None:
        # narrow load inside a field that allows it
        base = off & ~3
        f = table.get(base)
        if f is None or not f.narrow or write:
            return None
        return f
    if write and not f.writable:
        return None
    if size == f.size:
        return f
    if f.narrow and not write and size < f.size:
        return f
    return None


def ctx_for_program_type(pt: ProgramType) -> str | None:
    """Context struct name of a program type (mirrors uapi.PROGRAM_KINDS' ``ctx``)."""
    return {
        ProgramType.XDP: "xdp_md",
        ProgramType.SK_MSG: "sk_msg_md",
        ProgramType.SOCK_OPS: "bpf_sock_ops",
    }.get(pt)
