"""Events (ringbuf / perf_event_array) meet the composition features (noinline and global
fns, loop callbacks, tail calls).  A subprogram sends records through the ring buffer on
both engines (the kernel verifies a global fn's reservation on its own); a builtin whose
helper takes the program's context (perf_event_output, msg_cork_bytes, ...) is a located
error in a subprogram, which bpfdsl passes only its parameters; a tail call with a
reservation open is refused by sema, by the checker and by the kernel alike ("tail_call
would lead to reference leak")."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from support.objbuild import build_text

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang.sema.subprog_ctx import CTX_BUILTINS
from bpfdsl.obj.collection import read_object

SRC = """license "GPL"
struct event { tag: u32, n: u32 }
map events: ringbuf<event>(max_entries: 8192)
map perf: perf_event_array<event>()

noinline fn note(tag: u32, n: u32) -> i64 {          // a static subprogram
    return ringbuf_output(events, event(tag: tag, n: n))
}

global fn reserve_one(n: u32) -> i32 {               // verified on its own by the kernel
    let r = ringbuf_reserve(events) else { return -1 }
    r.tag = 2
    r.n = n
    ringbuf_submit(r)
    return 0
}

fn step(i: u32) -> bool {                            // a loop callback: a subprogram
    let r = ringbuf_reserve(events) else { return true }
    r.tag = 3
    r.n = i
    ringbuf_submit(r)
    return false
}

fn to_perf(n: u32) {                                 // plain: inlined, has the context
    perf_event_output(perf, event(tag: 4, n: n))
}

xdp fn f(ctx) {
    let len = ctx.len as u32
    note(1, len)
    reserve_one(len)
    loop(2, step)
    to_perf(len)
    return XDP_PASS
}
"""


def _frame() -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=9) / b"abcd")


def test_subprograms_send_records_on_both_engines(bpf_program):
    prog = bpf_program(compile_source(SRC, "events_subprogs.bpfd").obj)
    f = _frame()
    assert prog.run(f).verdict == "XDP_PASS"
    assert [e.value for e in prog.events("events")] == [
        {"tag": 1, "n": len(f)},  # noinline fn: ringbuf_output
        {"tag": 2, "n": len(f)},  # global fn: reserve + submit
        {"tag": 3, "n": 0},  # loop callback, index 0 and 1
        {"tag": 3, "n": 1},
    ]
    assert [e.value for e in prog.events("perf")] == [{"tag": 4, "n": len(f)}]


def _error(text: str):
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "ctx.bpfd")
    return ei.value


NEEDS_CTX = [
    (
        "loop_callback",
        "fn apply(i: u32) -> bool {\n    msg_apply_bytes(i)\n    return false\n}\n"
        "sk_msg fn f(ctx) {\n    loop(2, apply)\n    return SK_PASS\n}\n",
        "loop-callback", 7, 13, "`msg_apply_bytes` needs the program's context, which loop "
        "callback `apply` does not have", "call the builtin in the program",
    ),
]  # fmt: skip


@pytest.mark.parametrize(
    "name,decls,code,line,col,msg,hint", NEEDS_CTX, ids=[n[0] for n in NEEDS_CTX]
)
def test_a_context_builtin_in_a_subprogram_is_a_located_error(
    name, decls, code, line, col, msg, hint
):
    err = _error('license "GPL"\n' + decls)
    d = next(d for d in err.diagnostics if d.code == code)
    assert (d.span.line, d.span.col) == (line, col), d.render(err.source)
    assert msg in d.message and any(hint in h for h in d.hints), d.render(err.source)


def test_the_context_builtins_are_those_whose_helper_takes_the_context():
    # the resizing builtins and tail_call take it too, but are refused in every fn already
    assert {
        "perf_event_output",
        "msg_apply_bytes",
        "msg_cork_bytes",
        "msg_redirect_map",
        "msg_redirect_hash",
        "sock_map_update",
        "sock_hash_update",
        "sock_ops_cb_flags_set",
        "fib_lookup",
        "xdp_get_buff_len",
        "xdp_load_bytes",
        "xdp_store_bytes",
    } == set(CTX_BUILTINS)


TAIL_HELD = """license "GPL"
struct event { n: u32 }
map events: ringbuf<event>(max_entries: 4096)
map next: prog_array(max_entries: 2) = { 0: other }
xdp fn f(ctx) {
    let r = ringbuf_reserve(events) else { return XDP_PASS }
    r.n = ctx.len as u32
    tail_call(next, 0) else {
        ringbuf_discard(r)
        return XDP_PASS
    }
}
xdp fn other(ctx) { return XDP_DROP }
"""


def test_a_tail_call_with_a_reservation_open_is_a_located_error():
    err = _error(TAIL_HELD)
    (d,) = err.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("unreleased-reservation", 8, 5)
    assert d.message == "`tail_call` leaves reservation `r` (reserved at line 6) open"
    # ended before the tail call: fine (the else block runs only when the call fails)
    ok = TAIL_HELD.replace(
        "    tail_call(next, 0) else {\n        ringbuf_discard(r)\n",
        "    ringbuf_submit(r)\n    tail_call(next, 0) else {\n",
    )
    compile_source(ok, "tail_ok.bpfd")


TAIL_HELD_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } rb SEC(".maps");
struct {
    __uint(type, BPF_MAP_TYPE_PROG_ARRAY); __uint(max_entries, 2);
    __uint(key_size, 4); __uint(value_size, 4);
} jt SEC(".maps");
SEC("xdp") int f(struct xdp_md *ctx) {
    __u32 *r = bpf_ringbuf_reserve(&rb, 4, 0);
    if (!r) return XDP_PASS;
    *r = 1;
    bpf_tail_call(ctx, &jt, 0);
    bpf_ringbuf_discard(r, 0);
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_checker_refuses_a_tail_call_holding_a_reservation(tmp_path):
    obj = build_text(TAIL_HELD_C, tmp_path)
    (p,) = check_object(read_object(obj)).programs
    (e,) = p.errors
    assert e.code == "unreleased-ref"
    assert "tail_call would lead to reference leak" in e.message
    assert e.source is not None and e.source.line == 13  # the bpf_tail_call line


@pytest.mark.kernel
def test_kernel_refuses_a_tail_call_holding_a_reservation_too(tmp_path):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = build_text(TAIL_HELD_C, tmp_path)
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(obj)).close()
    assert "tail_call would lead to reference leak" in ei.value.log


PLAIN_CTX = [
    (
        "sk_msg",
        "fn cork(n: u32) { msg_cork_bytes(n) }\n"
        "sk_msg fn f(ctx) {\n    cork(10)\n    return SK_PASS\n}\n",
        62,  # bpf_msg_cork_bytes
    ),
    (
        "sock_ops",  # no packet data: no cursor either
        "fn flags(v: u32) -> i64 { return sock_ops_cb_flags_set(v) }\n"
        "sock_ops fn f(ctx) {\n    flags(0)\n    return 1\n}\n",
        59,  # bpf_sock_ops_cb_flags_set
    ),
]


@pytest.mark.kernel
@pytest.mark.parametrize("kind,decls,helper", PLAIN_CTX, ids=[k[0] for k in PLAIN_CTX])
def test_a_plain_fn_passes_the_context_to_its_builtin(kind, decls, helper):
    """A plain fn is inlined with its caller's context (codegen had none to pass: a
    traceback); the helper call gets r1 = the program's context and the kernel loads it."""
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(compile_source('license "GPL"\n' + decls, "plain_ctx.bpfd").obj)
    (p,) = spec.programs.values()
    calls = [x for x in p.insns if x.is_helper_call and x.imm == helper]
    assert len(calls) == 1
    assert check_object(spec).ok
    with load_collection(spec) as coll:
        assert "f" in coll.programs


ORDER_SRC = """license "GPL"
struct event { tag: u32, n: u32 }
map events: ringbuf<event>(max_entries: 4096)
noinline fn note(n: u32) -> i64 {
    return ringbuf_output(events, event(tag: 2, n: n))
}
xdp fn f(ctx) {
    let r = ringbuf_reserve(events) else { return XDP_PASS }
    r.tag = 1
    r.n = note(ctx.len as u32) as u32        // a record output while `r` is open
    ringbuf_submit(r)
    let d = ringbuf_reserve(events) else { return XDP_PASS }
    d.tag = 3
    d.n = 0
    ringbuf_discard(d)
    ringbuf_output(events, event(tag: 4, n: 0))
    return XDP_PASS
}
"""


def test_records_come_in_ring_order_on_both_engines(bpf_program):
    """A reservation has its place in the ring from bpf_ringbuf_reserve: a record output
    while it is open comes after it, and a discarded one is skipped, on the kernel; the
    interpreter put records in submit order (an engine difference found by
    tests/fuzz/subprograms.py)."""
    prog = bpf_program(compile_source(ORDER_SRC, "order.bpfd").obj)
    prog.run(_frame())
    assert [e.value["tag"] for e in prog.events("events")] == [1, 2, 4]
