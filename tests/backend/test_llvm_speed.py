"""Back-end behaviour: debug locations are shared per line and column, a frame over the
kernel's 512-byte stack limit is an error whose hint, followed, gives an object the kernel
accepts, and map key/value temporaries share stack slots."""

from __future__ import annotations

import pytest
from llvmlite import ir
from support.progrun import IP, UDP, Prog, eth

from bpfdsl.backend.codegen.debug import DebugAdapter
from bpfdsl.backend.codegen.generator import generate
from bpfdsl.compiler import compile_source, front_end

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


@pytest.mark.kernel
def test_map_key_and_value_temporaries_share_stack_slots():
    """33 `hit[i] = ctx.len` statements needed 528 bytes of stack (a slot per temporary);
    a 70-arm match of `N => hit[N] += 1` 560.  With lifetime markers they share slots."""
    stmts = "".join(f"    hit[{i}] = ctx.len\n" for i in range(33))
    arms = "".join(f"        {n} => hit[{n}] += 1,\n" for n in range(70))
    src = f"""license "GPL"
map hit: array<u32, u64>(max_entries: 80)
xdp fn many(ctx) {{
{stmts}    match ctx.len {{
{arms}        _ => {{}}
    }}
    return XDP_PASS
}}"""
    res = compile_source(src, "many.bpfd", stats=True)
    (st,) = res.stats
    assert st.stack <= 32, st
    with Prog(src) as p:
        pkt = bytes(eth() / IP() / UDP() / (b"x" * 40))[:60]
        assert p.verdict(pkt) == 2
        assert p.counter("hit", 32) == 60  # hit[32] = ctx.len
        assert p.counter("hit", 60) == 1  # the arm for len 60
        assert p.counter("hit", 61) == 0
