"""Packet header layouts (front end data): what ``parse NAME`` gives.

The headers are declarations in the language's own ``header`` syntax: the standard
library ``bpfdsl/lang/headers.bpfd`` (ethernet, vlan, ipv4, ipv6, tcp, udp, icmp, icmpv6,
byte, and arp, gre, vxlan, geneve, gue, mpls, ipv6_opt, ipv6_rt, ipv6_frag), laid out by
:mod:`bpfdsl.lang.layout` -- the same code that lays out the headers a program declares.
:data:`HEADERS` reads the library on first use (once per process).  Offsets, sizes and
field names are the kernel's (include/uapi/linux/if_ether.h ethhdr, if_vlan.h vlan_hdr,
ip.h iphdr, ipv6.h ipv6hdr, tcp.h tcphdr, udp.h udphdr, icmp.h icmphdr, icmpv6.h icmp6hdr)
and the RFCs'.  Multi-byte fields are network order (be16/be32); ``bit<N>`` fields are
host-order numbers read from their bits.
``csum``: offset of the header's own checksum and whether it covers the IP pseudo-header.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from importlib.resources import files
from pathlib import Path
from typing import ClassVar

from bpfdsl.abi.ctx import CTX_STRUCTS
from bpfdsl.diagnostics import Diagnostic, DiagnosticError, Span, error
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.c_names import KERNEL_STRUCTS
from bpfdsl.lang.layout import Header, HField, header_layout

# Headers the compiler itself gives meaning to (checksum and pseudo-header rules, parse
# cursor walks): a program cannot declare a header of one of these names.  The other
# library headers are a prelude: a program's own ``header gre { ... }`` replaces it.
CORE_HEADERS = ("ethernet", "vlan", "ipv4", "ipv6", "tcp", "udp", "icmp", "icmpv6", "byte")
# What the syntax cannot say: icmphdr's union (``un.gateway`` over ``id`` and ``sequence``).
_OVERLAYS = {"icmp": {"gateway": HField(4, T.BE32)}}


def library_text() -> tuple[str, str]:
    """(path, text) of the standard library of headers, ``bpfdsl/lang/headers.bpfd`` (a plain
    file read; importlib.resources for zip imports)."""
    p = Path(__file__).resolve().parent / "headers.bpfd"
    if p.is_file():
        return str(p), p.read_text(encoding="utf-8")
    return "headers.bpfd", files("bpfdsl.lang").joinpath("headers.bpfd").read_text("utf-8")


def _library_decls() -> dict[str, tuple[str, str]]:
    """name -> (path, text) of each ``header`` declaration of the library: the file's text
    with every other line blanked (so spans keep their line numbers), cut where a line
    starts with ``header NAME``."""
    path, text = library_text()
    lines = text.split("\n")
    starts = [
        (i, m.group(1)) for i, ln in enumerate(lines) if (m := re.match(r"header\s+(\w+)", ln))
    ]
    out = {}
    for k, (i, name) in enumerate(starts):
        j = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        out[name] = (path, "\n" * i + "\n".join(lines[i:j]))
    return out


def _layout_library(name: str, path: str, text: str) -> Header:
    """Lay out the library's declaration of ``name`` (``text``: see _library_decls).  An
    error in it is a bug of the library: raised as a DiagnosticError naming
    headers.bpfd:line:col."""
    diags: list[Diagnostic] = []

    def err(code: str, msg: str, span: Span, hint: str | None = None) -> None:
        diags.append(error(code, msg, span, hint=hint))

    def resolve(t: ast.TypeRef) -> T.Type | None:
        if isinstance(t, ast.ArrayType) and isinstance(t.length, ast.IntLit):
            elem = resolve(t.elem)
            return None if elem is None else T.ArrayType(elem, t.length.value)
        return T.BUILTIN_TYPES.get(getattr(t, "name", ""))

    (decl,) = parse_program(text, path).items
    assert isinstance(decl, ast.HeaderDecl)  # _library_decls cut the text at `header NAME`
    h = header_layout(decl, resolve, err, library=True)
    if diags or h is None or h.name != name:
        raise DiagnosticError(
            diags or [error("library", f"bad declaration of {name}", decl.span)], text
        )
    h.c_name = KERNEL_STRUCTS.get(h.name, h.name)
    h.fields.update(_OVERLAYS.get(h.name, {}))
    return h


class _Library(Mapping[str, Header]):
    """``HEADERS``: name -> Header of the standard library.  Each declaration is parsed and
    laid out on first use of its name (a program that parses ethernet, ipv4 and udp pays
    for those three), once per process; ``in`` and listing the names lay out none."""

    _decls: ClassVar[dict[str, tuple[str, str]] | None] = None

    def __init__(self) -> None:
        self._laid_out: dict[str, Header] = {}

    def _names(self) -> dict[str, tuple[str, str]]:
        if _Library._decls is None:
            _Library._decls = _library_decls()
        return _Library._decls

    def __getitem__(self, k: str) -> Header:
        h = self._laid_out.get(k)
        if h is None:
            decl = self._names().get(k)
            if decl is None:
                raise KeyError(k)
            h = self._laid_out[k] = _layout_library(k, *decl)
        return h

    def __contains__(self, k: object) -> bool:
        return k in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


HEADERS: Mapping[str, Header] = _Library()

# Context fields per kernel context struct (offsets from bpfdsl.abi.ctx): name -> (byte
# offset, language type, access).  Access: "u32" plain 4-byte load; "port_be" remote port,
# network order in the high half of the u32 (the kernel's ctx rewrite shifts skc_dport
# left by 16 on little-endian); "port_host" local port in host order; "ip6" 4 x u32 loads
# into a 16-byte ipv6_addr; "len" packet length data_end - data (64-bit, B04), at the
# offset of ``data``.
_SOCK_COMMON: dict[str, tuple[T.Type, str]] = {
    "family": (T.U32, "u32"),
    "remote_ip4": (T.BE32, "u32"),
    "local_ip4": (T.BE32, "u32"),
    "remote_ip6": (T.IPV6_ADDR, "ip6"),
    "local_ip6": (T.IPV6_ADDR, "ip6"),
    "remote_port": (T.BE16, "port_be"),
    "local_port": (T.U16, "port_host"),
}
_CTX_NAMES: dict[str, dict[str, tuple[T.Type, str]]] = {
    "xdp_md": {
        "len": (T.U64, "len"),
        "ingress_ifindex": (T.U32, "u32"),
        "rx_queue_index": (T.U32, "u32"),
        "egress_ifindex": (T.U32, "u32"),
    },
    "sk_msg_md": {**_SOCK_COMMON, "size": (T.U32, "u32"), "len": (T.U64, "len")},
    "bpf_sock_ops": {
        "op": (T.U32, "u32"),
        **_SOCK_COMMON,
        "is_fullsock": (T.U32, "u32"),
        "snd_cwnd": (T.U32, "u32"),
        "srtt_us": (T.U32, "u32"),
        "bpf_sock_ops_cb_flags": (T.U32, "u32"),
        "state": (T.U32, "u32"),
    },
}
CTX_FIELDS: dict[str, dict[str, tuple[int, T.Type, str]]] = {
    ctx: {
        n: (CTX_STRUCTS[ctx]["data" if a == "len" else n].off, t, a) for n, (t, a) in names.items()
    }
    for ctx, names in _CTX_NAMES.items()
}
# where data / data_end live in the context, and their width (xdp_md: u32; sk_msg_md: ptr)
CTX_DATA: dict[str, tuple[int, int, int]] = {
    s.name: (s["data"].off, s["data_end"].off, s["data"].size)
    for s in CTX_STRUCTS.values()
    if "data" in s and "data_end" in s
}
# where data_meta lives (struct xdp_md: a u32 at byte 8)
CTX_DATA_META: dict[str, int] = {
    s.name: s["data_meta"].off for s in CTX_STRUCTS.values() if "data_meta" in s
}

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
    "ETH_P_RARP": (0x8035, T.BE16),  # reverse ARP (linux/if_ether.h)
    "ETH_P_8021Q": (0x8100, T.BE16),
    "ETH_P_8021AD": (0x88A8, T.BE16),
    "ETH_P_QINQ1": (0x9100, T.BE16),  # pre-802.1ad QinQ tag (linux/if_ether.h; libpcap `vlan`)
    "ETH_P_TEB": (0x6558, T.BE16),  # transparent Ethernet bridging (GRE, NVGRE)
    "ETH_P_MPLS_UC": (0x8847, T.BE16),
    "ETH_P_MPLS_MC": (0x8848, T.BE16),
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
    "IPPROTO_SCTP": (132, T.U8),
    "ICMP_ECHOREPLY": (0, T.U8),
    "ICMP_ECHO": (8, T.U8),
    "ICMPV6_ECHO_REQUEST": (128, T.U8),
    "ICMPV6_ECHO_REPLY": (129, T.U8),
    "AF_INET": (2, T.U32),
    "AF_INET6": (10, T.U32),
}

from bpfdsl.abi.prog_types import SockOpsOp  # noqa: E402

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
