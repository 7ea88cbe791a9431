"""Built-in packet header layouts (front end data): what ``parse NAME`` gives.

Offsets, sizes and field names are the kernel's (include/uapi/linux/if_ether.h ethhdr,
if_vlan.h vlan_hdr, ip.h iphdr, ipv6.h ipv6hdr, tcp.h tcphdr, udp.h udphdr, icmp.h
icmphdr, icmpv6.h icmp6hdr).  Multi-byte fields are network order (be16/be32).
Bit fields (ihl, version, doff, TCP flags) are read-only views of one byte.
``csum``: offset of the header's own checksum and whether it covers the IP pseudo-header.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.lang import types as T


@dataclass(frozen=True, slots=True)
class HField:
    """One header field: byte ``offset``, ``type``; for bit fields ``shift``/``width``
    (bits; width 0 = the whole field).  Immutable, equal by value."""

    offset: int
    type: T.Type
    shift: int = 0
    width: int = 0

    @property
    def writable(self) -> bool:
        return self.width == 0


@dataclass(eq=False, slots=True)
class Header:
    """``size``: fixed part in bytes.  ``length``: how the full length is found
    (``None`` fixed, ``"ihl"`` ipv4 ihl*4, ``"doff"`` tcp doff*4).  ``csum``: offset of
    the checksum field or None; ``pseudo``: the checksum covers the IP pseudo-header;
    ``zero_ok``: a zero checksum means "none" and stays zero (UDP over IPv4).
    Compared by identity (one object per built-in header)."""

    name: str
    c_name: str
    size: int
    fields: dict[str, HField] = field(default_factory=dict)
    length: str | None = None
    csum: int | None = None
    pseudo: bool = False
    zero_ok: bool = False
    l4: bool = False

    def __repr__(self) -> str:
        return f"Header({self.name!r}, {self.c_name!r}, size={self.size})"


_F = HField
HEADERS: dict[str, Header] = {
    "ethernet": Header(
        "ethernet",
        "ethhdr",
        14,
        {"h_dest": _F(0, T.MAC), "h_source": _F(6, T.MAC), "h_proto": _F(12, T.BE16)},
    ),
    "byte": Header("byte", "__u8", 1, {"value": _F(0, T.U8)}),  # payload, one byte a step
    "vlan": Header(
        "vlan",
        "vlan_hdr",
        4,
        {"h_vlan_TCI": _F(0, T.BE16), "h_vlan_encapsulated_proto": _F(2, T.BE16)},
    ),
    "ipv4": Header(
        "ipv4",
        "iphdr",
        20,
        {
            "ihl": _F(0, T.U8, 0, 4),
            "version": _F(0, T.U8, 4, 4),
            "tos": _F(1, T.U8),
            "tot_len": _F(2, T.BE16),
            "id": _F(4, T.BE16),
            "frag_off": _F(6, T.BE16),
            "ttl": _F(8, T.U8),
            "protocol": _F(9, T.U8),
            "check": _F(10, T.BE16),
            "saddr": _F(12, T.BE32),
            "daddr": _F(16, T.BE32),
        },
        length="ihl",
        csum=10,
    ),
    "ipv6": Header(
        "ipv6",
        "ipv6hdr",
        40,
        {
            "priority": _F(0, T.U8, 0, 4),
            "version": _F(0, T.U8, 4, 4),
            "payload_len": _F(4, T.BE16),
            "nexthdr": _F(6, T.U8),
            "hop_limit": _F(7, T.U8),
            "saddr": _F(8, T.IPV6_ADDR),
            "daddr": _F(24, T.IPV6_ADDR),
        },
    ),
    "tcp": Header(
        "tcp",
        "tcphdr",
        20,
        {
            "source": _F(0, T.BE16),
            "dest": _F(2, T.BE16),
            "seq": _F(4, T.BE32),
            "ack_seq": _F(8, T.BE32),
            "doff": _F(12, T.U8, 4, 4),
            "fin": _F(13, T.U8, 0, 1),
            "syn": _F(13, T.U8, 1, 1),
            "rst": _F(13, T.U8, 2, 1),
            "psh": _F(13, T.U8, 3, 1),
            "ack": _F(13, T.U8, 4, 1),
            "urg": _F(13, T.U8, 5, 1),
            "ece": _F(13, T.U8, 6, 1),
            "cwr": _F(13, T.U8, 7, 1),
            "window": _F(14, T.BE16),
            "check": _F(16, T.BE16),
            "urg_ptr": _F(18, T.BE16),
        },
        length="doff",
        csum=16,
        pseudo=True,
        l4=True,
    ),
    "udp": Header(
        "udp",
        "udphdr",
        8,
        {
            "source": _F(0, T.BE16),
            "dest": _F(2, T.BE16),
            "len": _F(4, T.BE16),
            "check": _F(6, T.BE16),
        },
        csum=6,
        pseudo=True,
        zero_ok=True,
        l4=True,
    ),
    "icmp": Header(
        "icmp",
        "icmphdr",
        8,
        {
            "type": _F(0, T.U8),
            "code": _F(1, T.U8),
            "checksum": _F(2, T.BE16),
            "id": _F(4, T.BE16),
            "sequence": _F(6, T.BE16),
            "gateway": _F(4, T.BE32),
        },
        csum=2,
        l4=True,
    ),
    "icmpv6": Header(
        "icmpv6",
        "icmp6hdr",
        8,
        {
            "icmp6_type": _F(0, T.U8),
            "icmp6_code": _F(1, T.U8),
            "icmp6_cksum": _F(2, T.BE16),
            "icmp6_identifier": _F(4, T.BE16),
            "icmp6_sequence": _F(6, T.BE16),
        },
        csum=2,
        pseudo=True,
        l4=True,
    ),
}

# Context fields per kernel context struct (uapi/linux/bpf.h; offsets checked against
# /sys/kernel/btf/vmlinux): name -> (byte offset, language type, access).  Access: "u32"
# plain 4-byte load; "port_be" remote port, network order in the high half of the u32
# (the kernel's ctx rewrite shifts skc_dport left by 16 on little-endian); "port_host"
# local port in host order; "ip6" 4 x u32 loads into a 16-byte ipv6_addr; "len" packet
# length data_end - data (64-bit, B04).
_SOCK_COMMON = {
    "family": (0, T.U32, "u32"),
    "remote_ip4": (4, T.BE32, "u32"),
    "local_ip4": (8, T.BE32, "u32"),
    "remote_ip6": (12, T.IPV6_ADDR, "ip6"),
    "local_ip6": (28, T.IPV6_ADDR, "ip6"),
    "remote_port": (44, T.BE16, "port_be"),
    "local_port": (48, T.U16, "port_host"),
}
CTX_FIELDS: dict[str, dict[str, tuple[int, T.Type, str]]] = {
    "xdp_md": {
        "len": (0, T.U64, "len"),
        "ingress_ifindex": (12, T.U32, "u32"),
        "rx_queue_index": (16, T.U32, "u32"),
        "egress_ifindex": (20, T.U32, "u32"),
    },
    "sk_msg_md": {
        **{k: (o + 16, t, a) for k, (o, t, a) in _SOCK_COMMON.items()},
        "size": (68, T.U32, "u32"),
        "len": (0, T.U64, "len"),
    },
    "bpf_sock_ops": {
        "op": (0, T.U32, "u32"),
        **{k: (o + 20, t, a) for k, (o, t, a) in _SOCK_COMMON.items()},
        "is_fullsock": (72, T.U32, "u32"),
        "snd_cwnd": (76, T.U32, "u32"),
        "srtt_us": (80, T.U32, "u32"),
        "bpf_sock_ops_cb_flags": (84, T.U32, "u32"),
        "state": (88, T.U32, "u32"),
    },
}
# where data / data_end live in the context, and their width (xdp_md: u32; sk_msg_md: ptr)
CTX_DATA: dict[str, tuple[int, int, int]] = {"xdp_md": (0, 4, 4), "sk_msg_md": (0, 8, 8)}

# IPv6 extension headers walked by skip_ext(): hop-by-hop, routing, fragment, dest-opts
# (RFC 8200 section 4); AH (51) has its length in 4-byte units and is not walked.
IPV6_EXT_HEADERS = (0, 43, 44, 60)
IPV6_EXT_MAX = 6  # bound of the walk (headers), like the kernel's samples

# IP header fields in the L4 pseudo-header (RFC 768, RFC 793, RFC 8200 8.1): field ->
# (L4 headers whose checksum covers it, IP protocol numbers of those headers).  The
# length: TCP and ICMPv6 take it from the IP header; UDP from its own ``len`` field.
PSEUDO_FIELDS: dict[str, dict[str, tuple[str, ...]]] = {
    "ipv4": {
        "saddr": ("udp", "tcp"),
        "daddr": ("udp", "tcp"),
        "protocol": ("udp", "tcp"),
        "tot_len": ("tcp",),
    },
    "ipv6": {
        "saddr": ("udp", "tcp", "icmpv6"),
        "daddr": ("udp", "tcp", "icmpv6"),
        "payload_len": ("tcp", "icmpv6"),
    },
}
L4_PROTO = {"udp": 17, "tcp": 6, "icmpv6": 58}  # IPPROTO_* (linux/in.h, linux/in6.h)

# Named constants of the language (value, type).  ETH_P_* are be16 like h_proto.
CONSTANTS: dict[str, tuple[int, T.IntType]] = {
    "ETH_P_IP": (0x0800, T.BE16),
    "ETH_P_IPV6": (0x86DD, T.BE16),
    "ETH_P_ARP": (0x0806, T.BE16),
    "ETH_P_8021Q": (0x8100, T.BE16),
    "ETH_P_8021AD": (0x88A8, T.BE16),
    "IPPROTO_HOPOPTS": (0, T.U8),
    "IPPROTO_ICMP": (1, T.U8),
    "IPPROTO_IPIP": (4, T.U8),
    "IPPROTO_TCP": (6, T.U8),
    "IPPROTO_UDP": (17, T.U8),
    "IPPROTO_IPV6": (41, T.U8),
    "IPPROTO_ROUTING": (43, T.U8),
    "IPPROTO_FRAGMENT": (44, T.U8),
    "IPPROTO_GRE": (47, T.U8),
    "IPPROTO_ICMPV6": (58, T.U8),
    "IPPROTO_DSTOPTS": (60, T.U8),
    "ICMP_ECHOREPLY": (0, T.U8),
    "ICMP_ECHO": (8, T.U8),
    "ICMPV6_ECHO_REQUEST": (128, T.U8),
    "ICMPV6_ECHO_REPLY": (129, T.U8),
    "AF_INET": (2, T.U32),
    "AF_INET6": (10, T.U32),
}

from bpfdsl.abi.uapi import SockOpsOp  # noqa: E402

CONSTANTS.update({f"BPF_SOCK_OPS_{op.name}": (int(op), T.U32) for op in SockOpsOp})
# bpf_sock_ops_cb_flags (sock_ops_cb_flags_set) and BPF_TCP_* states, include/uapi/linux/bpf.h
for _i, _n in enumerate(
    (
        "RTO",
        "RETRANS",
        "STATE",
        "RTT",
        "PARSE_ALL_HDR_OPT",
        "PARSE_UNKNOWN_HDR_OPT",
        "WRITE_HDR_OPT",
    )
):
    CONSTANTS[f"BPF_SOCK_OPS_{_n}_CB_FLAG"] = (1 << _i, T.U32)
for _i, _n in enumerate(
    (
        "ESTABLISHED",
        "SYN_SENT",
        "SYN_RECV",
        "FIN_WAIT1",
        "FIN_WAIT2",
        "TIME_WAIT",
        "CLOSE",
        "CLOSE_WAIT",
        "LAST_ACK",
        "LISTEN",
        "CLOSING",
        "NEW_SYN_RECV",
    ),
    start=1,
):
    CONSTANTS[f"BPF_TCP_{_n}"] = (_i, T.U32)
