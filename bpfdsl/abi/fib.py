"""``bpf_fib_lookup``: the struct, its flags and its results (imports nothing of bpfdsl).

Layout, flags and return codes as include/uapi/linux/bpf.h of Linux 6.18 (checked against
the running kernel's BTF by tests/backend/test_typed_helpers.py).  The struct is 64 bytes; the
helper refuses a smaller ``plen`` with -EINVAL (``bpf_xdp_fib_lookup``, net/core/filter.c).
Its unions overlay input and output fields: ``tot_len`` (in: bytes of the packet to check
against the MTU) and ``mtu_result`` (out, with BPF_FIB_LKUP_RET_FRAG_NEEDED); ``tos`` (IPv4)
/ ``flowinfo`` (IPv6) in and ``rt_metric`` out; the addresses; ``h_vlan_proto`` /
``h_vlan_TCI`` (out) and ``tbid`` (in, with BPF_FIB_LOOKUP_DIRECT | BPF_FIB_LOOKUP_TBID);
``mark`` (in, with BPF_FIB_LOOKUP_MARK) and ``smac`` (out).
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

BPF_FIB_LOOKUP_SIZE = 64  # sizeof(struct bpf_fib_lookup), bytes
AF_INET, AF_INET6 = 2, 10  # include/linux/socket.h; other families give -EAFNOSUPPORT


class FibLookupFlag(IntFlag):
    """``BPF_FIB_LOOKUP_*`` (bpf.h): the helper's flags argument; any other bit: -EINVAL."""

    DIRECT = 1 << 0  # look up in the table of the ingress device (skip FIB rules)
    OUTPUT = 1 << 1  # an egress lookup: ifindex is the output device
    SKIP_NEIGH = 1 << 2  # do not look up the neighbour (dmac not set, no NO_NEIGH)
    TBID = 1 << 3  # with DIRECT: look up in table ``tbid``
    SRC = 1 << 4  # fill ipv4_src/ipv6_src with the route's preferred source address
    MARK = 1 << 5  # use ``mark`` for policy routing (Linux 6.10)


FIB_LOOKUP_FLAGS = int(
    FibLookupFlag.DIRECT
    | FibLookupFlag.OUTPUT
    | FibLookupFlag.SKIP_NEIGH
    | FibLookupFlag.TBID
    | FibLookupFlag.SRC
    | FibLookupFlag.MARK
)
"""Every flag ``bpf_xdp_fib_lookup`` / ``bpf_skb_fib_lookup`` accept (net/core/filter.c)."""


class FibResult(IntEnum):
    """``BPF_FIB_LKUP_RET_*`` (bpf.h): what the helper returns besides negative errnos."""

    SUCCESS = 0  # forward: dmac, smac and ifindex are set
    BLACKHOLE = 1  # the route says drop
    UNREACHABLE = 2  # the route says drop, send ICMP unreachable
    PROHIBIT = 3  # the route says drop, send ICMP prohibited
    NOT_FWDED = 4  # not forwarded (local delivery, broadcast, ...)
    FWD_DISABLED = 5  # forwarding is off on the ingress device
    UNSUPP_LWT = 6  # the route has a lightweight tunnel encap
    NO_NEIGH = 7  # no neighbour entry for the next hop (dmac unknown)
    FRAG_NEEDED = 8  # tot_len is over the MTU (mtu_result is set)
    NO_SRC_ADDR = 9  # BPF_FIB_LOOKUP_SRC: no source address found


# (name, byte offset, size in bytes, kind): kind is "u" (host-order integer), "be"
# (network-order integer), "ipv6" (16-byte address) or "mac" (6 bytes).  Union members share
# an offset; a union's members are listed together, in bpf.h order.
FIB_LOOKUP_FIELDS: tuple[tuple[str, int, int, str], ...] = (
    ("family", 0, 1, "u"),
    ("l4_protocol", 1, 1, "u"),
    ("sport", 2, 2, "be"),
    ("dport", 4, 2, "be"),
    ("tot_len", 6, 2, "u"),
    ("mtu_result", 6, 2, "u"),
    ("ifindex", 8, 4, "u"),
    ("tos", 12, 1, "u"),
    ("flowinfo", 12, 4, "be"),
    ("rt_metric", 12, 4, "u"),
    ("ipv4_src", 16, 4, "be"),
    ("ipv6_src", 16, 16, "ipv6"),
    ("ipv4_dst", 32, 4, "be"),
    ("ipv6_dst", 32, 16, "ipv6"),
    ("h_vlan_proto", 48, 2, "be"),
    ("h_vlan_TCI", 50, 2, "be"),
    ("tbid", 48, 4, "u"),
    ("mark", 52, 4, "u"),
    ("smac", 52, 6, "mac"),
    ("dmac", 58, 6, "mac"),
)
