"""A program too long for BPF's 16-bit jump offsets (below --mcpu v4) is a located
``program-too-large`` error, not LLVM's "Branch target out of insn range" abort of the
whole process; at v4 LLVM's 32-bit ``gotol`` takes it and the kernel loads it."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bpfdsl.backend import jumps
from bpfdsl.compiler import compile_source

ROOT = Path(__file__).resolve().parents[2]


def rules(n: int) -> str:
    """A program of ``n`` map tests (8 BPF instructions each: 4,500 make 36,004)."""
    body = "".join(f"    if hs.contains({i}) {{ return XDP_DROP }}\n" for i in range(n))
    return ('license "GPL"\nmap hs: hash<u32, u64>(max_entries: 64)\n'
            f"xdp fn rules(ctx) {{\n{body}    return XDP_PASS\n}}\n")  # fmt: skip


def test_far_jump_is_a_located_error_not_an_abort(tmp_path: Path) -> None:
    """`bpfdsl compile` of 4,500 rules at the default --mcpu v3: exit status 1 with the
    error at the program's line, its size and the hint; LLVM never reaches its abort."""
    src = tmp_path / "rules.bpfd"
    src.write_text(rules(4500))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-m", "bpfdsl", "compile", "--no-check", str(src),
                        "-o", str(tmp_path / "rules.o")], capture_output=True, text=True,
                       env=env, timeout=300)  # fmt: skip
    assert p.returncode == 1, p.stderr[-2000:]
    assert "LLVM ERROR" not in p.stderr
    assert "error[program-too-large]: program 'rules' is 36,004 BPF instructions" in p.stderr
    assert f"--> {src}:3:1" in p.stderr
    assert "--mcpu v4" in p.stderr and "help:" in p.stderr
    assert not (tmp_path / "rules.o").exists()


@functools.cache
def rules_v4() -> bytes:
    return compile_source(rules(4500), "rules.bpfd", mcpu="v4").obj


def test_far_jump_at_v4_loads_and_runs(bpf_program) -> None:
    """The same program at --mcpu v4 (gotol): the engine accepts it (the kernel's verifier)
    and a packet passes all 4,500 empty-map tests, or is dropped once a key is set."""
    prog = bpf_program(rules_v4())
    frame = bytes(64)
    assert prog.run(frame).verdict == "XDP_PASS"
    prog.maps["hs"].set(4499, 1)  # the last rule: its branch is the farthest
    assert prog.run(frame).verdict == "XDP_DROP"


def test_long_program_within_the_jump_offsets_loads(bpf_program) -> None:
    """2,500 rules at v3 (20,004 instructions): long enough that the object is emitted in a
    child process guarding against LLVM's abort, short enough to compile; the object comes
    back whole -- the engine accepts it and the last rule drops."""
    src = rules(2500)
    assert jumps.may_exceed(compile_source(src, "r.bpfd", emit="llvm-ir", check=False).llvm_ir)
    prog = bpf_program(compile_source(src, "rules.bpfd").obj)
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    prog.maps["hs"].set(2499, 1)
    assert prog.run(bytes(64)).verdict == "XDP_DROP"


def _asm(body: list[str]) -> str:
    return "\n".join(["\t.text", "\t.type\tf,@function", "f:", *body, "\texit", ""])


@pytest.mark.parametrize("pad,ll,far", [(32767, 0, False), (32768, 0, True),
                                        (32767, 1, False), (32768, 1, True)])  # fmt: skip
def test_far_jumps_counts_instruction_slots(pad: int, ll: int, far: bool) -> None:
    """A forward jump over ``pad`` slots (a 64-bit immediate load takes two): reported
    exactly when the offset is past 32,767."""
    body = ["\tif r1 != 0 goto LBB0_2", "# comment", "\t.loc 0 1 1"]
    body += ["\tr2 = 0x100000000 ll"] * ll + ["\tr0 = 0"] * (pad - 2 * ll) + ["LBB0_2:"]
    got = jumps.far_jumps(_asm(body))
    assert bool(got) is far
    if far:
        assert got[0].func == "f" and got[0].distance == pad and got[0].insns == pad + 2


def test_backward_far_jump_reported() -> None:
    """A loop's backward branch over 32,769 slots (offset -32,769 < -32,768)."""
    body = ["LBB0_1:", *["\tr0 = 0"] * 32768, "\tgoto LBB0_1"]
    assert [j.distance for j in jumps.far_jumps(_asm(body))] == [-32769]


def test_ordinary_program_is_not_measured_twice() -> None:
    """Only a function that may reach 32,767 instructions gets the extra assembly pass:
    200 rules (1,604 instructions) do not."""
    res = compile_source(rules(200), "rules.bpfd", emit="llvm-ir", check=False)
    assert jumps.may_exceed(res.llvm_ir) == []
    assert jumps.may_exceed(res.llvm_ir, limit=1604) == ["rules"]  # the bound is an upper one


def test_far_jump_at_probe_is_a_located_error_not_an_abort() -> None:
    """-mcpu probe: LLVM 19's host probe finds v3 at most (no gotol), so a far branch there
    is the located error too, not LLVM's abort (which ended the process, in a library call
    as well: run in a child here so that a regression fails the test, not the run)."""
    code = (
        "import sys; sys.path.insert(0, 'tests/backend')\n"
        "from test_program_size import rules\n"
        "from bpfdsl.compiler import compile_source\n"
        "from bpfdsl.diagnostics import DiagnosticError\n"
        "try:\n"
        "    compile_source(rules(4500), 'rules.bpfd', mcpu='probe', check=False)\n"
        "except DiagnosticError as e:\n"
        "    print(e.diagnostics[0].code)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=300)  # fmt: skip
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip() == "program-too-large"
