"""IPv6 literals with an embedded IPv4 address (RFC 4291 2.2 form 3: ``::ffff:10.0.0.1``,
``64:ff9b::192.0.2.33`` of RFC 6052 NAT64) and their prefixes: the bytes equal Python's
ipaddress, and the prefix tests give the verdicts on both engines."""

from __future__ import annotations

import ipaddress

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

SRC = """license "GPL"
map m: array<u32, ipv6_addr>(max_entries: 2)
xdp fn f(ctx) {
    m[0] = ::ffff:10.0.0.1
    m[1] = 64:ff9b::192.0.2.33
    let eth = parse ethernet else { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    if ip6.saddr in 64:ff9b::/96 { return XDP_DROP }
    if ip6.daddr in ::ffff:10.0.0.0/104 { return XDP_TX }
    return XDP_PASS
}
"""


@pytest.mark.parametrize(
    ("src", "dst", "verdict"),
    [
        ("64:ff9b::198.51.100.7", "2001:db8::1", "XDP_DROP"),
        ("2001:db8::2", "::ffff:10.9.8.7", "XDP_TX"),
        ("2001:db8::2", "::ffff:11.0.0.1", "XDP_PASS"),
        ("64:ff9c::1", "2001:db8::1", "XDP_PASS"),
    ],
)
def test_embedded_ipv4_literals(bpf_program, src, dst, verdict) -> None:
    prog = bpf_program(compile_source(SRC, "v4m.bpfd").obj)
    pkt = Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b") / IPv6(src=src, dst=dst)
    r = prog.run(pkt / UDP(sport=1, dport=2) / b"x")
    assert r.verdict == verdict
    assert prog.maps["m"].get(0) == ipaddress.IPv6Address("::ffff:10.0.0.1").packed
    assert prog.maps["m"].get(1) == ipaddress.IPv6Address("64:ff9b::c000:221").packed


def test_embedded_ipv4_bad_octet_is_a_literal_error() -> None:
    src = SRC.replace("::ffff:10.0.0.1", "::ffff:10.0.0.300")
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "v4m.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == "bad-literal" and (d.span.line, d.span.col) == (4, 12)
