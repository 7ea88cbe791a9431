"""Unary `-` and `~` take a map value (or a field of one) like the binary operators do:
the value is loaded and negated/complemented at its width (found by tests/fuzz/programs.py:
`~m` of a lookup result was refused with "needs a host-order integer, found &u64")."""

from __future__ import annotations

from bpfdsl.compiler import compile_source

SRC = """license "GPL"
struct stats { pkts: u64, bytes: u32 }
map hs: hash<u32, u64>(max_entries: 4)
map st: array<u32, stats>(max_entries: 1)
map out: array<u32, u64>(max_entries: 4)
xdp fn f(ctx) {
    let m = hs.lookup(1) else { return XDP_DROP }
    let s = st.lookup(0) else { return XDP_DROP }
    out[0] = ~m
    out[1] = -m + 1
    out[2] = (~s.bytes) as u64
    out[3] = -(s.pkts)
    return XDP_PASS
}
"""


def test_unary_operators_on_map_values(bpf_program) -> None:
    prog = bpf_program(compile_source(SRC, "unary.bpfd").obj)
    prog.maps["hs"].set(1, 5)
    prog.maps["st"].set(0, (7).to_bytes(8, "little") + (0x10).to_bytes(4, "little") + bytes(4))
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    out = [prog.maps["out"].total(k) for k in range(4)]
    assert out == [(1 << 64) - 6, (1 << 64) - 4, 0xFFFFFFEF, (1 << 64) - 7]
