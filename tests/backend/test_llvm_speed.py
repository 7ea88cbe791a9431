"""Back-end behaviour: debug locations are shared per line and column, and a frame over the
kernel's 512-byte stack limit is an error whose hint, followed, gives an object the kernel
accepts."""

from __future__ import annotations

import pytest
from llvmlite import ir

from bpfdsl.backend.codegen.debug import DebugAdapter
from bpfdsl.backend.codegen.generator import generate
from bpfdsl.compiler import front_end

# shapes the progs do not all have: a fn, a loop, signed arithmetic, a struct key, selects
EXTRA = """license "GPL"
map out: array<u64>(max_entries: 8)
struct k { a: u32, b: u16 }
map hk: hash<k, u64>(max_entries: 4)
fn mix(a: u32, b: u32) -> u32 { return (a ^ b) * 16777619 }
xdp fn f(ctx) {
    let pa = parse byte else { return XDP_ABORTED }
    let a = pa.value
    let x = a as u32
    let w: i32 = 2147483647
    let y = w + (a as i32)
    out[4] = (y as i64) as u64
    let n = (a as i8) as i64
    out[6] = n as u64
    let s: u32 = 0
    for i in 0..4 { s += mix(s, i) }
    hk[k(a: x, b: 7)] += 1
    if x > 3 && s != 9 || n < 0 { return XDP_DROP }
    return XDP_PASS
}
"""


def _module(text: str, name: str) -> ir.Module:
    checked = front_end(text, name)
    lines = {n: d.span.line for n, d in checked.map_decls.items()}
    module = ir.Module(name=name)
    return generate(checked, DebugAdapter(module, name, text, lines), module)


def test_debug_locations_are_shared_per_line_and_column():
    m = _module(EXTRA, "extra.bpfd")
    text = str(m)
    locs = [ln for ln in text.splitlines() if "= !DILocation(" in ln]
    bodies = [ln.split(" = ", 1)[1] for ln in locs]
    assert len(bodies) == len(set(bodies))  # one node per (line, column, scope)
    assert len(locs) >= 10


BIG_LOCAL = """license "GPL"
struct big { a: [u64; 70], n: u32 }
map st: hash<u32, big>(max_entries: 2)
xdp fn f(ctx) {
    let k = big(n: 3)
    k.a[2] = ctx.len as u64
    st[1] = k
    return XDP_PASS
}
"""

# the same program written as the stack-limit hint says
BIG_IN_MAP = """license "GPL"
struct big { a: [u64; 70], n: u32 }
map st: hash<u32, big>(max_entries: 2)
map scratch: percpu_array<u32, big>(max_entries: 1)
xdp fn f(ctx) {
    let k = scratch.lookup(0) else { return XDP_PASS }
    k.n = 3
    k.a[2] = ctx.len as u64
    st[1] = k
    return XDP_PASS
}
"""


def test_stack_limit_error_hint_is_written_in_bpfdsl():
    from bpfdsl.compiler import compile_source
    from bpfdsl.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError) as e:
        compile_source(BIG_LOCAL, "big.bpfd")
    d = e.value.diagnostics[0]
    assert d.code == "stack-limit"
    assert (d.span.file, d.span.line) == ("big.bpfd", 4)  # the program's `fn` line
    assert "bytes of stack" in d.message and "512" in d.message
    hint = " ".join(d.hints)
    assert "map scratch: percpu_array<u32, T>(max_entries: 1)" in hint
    assert "scratch.lookup(0) else" in hint


@pytest.mark.kernel
def test_stack_limit_hint_rewrite_compiles_and_loads():
    from bpfdsl.compiler import compile_source
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(BIG_IN_MAP, "big_in_map.bpfd")
    with load_collection(read_object(res.obj)) as coll:
        assert set(coll.programs) == {"f"}
