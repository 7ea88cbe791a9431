"""The checker's control-flow pass (bpfdsl/checker/cfg.py build_cfg): the kernel's
structural rejections at the kernel's instruction (check_cfg "unreachable insn N", in slot
numbers, the first one in program order; with and without a back-edge, behind an
ld_imm64), and the static register liveness (kernel compute_live_registers) equal to the
least fixpoint of its data-flow equations solved naively from ``uses_defs``, for random
programs (with BPF-to-BPF calls, loops) and every progs/ object.
"""

from __future__ import annotations

import importlib.util
import random
import re
import sys

import pytest
from support.complexity import acl_ladder, packet_loops
from support.paths import ROOT

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ADD, BPF_JEQ, BPF_JLT
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.checker.cfg import CfgError, build_cfg, uses_defs
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.maps import MapSpec

XDP = (ProgramType.XDP, AttachType.XDP)

# (name, program, slot the kernel names in "unreachable insn N")
DEAD_CODE = [
    (
        # a forward jump over code nothing else reaches
        "skipped_by_ja",
        [I.mov64_imm(0, 2), I.ja(1), I.mov64_imm(0, 1), I.exit_()],
        2,
    ),
    (
        # a loop before the dead code: reachability cannot be decided in one forward pass
        "after_a_loop",
        [
            I.mov64_imm(0, 0),
            I.alu64_imm(BPF_ADD, 0, 1),
            I.jmp_imm(BPF_JLT, 0, 3, -2),
            I.exit_(),
            I.mov64_imm(0, 1),
            I.exit_(),
        ],
        4,
    ),
    (
        # a loop that is itself dead: only its own back-edge reaches its head
        "dead_loop",
        [
            I.mov64_imm(0, 2),
            I.exit_(),
            I.alu64_imm(BPF_ADD, 0, 1),
            I.jmp_imm(BPF_JLT, 0, 3, -2),
            I.exit_(),
        ],
        2,
    ),
    (
        # behind an ld_imm64 (two slots): the slot number, not the list index
        "behind_ld_imm64",
        [I.ld_imm64(1, 7), I.mov64_imm(0, 2), I.exit_(), I.mov64_imm(0, 1), I.exit_()],
        4,
    ),
    (
        # two dead regions: the first in program order
        "two_regions",
        [
            I.mov64_imm(0, 2),
            I.ja(1),
            I.mov64_imm(0, 1),
            I.ja(1),
            I.mov64_imm(0, 3),
            I.exit_(),
        ],
        2,
    ),
]


@pytest.mark.parametrize(
    "prog,slot", [(p, s) for _, p, s in DEAD_CODE], ids=[n for n, _, _ in DEAD_CODE]
)
def test_unreachable_insn_named_by_slot(prog, slot):
    res = check_insns(prog, *XDP)
    assert [(e.code, e.message, e.slot) for e in res.errors] == [
        ("cfg", f"unreachable insn {slot}", slot)
    ]
    assert I.slot_offsets(prog)[res.errors[0].idx] == slot


@pytest.mark.kernel
@pytest.mark.parametrize(
    "prog,slot", [(p, s) for _, p, s in DEAD_CODE], ids=[n for n, _, _ in DEAD_CODE]
)
def test_unreachable_insn_is_the_kernels(prog, slot):
    from bpfdsl.kernel import syscall as S

    with pytest.raises(S.BpfError) as e:
        fd, _ = S.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1)
        fd.close()
    assert re.findall(r"unreachable insn (\d+)", e.value.log) == [str(slot)]


def test_reachable_loop_and_forward_jumps_are_not_dead_code():
    prog = [
        I.mov64_imm(0, 0),
        I.jmp_imm(BPF_JEQ, 1, 0, 2),  # forward over the loop's body
        I.alu64_imm(BPF_ADD, 0, 1),
        I.jmp_imm(BPF_JLT, 0, 3, -2),
        I.mov64_imm(0, 2),
        I.exit_(),
    ]
    cfg = build_cfg(prog)
    assert cfg.heads == {2}
    assert cfg.succ == [[1], [2, 4], [3], [4, 2], [5], []]
    assert check_insns(prog, *XDP).ok


def test_code_reached_only_by_a_backward_jump_is_not_dead():
    prog = [
        I.mov64_imm(0, 0),
        I.ja(2),  # to insn 4
        I.alu64_imm(BPF_ADD, 0, 1),  # reached only from insn 4
        I.exit_(),
        I.jmp_imm(BPF_JLT, 0, 3, -3),  # back to insn 2
        I.exit_(),
    ]
    assert build_cfg(prog).heads == {2}
    res = check_insns(prog, *XDP)
    assert res.ok, [e.message for e in res.errors]


# ---- liveness ----


def _naive_liveness(insns, succ) -> list[int]:
    """live_in by round-robin iteration to the fixpoint, straight from uses_defs."""
    n = len(insns)
    ud = [uses_defs(x) for x in insns]
    live = [0] * n
    changed = True
    while changed:
        changed = False
        for i in range(n - 1, -1, -1):
            out = 0
            for t in succ[i]:
                out |= live[t]
            uses, defs = ud[i]
            for d in defs:
                out &= ~(1 << d)
            for r in uses:
                out |= 1 << r
            out &= ~(1 << 10)
            if out != live[i]:
                live[i], changed = out, True
    return live


def _corpus_module():
    spec = importlib.util.spec_from_file_location(
        "difftest_checker", ROOT / "scripts" / "difftest_checker.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


MAPS = {
    "h": MapSpec("h", MapType.HASH, 4, 8, 16),
    "a": MapSpec("a", MapType.ARRAY, 4, 16, 4),
    "pa": MapSpec("pa", MapType.PERCPU_ARRAY, 4, 8, 1),
}


def _programs() -> list[list]:
    dt = _corpus_module()
    rng = random.Random(7)
    out = [dt.random_prog(rng, k, MAPS).insns for k in range(80)]
    out += [dt.idiom_prog(rng, k, MAPS).insns for k in range(40)]
    out += [dt.calls_prog(rng, k, MAPS).insns for k in range(40)]
    texts = [p.read_text() for p in sorted((ROOT / "progs").glob("*.bpfd"))]
    texts += [acl_ladder(6), packet_loops(1)]
    for text in texts:
        spec = read_object(compile_source(text, "p.bpfd", check=False).obj)
        out += [p.insns for p in spec.programs.values()]
    return out


def test_liveness_is_the_dataflow_fixpoint():
    progs = _programs()
    checked = loops = 0
    for insns in progs:
        try:
            cfg = build_cfg(insns)
        except CfgError:
            continue
        assert cfg.live_in == _naive_liveness(insns, cfg.succ)
        checked += 1
        loops += bool(cfg.heads)
    assert checked > 150 and loops >= 2  # both the one-pass and the worklist case


def test_liveness_of_calls_and_exits():
    # r1 = 1; r2 = 2; r3 = 3; call bpf_map_lookup_elem (2 args); exit
    prog = [
        I.mov64_imm(1, 1),
        I.mov64_imm(2, 2),
        I.mov64_imm(3, 3),
        I.call(HELPERS["map_lookup_elem"].id),
        I.exit_(),
    ]
    live = build_cfg(prog).live_in
    assert live[4] == 1 << 0  # exit reads r0
    assert live[3] == (1 << 1) | (1 << 2)  # the helper reads r1, r2; writes r0-r5
    assert live[2] == (1 << 1) | (1 << 2)  # r3 is dead: the call clobbers it
    assert live[0] == 0
