"""`const B = A` (#24): a const (or config) defined by earlier consts, integers, network-order
values and prefixes alike, folds to the value the earlier one gives; a later const is not
in scope yet (a located error)."""

from __future__ import annotations

import pytest
from scapy.all import IP, UDP, Ether, raw

from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.testrun import open_engine

SRC = """license "GPL"
const NET: ipv4_prefix = 10.0.0.0/8
const LAB: ipv4_prefix = NET
const DNS: be16 = 53
const ALSO_DNS: be16 = DNS
const BASE: u32 = 10
const TTL_MIN: u8 = (BASE - 8) as u8
config LIMIT: u32 = BASE * 3
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.saddr in LAB { return XDP_DROP }
    if ip.ttl < TTL_MIN { return XDP_ABORTED }
    let udp = parse udp else { return XDP_PASS }
    if udp.dest == ALSO_DNS { return XDP_TX }
    if LIMIT != 30 { return XDP_ABORTED }
    return XDP_PASS
}
"""


def _frame(src: str, ttl: int = 64, dport: int = 9) -> bytes:
    return raw(Ether() / IP(src=src, dst="192.0.2.1", ttl=ttl) / UDP(dport=dport) / b"x")


CASES = [
    (_frame("10.1.2.3"), XdpAction.DROP),  # in LAB = NET
    (_frame("192.0.2.7", ttl=1), XdpAction.ABORTED),  # under TTL_MIN = 2
    (_frame("192.0.2.7", ttl=2), XdpAction.PASS),
    (_frame("192.0.2.7", dport=53), XdpAction.TX),  # ALSO_DNS = DNS, network order kept
]


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_consts_of_consts_give_their_values(engine: str) -> None:
    spec = read_object(compile_source(SRC, "consts.bpfd").obj)
    eng = open_engine(engine, spec)
    try:
        got = [eng.run("f", frame).retval for frame, _want in CASES]
    finally:
        eng.close()
    assert got == [int(want) for _f, want in CASES]


def test_a_later_const_is_not_in_scope() -> None:
    src = 'license "GPL"\nconst B: u32 = A\nconst A: u32 = 1\nxdp fn f(ctx) { return XDP_PASS }\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "later.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == "unknown-name" and (d.span.line, d.span.col) == (2, 16)
