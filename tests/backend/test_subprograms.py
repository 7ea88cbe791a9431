"""BPF subprograms: `noinline fn` (a static subprogram, a BPF-to-BPF call) and `global fn`
(a global function the kernel verifies once, on its own).  The objects carry the BTF clang
writes for `static __noinline` and global functions, the kernel accepts them and runs them
to the right verdicts on both engines, the checker follows the calls like the kernel
(frames, global functions with nullable pointer arguments, 8 frames, 512 bytes of stack),
and bad input is a located error with a hint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from support.objbuild import build_text
from support.paths import ROOT
from support.unchecked import emit_unchecked

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC, Kind
from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

SUBPROGS = """license "GPL"
struct limits { min_ttl: u8, port: be16 }
map hits: array<u32, u64>(max_entries: 4)

noinline fn ttl_low(ip: ipv4, min: u8) -> bool {   // a header view: a packet pointer
    return ip.ttl < min
}

global fn port_blocked(lim: limits, udp: udp) -> i32 {
    let l = lim else { return -1 }                    // pointers may be NULL here
    let u = udp else { return -1 }
    if u.dest == l.port { return 1 }
    return 0
}

global fn count(slot: u32) -> i32 {
    hits[slot] += 1
    return 0
}

xdp fn filter(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ttl_low(ip, 2) {
        count(0)
        return XDP_DROP
    }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    if port_blocked(limits(min_ttl: 2, port: 9999), udp) == 1 {
        count(1)
        return XDP_DROP
    }
    return XDP_PASS
}
"""

C_TWIN = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct limits { __u8 min_ttl; __be16 port; };
static __noinline int ttl_low(void *ip, __u8 min) { return *(__u8 *)(ip + 8) < min; }
__noinline int port_blocked(struct limits *lim, void *udp) { return lim && udp; }
SEC("xdp") int filter(struct xdp_md *ctx) {
    struct limits l = {2, 9};
    void *d = (void *)(long)ctx->data, *e = (void *)(long)ctx->data_end;
    if (d + 34 > e) return XDP_PASS;
    return ttl_low(d + 14, 2) + port_blocked(&l, d);
}
char LICENSE[] SEC("license") = "GPL";
"""


def _obj(src: str = SUBPROGS) -> bytes:
    return compile_source(src, "subprogs.bpfd").obj


def _funcs(obj: bytes) -> dict[str, tuple[int, list[str]]]:
    """BTF FUNC name -> (linkage, FUNC_PROTO parameter names)."""
    btf = read_object(obj).btf
    out = {}
    for t in btf.types:
        if t.kind == Kind.FUNC:
            out[t.name] = (t.linkage, [m.name for m in btf[t.type].members])
    return out


def _error(src: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    return ei.value


def test_subprograms_have_the_btf_clang_writes_for_static_noinline_and_global_functions():
    funcs = _funcs(_obj())
    assert funcs["ttl_low"] == (BTF_FUNC_STATIC, ["ip", "min"])
    assert funcs["port_blocked"] == (BTF_FUNC_GLOBAL, ["lim", "udp"])
    assert funcs["count"] == (BTF_FUNC_GLOBAL, ["slot"])
    assert funcs["filter"] == (BTF_FUNC_GLOBAL, ["ctx"])
    prog = read_object(_obj()).programs["filter"]
    # the subprograms are .text functions linked after the program, each with func info
    assert sorted(prog.subprograms) == ["count", "port_blocked", "ttl_low"]
    assert sorted(f.name for f in prog.func_info) == ["count", "filter", "port_blocked", "ttl_low"]


def test_subprogram_btf_matches_clangs_for_the_same_declarations(tmp_path):
    clang = _funcs(build_text(C_TWIN, tmp_path).read_bytes())
    ours = _funcs(_obj())
    for name in ("ttl_low", "port_blocked", "filter"):
        assert ours[name] == clang[name], name


def test_a_plain_fn_is_still_inlined():
    src = SUBPROGS.replace("noinline fn ttl_low", "fn ttl_low")
    prog = read_object(_obj(src)).programs["filter"]
    assert "ttl_low" not in prog.subprograms
    assert "ttl_low" not in _funcs(_obj(src))


VOID_FN = """license "GPL"
map hits: array<u32, u64>(max_entries: 4)
noinline fn bump(ip: ipv4, by: u8) {          // returns nothing: BTF FUNC_PROTO ret_type 0
    hits[1] += ip.ttl as u64
    hits[2] += by as u64
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    bump(ip, 3)
    return XDP_DROP
}
"""


def test_a_noinline_fn_returning_nothing_is_a_void_subprogram(bpf_program):
    """A `noinline fn` without a result type (found by tests/fuzz/subprograms.py: the
    void return's null in the DISubroutineType crashed llvmlite, AttributeError, on
    every such fn): BTF FUNC_PROTO with return type void (0), as clang writes
    ``static __noinline void``, and it runs on both engines."""
    obj = compile_source(VOID_FN, "void_fn.bpfd").obj
    btf = read_object(obj).btf
    (fn,) = [t for t in btf.types if t.kind == Kind.FUNC and t.name == "bump"]
    assert fn.linkage == BTF_FUNC_STATIC and btf[fn.type].type == 0
    prog = bpf_program(obj)
    assert prog.run(_udp(53, ttl=9)).verdict == "XDP_DROP"
    assert prog.maps["hits"].get(1) == (9).to_bytes(8, "little")
    assert prog.maps["hits"].get(2) == (3).to_bytes(8, "little")


def _udp(dport: int, ttl: int = 64) -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", ttl=ttl) / UDP(dport=dport) / b"x")


def test_subprograms_give_the_verdicts_on_both_engines(bpf_program, tmp_path):
    src = tmp_path / "subprogs.bpfd"
    src.write_text(SUBPROGS)
    prog = bpf_program(src)
    assert prog.run(_udp(9999)).verdict == "XDP_DROP"
    assert prog.run(_udp(53)).verdict == "XDP_PASS"
    assert prog.run(_udp(53, ttl=1)).verdict == "XDP_DROP"
    tcp = Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(dport=9999)
    assert prog.run(tcp).verdict == "XDP_PASS"
    assert prog.maps["hits"].get(0) == (1).to_bytes(8, "little")  # the TTL drop
    assert prog.maps["hits"].get(1) == (1).to_bytes(8, "little")  # the port drop


def test_checker_follows_static_calls_and_verifies_global_functions_on_their_own():
    res = check_object(read_object(_obj()))
    assert res.ok, [e.message for p in res.programs for e in p.errors]
    (p,) = res.programs
    # the program, then each global function once: more than the program's own insns
    assert p.insns_processed > 0


@pytest.mark.kernel
def test_a_global_fn_with_unread_parameters_loads():
    """The optimizer may pass garbage for a global function's argument its body never
    reads; the kernel checks every register against the BTF prototype ("R2 is not a
    scalar").  bpfdsl keeps every argument, so such a fn still loads."""
    from bpfdsl.runtime.loader import load_collection

    src = """license "GPL"
global fn first(a: u32, unused: u32, also: ipv4) -> i32 { return a as i32 }
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if first(ctx.rx_queue_index, 7, ip) > 100 { return XDP_DROP }
    return XDP_PASS
}
"""
    with load_collection(read_object(_obj(src))) as coll:
        assert "f" in coll.programs


# ---- the checker agrees with the kernel on what it refuses ----------------------------

UNCHECKED_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct pair { __u32 a, b; };
__noinline int peek(struct pair *p) { return p->a; }
SEC("xdp") int f(struct xdp_md *ctx) { struct pair p = {1, 2}; return peek(&p) ? 2 : 1; }
char LICENSE[] SEC("license") = "GPL";
"""

BAD_ARG_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__noinline int second(__u32 a, __u32 b) { return a > 3; }
SEC("xdp") int f(struct xdp_md *ctx) {
    void *d = (void *)(long)ctx->data;
    return second(ctx->rx_queue_index, (long)d);
}
char LICENSE[] SEC("license") = "GPL";
"""


def _kernel_log(obj: Path) -> str:
    from bpfdsl.runtime.loader import VerifierError, load_collection

    try:
        load_collection(read_object(obj)).close()
    except VerifierError as e:
        return e.log
    return ""


@pytest.mark.kernel
@pytest.mark.parametrize(
    "text,checker,kernel",
    [
        (UNCHECKED_C, "R1 invalid mem access 'mem_or_null'", "invalid mem access 'mem_or_null'"),
        (BAD_ARG_C, "R2 is not a scalar", "R2 is not a scalar"),
    ],
    ids=["unchecked-pointer-argument", "pointer-for-an-integer-argument"],
)
def test_checker_refuses_global_function_faults_as_the_kernel_does(tmp_path, text, checker, kernel):
    obj = build_text(text, tmp_path)
    res = check_object(read_object(obj))
    errs = [e.message for p in res.programs for e in p.errors]
    assert any(checker in m for m in errs), errs
    assert kernel in _kernel_log(obj)


NORET_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
__attribute__((noinline, naked)) static int noret(void) { asm volatile("r1 = 1; exit"); }
SEC("xdp") int f(struct xdp_md *ctx) { %s }
char LICENSE[] SEC("license") = "GPL";
"""

# a static subprogram whose exit leaves r0 unset, as LLVM leaves one whose result no caller
# uses (IPSCCP): the kernel hands r0 back as it is (prepare_func_exit); only a read fails
NORET_SRC = """license "GPL"
noinline fn flip(tcp: tcp) -> u32 {
    swap(tcp.source, tcp.dest)
    return 4294967295
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let tcp = parse tcp else { return XDP_PASS }
    if flip(tcp) == 0 { return XDP_DROP }
    return XDP_TX
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize(
    "body,refused",
    [("noret(); return XDP_PASS;", ""), ("return noret();", "R0 !read_ok")],
    ids=["result-unused", "result-read"],
)
def test_static_subprogram_exit_with_r0_unset_as_the_kernel(tmp_path, body, refused):
    """The checker refused every static subprogram exit with r0 unset ("R0 !read_ok",
    found by tests/fuzz/subprograms.py: a false refusal of objects the kernel loads); the
    kernel refuses only the caller's read of it, and so does the checker now."""
    obj = build_text(NORET_C % body, tmp_path)
    res = check_object(read_object(obj))
    errs = [e.message for p in res.programs for e in p.errors]
    assert (refused in errs[0]) if refused else not errs, errs
    log = _kernel_log(obj)
    assert (refused in log) if refused else log == "", log


@pytest.mark.kernel
@pytest.mark.parametrize("reg", [1, 10], ids=["callers-stack", "own-stack"])
def test_subprogram_returning_any_stack_pointer_is_refused_as_by_the_kernel(reg: int):
    """A static subprogram whose r0 holds a stack address at its exit: the kernel refuses
    any frame's (prepare_func_exit: "cannot return stack pointer to the caller"), the
    checker refused only the callee's own and accepted the caller's, which LLVM leaves
    in r0 when no caller uses the result (tests/fuzz/reproducers/ret_stack_pointer.bpfd,
    found by tests/fuzz/subprograms.py: a checker OK the kernel refused)."""
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.opcodes import BPF_ADD
    from bpfdsl.abi.prog_types import AttachType, ProgramType, XdpAction
    from bpfdsl.checker import check_insns
    from bpfdsl.kernel import syscall as S

    ins = [
        I.mov64_imm(2, 0),
        I.stx_mem(8, 10, 2, -8),
        I.mov64_reg(1, 10),
        I.alu64_imm(BPF_ADD, 1, -8),  # r1: the caller's fp-8
        I.call_pc(2),
        I.mov64_imm(0, XdpAction.PASS),
        I.exit_(),
        I.mov64_reg(0, reg),  # the subprogram: r0 = r1 (the caller's stack) or r10
        I.exit_(),
    ]
    res = check_insns(ins, ProgramType.XDP, AttachType.XDP)
    assert [e.message for e in res.errors] == ["cannot return stack pointer to the caller"]
    with pytest.raises(S.BpfError) as ei:
        S.prog_load(ProgramType.XDP, I.encode(ins), "GPL", log_level=1)[0].close()
    assert "cannot return stack pointer to the caller" in ei.value.log


def test_fn_whose_result_llvm_drops_compiles_and_runs(bpf_program):
    """The bpfdsl program the fuzzer found: ``flip``'s constant result is folded into the
    caller, so its exit leaves r0 unset; it compiles (the checker accepts) and runs."""
    obj = compile_source(NORET_SRC, "noret.bpfd").obj
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(sport=1, dport=2))
    r = bpf_program(obj).run(frame)
    assert r.verdict == "XDP_TX"
    assert r.packet[TCP].sport == 2 and r.packet[TCP].dport == 1


def _chain(depth: int, struct_bytes: int = 8) -> str:
    """A program calling f1 -> f2 -> ... -> f{depth} (noinline fns), each storing a
    local struct of ``struct_bytes`` bytes (on its stack) into a map first."""
    words = struct_bytes // 8
    fields = ", ".join(f"w{i}: u64" for i in range(words))
    out = [f'license "GPL"\nstruct big {{ {fields} }}\nmap keep: array<u32, big>(max_entries: 1)']
    for k in range(depth, 0, -1):
        body = (
            f"    keep[0] = big(w0: x as u64)\n    return f{k + 1}(x + 1)"
            if k < depth
            else "    return x + 1"
        )
        out.append(f"noinline fn f{k}(x: u32) -> u32 {{\n{body}\n}}")
    out.append("xdp fn p(ctx) {\n    if f1(ctx.rx_queue_index) == 0 { return XDP_DROP }\n"
               "    return XDP_PASS\n}")  # fmt: skip
    return "\n".join(out) + "\n"


def test_checker_counts_frames_like_the_kernel():
    compile_source(_chain(7), "ok.bpfd")  # 8 frames: the program and 7 calls
    err = _error(_chain(8))
    d = err.diagnostics[0]
    assert d.code == "checker-call-depth"
    assert "the call stack of 9 frames is too deep" in d.message
    assert d.span is not None and d.span.file == "bad.bpfd"


@pytest.mark.kernel
def test_kernel_refuses_nine_frames_too(tmp_path):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    res = compile_source(_chain(8), "deep.bpfd", check=False)
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(res.obj)).close()
    assert "frames is too deep" in ei.value.log


def test_compiler_refuses_a_call_chain_over_512_bytes_at_the_call():
    """Located before the kernel: the call that passes the limit, the total, each frame."""
    err = _error(_chain(4, struct_bytes=200))
    d = err.diagnostics[0]
    assert d.code == "stack-limit"
    assert "the call chain p -> f1 -> f2 -> f3" in d.message and "allows 512" in d.message
    assert d.span is not None and d.span.file == "bad.bpfd" and d.span.line > 1
    assert d.notes and "`f1`" in d.notes[0] and "bytes" in d.notes[0]
    assert d.hints


def test_checker_adds_up_the_stack_of_a_call_chain():
    res = check_object(read_object(emit_unchecked(_chain(4, 200))))
    errs = [e for p in res.programs for e in p.errors]
    assert errs and errs[0].code == "stack-depth", errs
    assert "combined stack size of" in errs[0].message and "Too large" in errs[0].message


@pytest.mark.kernel
def test_kernel_refuses_the_combined_stack_too():
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = emit_unchecked(_chain(4, struct_bytes=200))
    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(obj)).close()
    assert "combined stack size" in ei.value.log


# ---- bad input ------------------------------------------------------------------------

HEAD = 'license "GPL"\nstruct pair { a: u32, b: u32 }\n'
TAIL = "xdp fn p(ctx) { return XDP_PASS }\n"

# (name, declarations between HEAD and TAIL, code, line, col, words in message, in hint)
BAD = [
    (
        "recursion_through_noinline",
        "noinline fn a(x: u32) -> u32 { return b(x) }\nnoinline fn b(x: u32) -> u32 { return a(x) }\n",
        "recursion",
        3,
        1,
        "calls itself",
        "bounded `for`",
    ),
    (
        "global_returns_nothing",
        "global fn g(x: u32) { }\n",
        "global-return",
        3,
        1,
        "must return an integer",
        "-> i32",
    ),
    (
        "six_parameters",
        "noinline fn s(a: u32, b: u32, c: u32, d: u32, e: u32, f: u32) -> u32 { return a }\n",
        "too-many-params",
        3,
        55,
        "at most 5 parameters",
        "struct",
    ),
    (
        "unchecked_global_argument",
        "global fn g(p: pair) -> u32 { return p.a }\n",
        "nullable-arg",
        3,
        38,
        "`p` may be NULL",
        "let v = p else",
    ),
    (
        "unchecked_global_header",
        "global fn g(ip: ipv4) -> u32 { if ip.ttl == 0 { return 1 } return 0 }\n",
        "nullable-arg",
        3,
        35,
        "`ip` may be NULL",
        "if let v = ip",
    ),
    (
        "unknown_modifier",
        "inlined fn g(x: u32) -> u32 { return x }\n",
        "fn-modifier",
        3,
        1,
        "unknown fn modifier `inlined`",
        "noinline",
    ),
    (
        "program_kind_with_parameters",
        "xdp fn g(x: u32) -> u32 { return x }\n",
        "fn-modifier",
        3,
        1,
        "unknown fn modifier `xdp`",
        "only its context",
    ),
    (
        "parsing_noinline_loop_callback",  # a plain fn that parses may be one
        "noinline fn cb(i: u32) -> bool { let ip = parse ipv4 else { return true } "
        "return false }\n"
        "xdp fn q(ctx) { loop(2, cb) return XDP_PASS }\n",
        "loop-callback",
        4,
        25,
        "parses or reads packet bytes",
        "`fn cb`",
    ),
]


@pytest.mark.parametrize("name,decls,code,line,col,msg,hint", BAD, ids=[b[0] for b in BAD])
def test_bad_subprogram_is_a_located_error(name, decls, code, line, col, msg, hint):
    err = _error(HEAD + decls + TAIL)
    d = next(d for d in err.diagnostics if d.code == code)
    assert (d.span.line, d.span.col) == (line, col), d.render(err.source)
    assert msg in d.message and any(hint in h for h in d.hints), d.render(err.source)


def test_bad_subprogram_on_the_command_line_exits_1_with_the_line_and_a_caret(tmp_path):
    src = tmp_path / "bad.bpfd"
    src.write_text(HEAD + "global fn g(p: pair) -> u32 { return p.a }\n" + TAIL)
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(src), "-o", str(tmp_path / "o.o")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 1
    assert f"{src}:3:38" in r.stderr and "^" in r.stderr and "help:" in r.stderr
    assert "Traceback" not in r.stderr


def _without_null_check(spec):
    """``spec`` with the global fn's first NULL check (``if r1 == 0``) made a no-op."""
    import dataclasses

    from bpfdsl.abi import insn as I

    p = spec.programs["filter"]
    start = next(f.insn_off for f in p.func_info if f.name == "port_blocked")
    by_slot = {s: k for k, s in enumerate(I.slot_offsets(p.insns))}
    k = next(
        i
        for i in range(by_slot[start], len(p.insns))
        if p.insns[i].is_cond_jump and p.insns[i].dst == 1 and p.insns[i].imm == 0
    )
    insns = list(p.insns)
    insns[k] = I.ja(0)
    spec.programs["filter"] = dataclasses.replace(p, insns=insns)
    return spec


def test_checker_errors_in_a_global_fn_name_its_source_line():
    spec = _without_null_check(read_object(_obj()))
    (p,) = check_object(spec).programs
    (e,) = p.errors
    assert e.message == "R1 invalid mem access 'mem_or_null'"
    assert e.source is not None and e.source.line == 12  # `if u.dest == l.port` in the fn
    assert "l.port" in e.source.text


@pytest.mark.kernel
def test_kernel_refuses_the_unchecked_pointer_too():
    from bpfdsl.runtime.loader import VerifierError, load_collection

    with pytest.raises(VerifierError) as ei:
        load_collection(_without_null_check(read_object(_obj()))).close()
    assert "invalid mem access 'mem_or_null'" in ei.value.log
    assert ei.value.diagnostics[0].span.line == 12
