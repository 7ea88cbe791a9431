"""The front end of `xdp_load_bytes(offset, dst)` / `xdp_store_bytes(offset, src)`: every XDP
kind may call them (xdp_func_proto, net/core/filter.c), also from a plain or global fn; a
local too big for one helper call, a loop variable or a wrong argument count are
located errors (the kernel behaviour is in tests/runtime/test_xdp_frags_bytes.py)."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

OK = [
    (
        "devmap",
        "xdp(devmap) fn f(ctx) {\n    let w: u32 = 0\n"
        "    if xdp_load_bytes(0, w) != 0 { return XDP_DROP }\n"
        "    if xdp_store_bytes(4, w) != 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
    ),
    (
        "map_value",
        "map m: array<[u8; 8]>(max_entries: 1)\n"
        "xdp(frags) fn f(ctx) {\n    let v = m.lookup(0) else { return XDP_PASS }\n"
        "    if xdp_load_bytes(100, v) != 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
    ),
    (
        "plain_fn",
        "fn g(n: u32) -> i64 {\n    let w: u64 = 0\n    return xdp_load_bytes(n, w)\n}\n"
        "xdp(frags) fn f(ctx) {\n    if g(4) == 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
    ),
    (
        "global_fn",  # takes the context (__arg_ctx)
        "global fn g(n: u32) -> i64 {\n    let w: u32 = 0\n    return xdp_load_bytes(n, w)\n}\n"
        "xdp(frags) fn f(ctx) {\n    if g(4) == 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
    ),
]  # fmt: skip


@pytest.mark.parametrize("name,src", OK, ids=[o[0] for o in OK])
def test_xdp_bytes_compile_in_every_xdp_kind_and_call_the_helper(name, src):
    res = compile_source('license "GPL"\n' + src, "t.bpfd")
    spec = read_object(res.obj)
    insns = next(iter(spec.programs.values())).insns
    calls = {i.imm for i in insns if i.is_helper_call}
    assert 189 in calls  # BPF_FUNC_xdp_load_bytes


ERRORS = [
    (
        "loop_variable",
        "xdp(frags) fn f(ctx) {\n    for i in 0..4 {\n"
        "        if xdp_store_bytes(0, i) != 0 { return XDP_DROP }\n    }\n    return XDP_PASS\n}\n",
        "type-mismatch", 4, 31, "found loop variable `i`", "xdp_load_bytes(4000, b)",
    ),
    (
        "arg_count",
        "xdp(frags) fn f(ctx) {\n    let w: u32 = 0\n"
        "    if xdp_load_bytes(0, w, 4) != 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
        "arg-count", 4, 8, "xdp_load_bytes(offset, dst) takes 2 arguments", "a local",
    ),
    (
        "by_name",
        "xdp(frags) fn f(ctx) {\n    if bpf_xdp_store_bytes(0, 0, 4) != 0 { return XDP_DROP }\n"
        "    return XDP_PASS\n}\n",
        "helper-not-modelled", 3, 8, "cannot be called by name",
        "write `xdp_store_bytes(0, 0)`",
    ),
]  # fmt: skip


@pytest.mark.parametrize("name,src,code,line,col,msg,hint", ERRORS, ids=[e[0] for e in ERRORS])
def test_xdp_bytes_misuse_is_a_located_error(name, src, code, line, col, msg, hint):
    with pytest.raises(DiagnosticError) as ei:
        compile_source('license "GPL"\n' + src, "t.bpfd")
    d = next(d for d in ei.value.diagnostics if d.code == code)
    assert (d.span.line, d.span.col) == (line, col), d.render(ei.value.source)
    assert msg in d.message and any(hint in h for h in d.hints), d.render(ei.value.source)


def test_xdp_bytes_of_a_local_over_512_bytes_is_a_helper_arg_error():
    src = (
        'license "GPL"\nstruct big { a: [u8; 300], b: [u8; 300] }\n'
        "map m: array<big>(max_entries: 1)\n"
        "xdp(frags) fn f(ctx) {\n    let x = m.lookup(0) else { return XDP_PASS }\n"
        "    let y = x\n    if xdp_load_bytes(0, y) == 0 { return XDP_DROP }\n"
        "    return XDP_PASS\n}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd")
    d = next(d for d in ei.value.diagnostics if d.code == "helper-arg")
    assert (d.span.line, d.span.col) == (7, 26), d.render(ei.value.source)
    assert "copies 1..512 bytes: this big is 600 bytes" in d.message
