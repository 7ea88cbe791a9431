"""``bpf_NAME(...)`` results have the prototype's C type (``HelperProto.ret_ctype``, from
include/uapi/linux/bpf.h): ``long``/``s64`` are ``i64``, ``u64`` and ``u32`` as named.  So a
``long`` result compares as signed (``x - 1 < 0`` holds for 0), a ``u32`` wraps at 32 bits,
on both engines alike; the table's C types are libbpf's (bpf_helper_defs.h, generated from the
kernel's doc comments); helpers that change the packet are refused by name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bpfdsl.abi.helpers import PROTOTYPES, RetKind, callable_by_name
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang.c_names import c_form

SIGNS = """license "GPL"
map out: array<u32, u64>(max_entries: 8)
xdp fn signs(ctx) {
    let node = bpf_get_numa_node_id()            // long: i64
    out[0] = node as u64
    if node - 1 < 0 { out[1] = 1 }               // signed: true for node 0
    let cpu = bpf_get_smp_processor_id()         // u32
    out[2] = (cpu - (cpu + 1)) as u64            // wraps at 32 bits: 0xffffffff
    out[3] = bpf_get_prandom_u32() as u64 >> 32  // a u32 has no upper bits
    let t: u64 = bpf_ktime_get_coarse_ns()       // u64
    if t > 0 { out[4] = 1 }
    let r = bpf_redirect(0, 1)                   // long; from XDP any flag gives XDP_ABORTED
    out[5] = r as u64
    if r >= 0 { out[6] = 1 }
    return XDP_PASS
}
"""


def test_results_have_the_prototypes_types(bpf_program) -> None:
    prog = bpf_program(compile_source(SIGNS, "signs.bpfd").obj)
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    out = {i: prog.maps["out"].total(i) for i in range(7)}
    node = out[0]
    assert out[1] == (1 if node == 0 else 0)  # i64: node - 1 < 0 exactly when node is 0
    assert out[2] == 0xFFFFFFFF
    assert out[3] == 0
    assert out[4] == 1
    assert out[5] == 0 and out[6] == 1  # XDP_ABORTED, compared as a signed long


@pytest.mark.parametrize(
    "stmt, code, words",
    [
        ("let x: u32 = bpf_get_numa_node_id()", "type-mismatch", "expected u32, found i64"),
        ("let x: u64 = bpf_get_numa_node_id()", "mixed-signedness", "expected u64, found i64"),
        ("let x: u32 = bpf_jiffies64()", "type-mismatch", "u64"),
        ("let x: i64 = bpf_ktime_get_coarse_ns()", "mixed-signedness", "expected i64, found u64"),
    ],
)
def test_results_convert_only_as_their_type_does(stmt: str, code: str, words: str) -> None:
    src = f'license "GPL"\nxdp fn f(ctx) {{\n    {stmt}\n    return XDP_PASS\n}}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "r.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == code and words in d.message, d.concise()
    assert (d.span.line, d.span.col) == (3, len("    let x: u32 = ") + 1)


@pytest.mark.parametrize("stmt", ["let x: u32 = bpf_get_prandom_u32()",
                                  "let x: u64 = bpf_get_current_pid_tgid()",
                                  "let x: i64 = bpf_get_numa_node_id()"])  # fmt: skip
def test_results_take_their_own_type(stmt: str) -> None:
    """A helper's result bound at its own type compiles with no diagnostic at all (the
    checker, run by compile_source, accepts the object too)."""
    res = compile_source(
        f'license "GPL"\nxdp fn f(ctx) {{\n    {stmt}\n    return XDP_PASS\n}}\n', "r.bpfd"
    )
    assert res.programs == ["f"] and res.warnings == []


HELPER_DEFS = Path("/usr/include/bpf/bpf_helper_defs.h")
_DEF = re.compile(r"^static (.+?)\s*\(\s*\*\s*(?:const\s+)?bpf_(\w+)\)", re.M)


# RET_VOID in the kernel's proto though bpf_helper_defs.h declares them long: bpf_tail_call
# (returns only on failure), bpf_spin_lock/unlock (kernel/bpf/helpers.c: "return 0")
RET_VOID_DECLARED_LONG = {"tail_call", "spin_lock", "spin_unlock"}


def test_return_types_are_libbpfs() -> None:
    """Every modelled integer helper's C type is the one libbpf declares (its
    bpf_helper_defs.h is generated from the kernel's include/uapi/linux/bpf.h)."""
    if not HELPER_DEFS.exists():
        pytest.skip(f"{HELPER_DEFS} not installed (libbpf-dev)")
    decl = {
        name: ty.replace("__bpf_fastcall", "").replace("__", "").strip()
        for ty, name in _DEF.findall(HELPER_DEFS.read_text())
    }
    checked = 0
    for h in PROTOTYPES:
        if h.modelled and h.ret is RetKind.INTEGER:
            assert decl[h.name] == h.ret_ctype, h.name
            checked += 1
        elif h.modelled and h.ret is RetKind.VOID and h.name not in RET_VOID_DECLARED_LONG:
            assert decl[h.name] == "void", h.name
    assert checked >= 30


def test_packet_changing_helpers_are_called_through_the_language() -> None:
    """Each helper that changes the packet and takes scalars has the language's form (which
    invalidates header views); by name it is refused, naming that form."""
    changing = [h for h in PROTOTYPES if callable_by_name(h) and h.pkt_changing]
    assert {h.name for h in changing} >= {"xdp_adjust_head", "xdp_adjust_tail", "msg_pull_data"}
    for h in changing:
        given = ["1" for _ in (h.args or ())[1:]]
        got = c_form(f"bpf_{h.name}", given)  # the form with these arguments put in
        assert got is not None, h.name
        form = got[0]
        kind = "sk_msg fn f(msg) {\n" if h.name.startswith("msg_") else "xdp fn f(ctx) {\n"
        args = ", ".join(given)
        src = f'license "GPL"\n{kind}    let r = bpf_{h.name}({args})\n    return 1\n}}\n'
        with pytest.raises(DiagnosticError) as ei:
            compile_source(src, "p.bpfd")
        (d,) = ei.value.diagnostics
        assert d.code == "helper-not-modelled" and "changes the packet" in d.message
        assert any(form in hint for hint in d.hints), (h.name, d.hints)
