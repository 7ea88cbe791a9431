"""A plain fn that takes a header view and reads its conditional (``if``) fields: the
read is bounds-checked at run time, so the fn gets the packet context like a parsing fn
(was a traceback in code generation)."""

from __future__ import annotations

import pytest
from scapy.all import GRE, IP, Ether, Raw

import bpfdsl

SRC = """license "GPL"
fn gre_key(g: gre) -> u64 {
    if let k = g.key { return host(k) as u64 }
    return 0
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_GRE { return XDP_PASS }
    let g = parse gre else { return XDP_PASS }
    if gre_key(g) == 7 { return XDP_DROP }
    return XDP_PASS
}
"""

FRAMES = [
    bytes(Ether() / IP() / GRE(key_present=1, key=7) / Raw(b"x" * 20)),
    bytes(Ether() / IP() / GRE(key_present=1, key=8) / Raw(b"x" * 20)),
    bytes(Ether() / IP() / GRE() / Raw(b"x" * 20)),
]


def _verdicts(engine: str) -> list[str]:
    spec = bpfdsl.read_object(bpfdsl.compile_source(SRC, "gre_key.bpfd").obj)
    return [r.verdict for r in bpfdsl.run(spec, FRAMES, engine=engine)]


def test_conditional_field_of_a_view_argument_in_the_interpreter():
    assert _verdicts("interp") == ["XDP_DROP", "XDP_PASS", "XDP_PASS"]


@pytest.mark.kernel
def test_conditional_field_of_a_view_argument_on_the_kernel():
    assert _verdicts("kernel") == ["XDP_DROP", "XDP_PASS", "XDP_PASS"]
