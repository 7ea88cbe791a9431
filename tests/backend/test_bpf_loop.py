"""`loop(count, callback[, state])`: the kernel's bpf_loop (helper 181) for loops whose
bound is a run-time value.  The callback is a static subprogram referenced by an ld_imm64
BPF_PSEUDO_FUNC; the kernel accepts the object, the interpreter runs it to the kernel's
results, the checker verifies the callback like the kernel (its own frame, r1 the index, r2
the caller's r3, r0 in [0, 1], static only), and bad calls are located errors."""

from __future__ import annotations

import pytest
from scapy.layers.l2 import Ether
from support.objbuild import build_text

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_PSEUDO_FUNC
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import check_insns, check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

SUM = """license "GPL"
struct scan { total: u64, found: u32 }
config n: u32 = 8
map weights: array<u32, u64>(max_entries: 64)
map out: array<u32, u64>(max_entries: 2)

// sums weights[0..] until a zero weight; the state is the caller's `s`, by reference
fn step(i: u32, st: scan) -> bool {
    let w = weights.lookup(i) else { return true }
    if w == 0 {
        st.found = 1
        return true
    }
    st.total += w
    return false
}

xdp fn sum(ctx) {
    let s = scan(total: 0)
    let calls = loop(n, step, s)
    out[0] = s.total
    out[1] = calls as u64
    if s.found != 0 && s.total > 100 { return XDP_DROP }
    return XDP_PASS
}
"""

COUNT = """license "GPL"
map per_index: array<u32, u64>(max_entries: 16)

noinline fn tick(i: u32) -> bool {
    per_index[i] += 1
    return false
}

xdp fn count(ctx) {
    loop(ctx.len as u32 % 16, tick)
    return XDP_PASS
}
"""


def _u64(v: int) -> bytes:
    return v.to_bytes(8, "little")


def test_loop_callback_is_a_static_function_referenced_by_ld_imm64_func():
    spec = read_object(compile_source(SUM, "sum.bpfd").obj)
    prog = spec.programs["sum"]
    assert prog.subprograms == ["step"]
    refs = [x for x in prog.insns if x.is_ld_imm64 and x.src == BPF_PSEUDO_FUNC]
    assert len(refs) == 1
    calls = [x for x in prog.insns if x.is_helper_call and x.imm == 181]
    assert len(calls) == 1
    (fn,) = [t for t in spec.btf.types if t.name == "step" and t.kind.name == "FUNC"]
    assert fn.linkage == 0  # BTF_FUNC_STATIC: the kernel calls only static callbacks


@pytest.mark.parametrize(
    "weights,total,calls,verdict",
    [
        ({}, 0, 1, "XDP_PASS"),  # weights[0] == 0: found at once, 1 call
        ({0: 50, 1: 60}, 110, 3, "XDP_DROP"),  # 50 + 60, stops at the zero weights[2]
        ({k: 1 for k in range(8)}, 8, 8, "XDP_PASS"),  # n = 8 calls, never found
    ],
)
def test_loop_sums_through_the_callback_on_both_engines(
    bpf_program, tmp_path, weights, total, calls, verdict
):
    src = tmp_path / "sum.bpfd"
    src.write_text(SUM)
    prog = bpf_program(src)
    for k, w in weights.items():
        prog.maps["weights"].set(k, _u64(w))
    assert prog.run(bytes(Ether() / (b"x" * 60))).verdict == verdict
    assert prog.maps["out"].get(0) == _u64(total)
    assert prog.maps["out"].get(1) == _u64(calls)  # bpf_loop's result: the calls made


def test_loop_count_is_a_run_time_value_and_the_callback_sees_each_index(bpf_program, tmp_path):
    src = tmp_path / "count.bpfd"
    src.write_text(COUNT)
    prog = bpf_program(src)
    prog.run(bytes(35))  # 35 % 16 = 3 calls: indexes 0, 1, 2
    prog.run(bytes(33))  # 1 call: index 0
    got = [int.from_bytes(prog.maps["per_index"].get(i), "little") for i in range(4)]
    assert got == [2, 1, 1, 0]


def test_loop_passes_the_checker_with_the_callback_in_its_own_frame():
    res = check_object(read_object(compile_source(SUM, "sum.bpfd").obj))
    assert res.ok, [e.message for p in res.programs for e in p.errors]


# ---- the checker refuses what the kernel refuses ------------------------------------


def _callback_returning(value: int) -> list[I.Insn]:
    """A program calling bpf_loop(1, cb, NULL, 0) where cb returns ``value``."""
    return [
        I.mov64_imm(1, 1),
        I.ld_imm64(2, 5, src=BPF_PSEUDO_FUNC),  # slot 1 + 1 + 5 = 7: the callback
        I.mov64_imm(3, 0),
        I.mov64_imm(4, 0),
        I.call(181),
        I.exit_(),
        I.mov64_imm(0, value),
        I.exit_(),
    ]


def test_checker_refuses_a_callback_result_outside_0_1_like_the_kernel():
    res = check_insns(_callback_returning(2), ProgramType.XDP, AttachType.XDP)
    assert [e.message for e in res.errors] == [
        "At callback return the register R0 has smin=2 smax=2 should have been in [0, 1]"
    ]
    assert check_insns(_callback_returning(1), ProgramType.XDP, AttachType.XDP).ok


RET2_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
static long cb(__u64 i, void *ctx) { return 2; }
SEC("xdp") int p(struct xdp_md *ctx) {
    bpf_loop(ctx->rx_queue_index, cb, 0, 0);
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.kernel
def test_checker_and_kernel_refuse_a_callback_result_of_2(tmp_path):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = build_text(RET2_C, tmp_path)
    res = check_object(read_object(obj))
    msgs = [e.message for p in res.programs for e in p.errors]
    assert msgs == [
        "At callback return the register R0 has smin=2 smax=2 should have been in [0, 1]"
    ]
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(obj)).close()
    assert "should have been in [0, 1]" in ei.value.log


GLOBAL_CB_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__noinline long cb(__u64 i, void *ctx) { return 0; }
SEC("xdp") int p(struct xdp_md *ctx) {
    bpf_loop(ctx->rx_queue_index, cb, 0, 0);
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.kernel
def test_checker_and_kernel_refuse_a_global_callback(tmp_path):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = build_text(GLOBAL_CB_C, tmp_path)
    res = check_object(read_object(obj))
    assert [e.message for p in res.programs for e in p.errors] == ["callback function not static"]
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(obj)).close()
    assert "callback function not static" in ei.value.log


# ---- bad input ------------------------------------------------------------------------

HEAD = """license "GPL"
struct acc { n: u32 }
struct other { m: u32 }
fn ok(i: u32, st: acc) -> bool { return false }
global fn glob(i: u32, st: acc) -> i32 { return 0 }
fn wrong(i: u32, st: acc) -> u32 { return 0 }
fn one(i: u32) -> bool { return false }
fn narrow(i: u8, st: acc) -> bool { return false }
xdp fn p(ctx) {
    let a = acc(n: 0)
    let o = other(m: 0)
"""  # the call under test is line 12

# (name, the call, code, col of the error on line 12, words in the message, in the hint)
BAD = [
    ("not_a_fn", "loop(4, nosuch, a)", "loop-callback", 13, "must name a fn", None),
    ("global_callback", "loop(4, glob, a)", "loop-callback", 13, "a global fn", "noinline"),
    ("not_bool", "loop(4, wrong, a)", "loop-callback", 13, "returns bool", "-> bool"),
    ("state_missing", "loop(4, ok)", "loop-callback", 13, "takes (i: u32)", "fn ok(i: u32)"),
    ("state_not_local", "loop(4, ok, 7)", "loop-state", 17, "struct variable", "let acc"),
    ("state_type", "loop(4, ok, o)", "loop-state", 17, "takes a acc state", None),
    ("extra_state", "loop(4, one, a)", "loop-callback", 13, "with a state", "state: STRUCT"),
    ("narrow_index", "loop(4, narrow, a)", "loop-callback", 13, "takes (i: u32", "i: u32"),
]


@pytest.mark.parametrize("name,call,code,col,msg,hint", BAD, ids=[b[0] for b in BAD])
def test_bad_loop_is_a_located_error(name, call, code, col, msg, hint):
    src = HEAD + f"    {call}\n    return XDP_PASS\n}}\n"
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    d = next(d for d in ei.value.diagnostics if d.code == code)
    assert (d.span.line, d.span.col) == (12, col), d.render(ei.value.source)
    assert msg in d.message, d.render(ei.value.source)
    if hint is not None:
        assert any(hint in h for h in d.hints), d.render(ei.value.source)


def test_recursion_through_a_loop_callback_is_refused():
    src = """license "GPL"
struct acc { n: u32 }
fn again(i: u32, st: acc) -> bool {
    loop(2, again, st)
    return false
}
xdp fn p(ctx) { return XDP_PASS }
"""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == "recursion" and (d.span.line, d.span.col) == (3, 1)


def test_checker_refuses_a_callback_without_btf_func_info_like_the_kernel():
    """The kernel needs BTF func info for a function address ("missing btf func_info",
    seen loading _callback_returning(1) without BTF); the checker says so when it knows
    the program has none."""
    ins = _callback_returning(1)
    res = check_insns(ins, ProgramType.XDP, AttachType.XDP, has_func_info=False)
    assert [e.message for e in res.errors] == ["missing btf func_info"]


# ---- a count known to be 0: the kernel never walks the callback ------------------------

# issue #23: a noinline fn before the loop (two subprograms), the count a config set to 0
ZERO = """license "GPL"
struct scan { total: u64 }
config n: u32 = 0
map out: array<u32, u64>(max_entries: 2)

noinline fn ttl_low(ip: ipv4, min: u8) -> bool {
    return ip.ttl < min
}

fn step(i: u32, st: scan) -> bool {
    st.total += i + 1
    return false
}

xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ttl_low(ip, 2) { return XDP_DROP }
    let s = scan(total: 0)
    let calls = loop(n, step, s)
    out[0] = s.total
    out[1] = calls as u64
    return XDP_PASS
}
"""


def _ipv4_frame() -> bytes:
    from scapy.layers.inet import IP, UDP

    return bytes(Ether() / IP(ttl=64) / UDP() / (b"x" * 20))


@pytest.mark.parametrize("n,total,calls", [(0, 0, 0), (3, 6, 3)])
def test_loop_with_a_config_count_of_0_loads_and_runs_on_both_engines(
    bpf_program, tmp_path, n, total, calls
):
    """The kernel skips the callback of a bpf_loop whose count it knows to be 0 and drops
    it as dead code; the function address left made it refuse the program ("verifier
    bug: No program to jit").  The compiler skips the call when the count is 0."""
    src = tmp_path / "zero.bpfd"
    src.write_text(ZERO)
    prog = bpf_program(src, config={"n": n})
    assert prog.run(_ipv4_frame()).verdict == "XDP_PASS"
    assert prog.maps["out"].get(0) == _u64(total)
    assert prog.maps["out"].get(1) == _u64(calls)


def test_loop_with_a_config_count_of_0_keeps_every_subprogram_referenced():
    spec = read_object(compile_source(ZERO, "zero.bpfd").obj)
    prog = spec.programs["f"]
    assert prog.subprograms == ["ttl_low", "step"]
    assert sum(x.is_ld_imm64 and x.src == BPF_PSEUDO_FUNC for x in prog.insns) == 1
    res = check_object(spec)
    assert res.ok, [e.message for p in res.programs for e in p.errors]


ZERO_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
const volatile __u32 n = 0;
static __noinline int low(__u32 v) { return v < 2; }
static long cb(__u64 i, void *ctx) { return 0; }
SEC("xdp") int p(struct xdp_md *ctx) {
    if (low(ctx->rx_queue_index))
        return XDP_DROP;
    bpf_loop(n, cb, 0, 0);
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.kernel
def test_checker_and_kernel_refuse_a_dead_loop_callback_referenced_after_dead_code_removal(
    tmp_path,
):
    """clang's object calls bpf_loop(n, cb) with a .rodata n of 0 (known to the verifier:
    frozen), after a call of another static function: the kernel never walks cb, removes
    it, and the function address names no subprogram left."""
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = build_text(ZERO_C, tmp_path)
    res = check_object(read_object(obj))
    errs = [e for p in res.programs for e in p.errors]
    assert [e.code for e in errs] == ["dead-subprog"]
    assert errs[0].message.startswith("verifier bug: No program to jit at insn ")
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(obj)).close()
    assert "No program to jit" in ei.value.log
    load_collection(read_object(obj), config={"n": 4}).close()  # walked: accepted


def test_checker_accepts_a_dead_loop_callback_when_it_is_the_only_subprogram():
    """One subprogram left after the removal: jit_subprogs has nothing to split (the
    kernel loads such a program, as with a plain fn in place of the noinline one)."""
    insns = [
        I.mov64_imm(1, 0),
        I.ld_imm64(2, 5, src=BPF_PSEUDO_FUNC),
        I.mov64_imm(3, 0),
        I.mov64_imm(4, 0),
        I.call(181),
        I.exit_(),
        I.mov64_imm(0, 0),
        I.exit_(),
    ]
    assert check_insns(insns, ProgramType.XDP, AttachType.XDP).ok
