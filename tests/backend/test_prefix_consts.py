"""Named prefix constants (``const NET: ipv4_prefix = 10.0.0.0/8``, and ipv6_prefix) work
wherever a prefix literal does, with the same code: ``addr in NET``, an lpm_trie key, a
value stored in a local, a map value or compared with ``==``.  The stored form of a prefix
value is the kernel's lpm key (``struct bpf_lpm_trie_key_u8``: u32 prefixlen in host order,
then the address in network order), on both engines."""

from __future__ import annotations

import socket
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

CONSTS = """license "GPL"
const NET: ipv4_prefix = 10.0.0.0/8
const LAN: ipv4_prefix = 192.168.16.0/20
const ULA: ipv6_prefix = fc00::/7
map blk: lpm_trie<ipv4_prefix, u8>(max_entries: 16)
map blk6: lpm_trie<ipv6_prefix, u8>(max_entries: 16)
map last: array<u32, ipv4_prefix>(max_entries: 1)
map hits: array<u32, u64>(max_entries: 4)

xdp fn f(ctx) {
    blk[NET] = 1                                  // lpm keys: /8, /20, /7
    blk[LAN] = 2
    blk6[ULA] = 3
    let p: ipv4_prefix = LAN
    last[0] = p
    if p == LAN { hits[3] = 1 }
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        if ip6.saddr in ULA { return XDP_DROP }
        return XDP_PASS
    }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.saddr in NET { return XDP_DROP }
    if ip.saddr in LAN { return XDP_TX }
    return XDP_PASS
}
"""


def _v4(src: str) -> bytes:
    return bytes(Ether() / IP(src=src, dst="192.0.2.1") / UDP(sport=1, dport=2) / (b"x" * 8))


def _v6(src: str) -> bytes:
    return bytes(Ether() / IPv6(src=src, dst="2001:db8::1") / UDP(sport=1, dport=2))


CASES = [
    (_v4("10.0.0.1"), "XDP_DROP"),
    (_v4("10.255.255.255"), "XDP_DROP"),
    (_v4("11.0.0.1"), "XDP_PASS"),
    (_v4("192.168.16.1"), "XDP_TX"),
    (_v4("192.168.31.255"), "XDP_TX"),  # last address of the /20
    (_v4("192.168.32.0"), "XDP_PASS"),  # first address after it
    (_v4("192.168.15.255"), "XDP_PASS"),
    (_v6("fc00::1"), "XDP_DROP"),
    (_v6("fdff:ffff::1"), "XDP_DROP"),  # fc00::/7 covers fd00::/8
    (_v6("fe00::1"), "XDP_PASS"),
    (_v6("2001:db8::2"), "XDP_PASS"),
]


def _key4(prefix: str) -> bytes:
    addr, plen = prefix.split("/")
    return struct.pack("<I", int(plen)) + socket.inet_pton(socket.AF_INET, addr)


def test_prefix_consts_give_verdicts_and_lpm_keys(bpf_program) -> None:
    """Every run puts the prefixes into the lpm tries and the array with their length
    (both engines), and ``in`` answers by the constant's prefix length."""
    prog = bpf_program(compile_source(CONSTS, "consts.bpfd").obj)
    for frame, verdict in CASES:
        assert prog.run(frame).verdict == verdict, frame.hex()
    assert prog.maps["blk"].get(_key4("10.0.0.0/8")) == b"\x01"
    assert prog.maps["blk"].get(_key4("192.168.16.0/20")) == b"\x02"
    key6 = struct.pack("<I", 7) + socket.inet_pton(socket.AF_INET6, "fc00::")
    assert prog.maps["blk6"].get(key6) == b"\x03"
    assert prog.maps["blk"].lookup("10.1.2.3/32") == 1  # longest prefix match finds the /8
    assert prog.maps["last"].get(0) == _key4("192.168.16.0/20")
    assert prog.maps["hits"].total(3) == 1  # p == LAN compared prefixlen and address


LITERAL = """license "GPL"
{decl}
map blk: lpm_trie<ipv6_prefix, u8>(max_entries: 16)
xdp fn f(ctx) {{
    blk[{p6}] = 1
    let eth = parse ethernet else {{ return XDP_PASS }}
    if eth.h_proto == ETH_P_IPV6 {{
        let ip6 = parse ipv6 else {{ return XDP_PASS }}
        if ip6.daddr in {p6} {{ return XDP_DROP }}
        return XDP_PASS
    }}
    let ip = parse ipv4 else {{ return XDP_PASS }}
    if ip.saddr in {p4} || ip.daddr in {p4} {{ return XDP_DROP }}
    return XDP_PASS
}}
"""


def _insns(src: str) -> list:
    spec = read_object(compile_source(src, "same.bpfd").obj)
    return [(i.opcode, i.dst, i.src, i.off, i.imm) for i in spec.programs["f"].insns]


def test_named_prefix_compiles_to_the_literals_code() -> None:
    """A const prefix is folded: the instructions equal those of the literal written in
    its place (the masked compare of ``in``, the key stores of the lpm update)."""
    literal = LITERAL.format(decl="", p4="172.16.0.0/12", p6="2001:db8:40::/42")
    named = LITERAL.format(
        decl="const P4: ipv4_prefix = 172.16.0.0/12\nconst P6: ipv6_prefix = 2001:db8:40::/42",
        p4="P4",
        p6="P6",
    )
    assert _insns(named) == _insns(literal)


@pytest.mark.parametrize(
    "decl, use, where",
    [
        ("", "let p: ipv4_prefix = 10.0.0.0/8\n    if ip.saddr in p", "a run-time ipv4_prefix"),
        ("", "if ip.saddr in ip.daddr", "be32"),
        ("config c: u32 = 0\n", "if ip.saddr in c", "u32"),
    ],
)
def test_in_needs_a_constant_prefix(decl: str, use: str, where: str) -> None:
    src = (
        f'license "GPL"\n{decl}xdp fn f(ctx) {{\n'
        "    let eth = parse ethernet else { return XDP_PASS }\n"
        "    let ip = parse ipv4 else { return XDP_PASS }\n"
        f"    {use} {{ return XDP_DROP }}\n    return XDP_PASS\n}}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "in.bpfd")
    (d,) = ei.value.diagnostics
    assert d.code == "type-mismatch"
    assert f"`in` needs a constant prefix on the right, found {where}" in d.message
    assert any("const NAME: ipv4_prefix" in h for h in d.hints)
    line = src.splitlines()[d.span.line - 1]
    assert line[d.span.col - 1 :].startswith(use.split(" in ")[-1])


CONST_LEFT = """license "GPL"
const IN6: ipv6_addr = fd00::1
const OUT6: ipv6_addr = 2001:db8::1
const IN4: be32 = 10.1.2.3
map hits: array<u32, u64>(max_entries: 4)
xdp fn f(ctx) {
    if IN6 in fc00::/7 { hits[0] = 1 }
    if OUT6 in fc00::/7 { hits[1] = 1 }
    if IN4 in 10.0.0.0/8 { hits[2] = 1 }
    if IN6 in ::/0 { hits[3] = 1 }
    return XDP_PASS
}
"""


def test_in_with_a_constant_address_on_the_left(bpf_program) -> None:
    """``CONST in PREFIX`` with a named address on the left compiles (it raised
    AttributeError in codegen for an ipv6_addr const) and answers as for a run-time
    address, on both engines: fd00::1 is in fc00::/7, 2001:db8::1 is not, 10.1.2.3 is in
    10.0.0.0/8, every address is in ::/0."""
    prog = bpf_program(compile_source(CONST_LEFT, "const_left.bpfd").obj)
    assert prog.run(_v4("192.0.2.9")).verdict == "XDP_PASS"
    assert [prog.maps["hits"].total(i) for i in range(4)] == [1, 0, 1, 1]
