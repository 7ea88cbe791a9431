"""Struct arguments of BPF subprograms (issue 23): passed by value for the language, by
reference in the object.  A fn that only reads its struct parameter gets the caller's own
variable (one stack copy for any number of calls, as C's ``const struct key *``); a fn that
writes it gets a copy that lives for the call only, so the caller's variable keeps its
value; a chain of calls that still needs more than 512 bytes of stack is a located error."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether
from support.paths import ROOT

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.sema import analyzer


def _gen():
    spec = importlib.util.spec_from_file_location("acl_gen", ROOT / "benchmarks" / "acl_gen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


GEN = _gen()


def _stack(src: str, name: str = "acl_rules") -> int:
    res = compile_source(src, "t.bpfd", stats=True)
    (st,) = [s for s in res.stats if s.name == name]
    return st.stack


def test_one_copy_of_the_key_serves_every_rule():
    """200 rules each taking the 16-byte key: the program's stack is the key alone
    (issue 23: a copy per call needed 3,224 bytes and the kernel refused it)."""
    assert _stack(GEN.bpfd_key_source(200)) == 16


def test_copies_for_a_writing_callee_share_one_stack_slot():
    calls = "\n".join("    t = t + bump(key)" for _ in range(40))
    src = f"""license "GPL"
struct acc {{ a: u64, b: u64 }}
noinline fn bump(x: acc) -> u32 {{
    x.a = x.a + 1
    return x.a as u32
}}
xdp fn acl_rules(ctx) {{
    let key = acc(a: ctx.rx_queue_index as u64, b: 2)
    let t: u32 = 0
{calls}
    if t == 0 {{ return XDP_DROP }}
    return XDP_PASS
}}
"""
    assert _stack(src) <= 32  # the variable and one copy; 40 copies were 656 bytes


def _written(src: str) -> dict[str, frozenset[int]]:
    return analyzer.check(parse_program(src, "t.bpfd"), "t.bpfd").written_params


HEAD = 'license "GPL"\nstruct s { a: u32, b: u32 }\nxdp fn p(ctx) { return XDP_PASS }\n'


@pytest.mark.parametrize(
    "fns,written",
    [
        ("noinline fn f(x: s) -> u32 { return x.a }", {"f": set()}),
        ("noinline fn f(x: s) -> u32 { x.a = 1\n return 0 }", {"f": {0}}),
        ("noinline fn f(x: s) -> u32 { x.b += 1\n return 0 }", {"f": {0}}),
        ("noinline fn f(x: s) -> u32 { swap(x.a, x.b)\n return 0 }", {"f": {0}}),
        ("global fn f(x: s) -> i32 { let y = x else { return 0 }\n y.a = 2\n return 0 }",
         {"f": {0}}),
        ("global fn f(x: s) -> i32 { if let y = x { y.a = 2 }\n return 0 }", {"f": {0}}),
        ("noinline fn g(y: s) -> u32 { y.a = 1\n return 0 }\n"
         "noinline fn f(x: s, z: s) -> u32 { return g(x) + z.a }", {"g": {0}, "f": {0}}),
        ("noinline fn g(y: s) -> u32 { return y.a }\n"
         "noinline fn f(x: s) -> u32 { return g(x) }", {"g": set(), "f": set()}),
    ],
    ids=["reads", "assigns", "compound", "swap", "let-else-alias", "if-let-alias",
         "passed-to-a-writer", "passed-to-a-reader"],
)  # fmt: skip
def test_written_parameters(fns, written):
    got = _written(HEAD + fns)
    assert {k: set(v) for k, v in got.items()} == written


BY_VALUE = """license "GPL"
struct acc { n: u32, m: u32 }
noinline fn bump(a: acc) -> u32 {
    a.n = a.n + 5
    return a.n
}
global fn gbump(a: acc) -> i32 {
    let b = a else { return -1 }
    b.n = b.n + 7
    return b.n as i32
}
global fn peek(a: acc) -> i32 {
    let b = a else { return -1 }
    return b.n as i32
}
xdp fn f(ctx) {
    let x = acc(n: 1, m: 2)
    let r1 = bump(x)
    let r2 = gbump(x)
    let r3 = peek(x)
    if r1 == 6 && r2 == 8 && r3 == 1 && x.n == 1 { return XDP_PASS }
    return XDP_DROP
}
"""


def test_a_callee_that_writes_its_struct_parameter_leaves_the_callers_value(bpf_program, tmp_path):
    """By value for the user: the callee's writes go to its copy (both engines)."""
    src = tmp_path / "byvalue.bpfd"
    src.write_text(BY_VALUE)
    frame = bytes(Ether() / IP() / UDP(dport=1) / b"x")
    assert bpf_program(src).run(frame).verdict == "XDP_PASS"


def _frame(src: str, dst: str, proto: int, dport: int) -> bytes:
    l4 = TCP(sport=40000, dport=dport) if proto == 6 else UDP(sport=40000, dport=dport)
    return bytes(Ether() / IP(src=src, dst=dst) / l4 / b"payload")


def test_struct_key_rules_decide_as_the_first_matching_rule_on_both_engines(bpf_program, tmp_path):
    """The 200-rule struct-key ACL loads (the kernel checks the 16-byte key at each call:
    a PTR_TO_MEM argument) and gives the first matching rule's verdict."""
    rules = GEN.rules(200)
    path = tmp_path / "keyacl.bpfd"
    path.write_text(GEN.bpfd_key_source(200))
    prog = bpf_program(path)
    names = {GEN.XDP_DROP: "XDP_DROP", GEN.XDP_PASS: "XDP_PASS"}
    for r in (rules[0], rules[6], rules[150], rules[199]):
        src = r.src[0].rsplit(".", 1)[0] + ".9"
        dst = r.dst[0].rsplit(".", 2)[0] + f".{r.dst[0].split('.')[2]}.7"
        lo, hi = r.ports
        for c in (
            (src, dst, r.proto, lo),
            (src, dst, r.proto, hi + 1),
            (src, dst, 23 - r.proto, lo),
        ):
            assert prog.run(_frame(*c)).verdict == names[GEN.verdict_of(rules, *c)], c


def test_the_call_chain_check_costs_the_calls_not_the_paths():
    """7 levels of 8 global fns, each calling all 8 of the next level: 8**6 (262,144)
    chains from the program over 392 calls (8 frames: the kernel's most).  The check finds
    what fails below each fn once (walking every chain took seconds)."""
    import time

    from bpfdsl.backend.stackchain import check_call_chains
    from bpfdsl.compiler import front_end

    levels, width = 7, 8
    out = ['license "GPL"']
    for lv in range(levels - 1, -1, -1):
        for k in range(width):
            if lv == levels - 1:
                body = "    return n as i32"
            else:
                body = "    return " + " + ".join(f"f{lv + 1}_{j}(n)" for j in range(width))
            out.append(f"global fn f{lv}_{k}(n: u32) -> i32 {{\n{body}\n}}")
    out.append("xdp fn p(ctx) {\n    if f0_0(ctx.rx_queue_index) == 3 { return XDP_DROP }\n"
               "    return XDP_PASS\n}")  # fmt: skip
    checked = front_end("\n".join(out) + "\n", "wide.bpfd")
    depths = dict.fromkeys([*checked.fns, "p"], 8)
    t0 = time.process_time()
    check_call_chains(checked, depths)  # 8 frames of 16 bytes: within 512
    assert time.process_time() - t0 < 1.0
    depths["f6_3"] = 416  # now p -> f0_0 -> ... -> f6_3 is 16 + 6 * 16 + 416 bytes
    with pytest.raises(DiagnosticError) as ei:
        check_call_chains(checked, depths)
    d = ei.value.diagnostics[0]
    assert d.code == "stack-limit" and "528 bytes" in d.message
    # the kernel's first chain: the first call of each fn, then f5_0's fourth
    assert "p -> f0_0 -> f1_0 -> f2_0 -> f3_0 -> f4_0 -> f5_0 -> f6_3 needs" in d.message
