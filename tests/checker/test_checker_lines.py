"""For each mutation kind of the differential test, the checker's message names the right
source line (from .BTF.ext line info) of tests/data/checker_c/lines.c, whose marked lines
("// L:<kind>") are where each fault must be reported."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest
from support.paths import DATA

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_K, BPF_STX, BPF_X
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import DEFAULT_OPTIONS, CheckOptions, check_insns, map_refs_for
from bpfdsl.obj.collection import read_object

SRC = DATA / "checker_c" / "lines.c"
pytestmark = pytest.mark.skipif(shutil.which("clang-19") is None, reason="needs clang-19")


def _markers() -> dict[str, int]:
    out = {}
    for n, line in enumerate(SRC.read_text().splitlines(), 1):
        if "// L:" in line:
            out[line.split("// L:")[1].strip()] = n
    return out


@pytest.fixture(scope="module")
def prog(tmp_path_factory):
    obj = tmp_path_factory.mktemp("lines") / "lines.o"
    subprocess.run(
        [
            "clang-19",
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            "-c",
            str(SRC),
            "-o",
            str(obj),
        ],
        check=True,
    )
    spec = read_object(obj)
    p = spec.programs["lines"]
    return p, map_refs_for(p, spec.maps, spec.data_sections)


def _find(insns, pred, last=False) -> int:
    hits = [i for i, x in enumerate(insns) if pred(x)]
    assert hits, "pattern not found in the compiled fixture"
    return hits[-1] if last else hits[0]


def _check(prog, insns, refs=None, options=DEFAULT_OPTIONS):
    p, r = prog
    return check_insns(
        insns,
        ProgramType.XDP,
        AttachType.XDP,
        map_refs=r if refs is None else refs,
        line_at=p.line_at,
        options=options,
    )


def _mutated(prog, pred, new, last=False):
    p, _ = prog
    ins = list(p.insns)
    i = _find(ins, pred, last)
    ins[i] = new(ins[i]) if callable(new) else new
    return ins, i


NOP = I.ja(0)


def test_check_fixture_accepted(prog):
    res = _check(prog, list(prog[0].insns))
    assert res.ok and not res.warnings


CASES = {
    # kind: (pattern, replacement, marker, expected code)
    "bounds_removed": (
        lambda x: x.is_cond_jump and x.source == BPF_X,
        NOP,
        "bounds",
        "pkt-bounds",
    ),
    "off_by_one": (
        lambda x: x.opcode == 0x07 and x.imm == 14,
        lambda x: dataclasses.replace(x, imm=13),
        "bounds",
        "pkt-bounds",
    ),
    "null_check_removed": (
        lambda x: x.is_cond_jump and x.source == BPF_K and x.imm == 0 and x.dst == 1,
        NOP,
        "null",
        "invalid-mem",
    ),
    "ctx_write": (
        lambda x: x.is_load and x.src == 1 and x.off == 0,
        I.stx_mem(4, 1, 2, 0),
        "ctx_write",
        "ctx-access",
    ),
    "stack_oob": (
        lambda x: x.cls == BPF_STX and x.dst == 10,
        lambda x: dataclasses.replace(x, off=x.off - 512),
        "stack",
        "stack-bounds",
    ),
    "stack_misaligned": (
        lambda x: x.cls == BPF_STX and x.dst == 10,
        lambda x: dataclasses.replace(x, off=x.off - 2),
        "stack",
        "misaligned-stack",
    ),
    "unbounded_loop": (
        lambda x: x.opcode == 0x07 and x.imm == 1,
        NOP,
        "loop",
        "infinite-loop",
    ),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_check_mutation_names_source_line(prog, kind):
    pred, new, marker, code = CASES[kind]
    ins, _ = _mutated(prog, pred, new)
    res = _check(prog, ins)
    assert not res.ok, f"{kind}: mutant accepted"
    e = res.errors[0]
    assert e.code == code, e.message
    assert e.source is not None and e.source.line == _markers()[marker], (e.source, e.message)
    assert e.source.file.endswith("lines.c") and e.source.text.strip()
    if kind == "null_check_removed":  # the path names the loop's exits, folded
        assert any("(x" in p and "h_dest" in p for p in e.path), e.path


def test_check_wrong_helper_argument_names_call_line(prog):
    p, refs = prog
    ins = list(p.insns)
    i = _find(ins, lambda x: x.is_ld_imm64)
    ins[i] = I.ld_imm64(1, 0)
    res = _check(prog, ins, refs={k: v for k, v in refs.items() if k != i})
    assert not res.ok and res.errors[0].code == "helper-arg"
    assert res.errors[0].source.line == _markers()["call"]
    assert "R1 type=scalar expected=map_ptr" in res.errors[0].message


def test_check_bad_return_is_warning_at_the_insn_that_set_r0(prog):
    # the warning names the insn that gave r0 its value on the path (not the exit at the
    # closing brace) and that insn's line info; clang attributes this `r0 = 1` to the
    # statement before the return (no line record of its own)
    ins, i = _mutated(
        prog, lambda x: x.opcode == 0xB7 and x.dst == 0 and x.imm == 1, I.mov64_imm(0, 7), last=True
    )
    res = _check(prog, ins)
    assert res.ok  # the kernel accepts any XDP return value
    assert [w.code for w in res.warnings] == ["ret-range"]
    w = res.warnings[0]
    assert w.idx == i and w.insn_text.endswith("r0 = 7")
    assert w.source.line == prog[0].line_at(w.slot).line
    assert w.source.line != _markers()["ret"]
    strict = _check(prog, ins, options=CheckOptions(strict=True))
    assert not strict.ok and strict.errors[0].code == "ret-range"


def test_check_uninit_stack_read_names_call_line(prog):
    ins, _ = _mutated(prog, lambda x: x.cls == BPF_STX and x.dst == 10, NOP)
    priv = _check(prog, ins)
    assert priv.ok and priv.warnings[0].code == "uninit-stack"  # root may read it
    assert priv.warnings[0].source.line == _markers()["call"]
    unpriv = _check(prog, ins, options=CheckOptions(privileged=False))
    assert not unpriv.ok and unpriv.errors[0].code == "uninit-stack"
    assert unpriv.errors[0].source.line == _markers()["call"]
