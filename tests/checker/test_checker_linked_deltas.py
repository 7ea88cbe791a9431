"""Linked scalars with a delta (Linux 6.18.44 with the 2026 stable backports: negative
deltas, BPF_SUB, alu32 links as BPF_ADD_CONST32, the zero-extension and mixed-width fixes
of sync_linked_regs, regsafe's base-id check): each program below the checker walks as
this machine's verifier does -- the same verdict and the same "processed N insns".  Then
random programs of copies, adds, subs, spills and jumps around linked registers
(tests/support/linkedprogs.py): the verdicts always agree and the counts nearly always (the rest are
walks the checker knowingly shortens: branches no value can take, Env.inexact).
"""

from __future__ import annotations

import random
import re

import pytest
from support.linkedprogs import linked_prog

from bpfdsl.abi import insn as I
from bpfdsl.abi import opcodes as A
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.kernel import syscall

PRANDOM = 7  # bpf_get_prandom_u32


def _both(prog: list[Insn]) -> tuple[tuple[bool, int], tuple[bool, int]]:
    """((accepted, processed insns) of this machine's verifier as root, the same of the
    checker), both of the encoded instructions (immediates as 32-bit fields)."""
    ours = check_insns(I.decode(I.encode(prog)), ProgramType.XDP)
    return _kernel(prog), (ours.ok, ours.insns_processed)


def _kernel(prog: list[Insn]) -> tuple[bool, int]:
    """(accepted, processed insns) of this machine's verifier, as root."""
    try:
        fd, log = syscall.prog_load(
            ProgramType.XDP, I.encode(prog), "GPL", log_level=1 | 4, log_size=1 << 22
        )
    except syscall.BpfError as e:
        log = e.log or ""
        m = re.search(r"processed (\d+) insns", log)
        return False, int(m.group(1)) if m else -1
    fd.close()
    m = re.search(r"processed (\d+) insns", log)
    assert m is not None, log[-500:]
    return True, int(m.group(1))


def _tail(regs: list[int], consts: list[int]) -> list[Insn]:
    """Comparisons of each register with each constant, each guarding a store to r0: the
    links decide some of them, and the count shows which."""
    out = []
    for r in regs:
        for c in consts:
            out += [I.jmp_imm(A.BPF_JEQ, r, c, 1), I.mov64_imm(0, 1)]
    return [*out, I.mov64_imm(0, 2), I.exit_()]


def _u32(dst: int) -> list[Insn]:
    return [I.call(PRANDOM), I.mov32_reg(dst, 0)]


ZERO_DIV = Insn(A.BPF_ALU64 | A.BPF_DIV | A.BPF_K, 0, 0, 0, 0)  # "div by zero" if walked

PROGRAMS = {
    # r1 = r6 - 4 (a negative 64-bit delta): r1 s>= 0 implies r6 >= 4; the division by
    # the constant zero is never walked (the kernel selftest of the backport)
    "neg64_decides": [
        *_u32(6),
        I.mov64_reg(1, 6),
        I.alu64_imm(A.BPF_ADD, 1, -4),
        I.jmp_imm(A.BPF_JSLT, 1, 0, 3),
        I.jmp_imm(A.BPF_JGE, 6, 4, 2),
        I.mov64_imm(0, 1),
        ZERO_DIV,
        I.mov64_imm(0, 0),
        I.exit_(),
    ],
    # the same through BPF_SUB
    "sub64_decides": [
        *_u32(6),
        I.mov64_reg(1, 6),
        I.alu64_imm(A.BPF_SUB, 1, 4),
        I.jmp_imm(A.BPF_JSLT, 1, 0, 3),
        I.jmp_imm(A.BPF_JGE, 6, 4, 2),
        I.mov64_imm(0, 1),
        ZERO_DIV,
        I.mov64_imm(0, 0),
        I.exit_(),
    ],
    # w3 = w6 - 43 (alu32): `w3 < 2` makes r6 43 or 44
    "alu32_range_check": [
        *_u32(6),
        I.mov32_reg(3, 6),
        I.alu32_imm(A.BPF_ADD, 3, -43),
        I.jmp32_imm(A.BPF_JGT, 3, 1, 8),
        *_tail([6], [42, 43, 44, 45]),
    ],
    # r7 = (u32)(r6 + 1) and r8 = r6 + 2 (mixed widths: not synced with each other);
    # r7 == 0xffffffff means r6 == 0xfffffffe (u32) whatever r8 is
    "mixed_widths": [
        *_u32(6),
        I.mov64_reg(7, 6),
        I.alu32_imm(A.BPF_ADD, 7, 1),
        I.mov64_reg(8, 6),
        I.alu64_imm(A.BPF_ADD, 8, 2),
        I.ld_imm64(9, 0xFFFFFFFF),
        I.jmp_reg(A.BPF_JLT, 7, 9, 12),
        *_tail([6, 8], [-2, 0, 1]),
    ],
    # the known register has no flag, the linked one is alu32: its 64-bit value is the
    # zero-extended sum (0 when r6 is 0xffffffff)
    "zext_of_linked": [
        *_u32(6),
        I.mov64_reg(7, 6),
        I.alu32_imm(A.BPF_ADD, 7, 1),
        I.ld_imm64(8, 0xFFFFFFFF),
        I.jmp_reg(A.BPF_JLT, 6, 8, 6),
        *_tail([7], [0, 1, 2]),
    ],
    # a copy of r1 = r6 + 5 breaks r1's link to r6 (one delta per register), links r2
    "copy_of_linked": [
        *_u32(6),
        I.mov64_reg(1, 6),
        I.alu64_imm(A.BPF_ADD, 1, 5),
        I.mov64_reg(2, 1),
        I.jmp_imm(A.BPF_JGT, 2, 9, 12),
        *_tail([1, 6], [0, 5, 9, 10]),
    ],
    # spilling r1 = r6 + 5 does the same; the fill is linked to the spill
    "spill_of_linked": [
        *_u32(6),
        I.mov64_reg(1, 6),
        I.alu64_imm(A.BPF_ADD, 1, 5),
        I.stx_mem(8, 10, 1, -8),
        I.jmp_imm(A.BPF_JGT, 6, 9, 13),
        I.ldx_mem(8, 2, 10, -8),
        *_tail([1, 2], [5, 14, 15]),
    ],
    # r1 += r1 and a second delta keep no link
    "no_link_cases": [
        *_u32(6),
        I.mov64_reg(1, 6),
        I.alu64_reg(A.BPF_ADD, 1, 1),
        I.mov64_reg(2, 6),
        I.alu64_imm(A.BPF_ADD, 2, 3),
        I.alu64_imm(A.BPF_ADD, 2, 3),
        I.jmp_imm(A.BPF_JGT, 6, 4, 12),
        *_tail([1, 2], [0, 6, 10]),
    ],
    # r4 = (u32)x + 1 is [1, 2**32]; its low half 43 leaves one value the range and the
    # known bits share, so r4 is the constant 43 (6.18 stable __update_reg64_bounds,
    # tnum_step): its comparisons are decided
    "tnum_single_value": [
        *_u32(4),
        I.alu64_imm(A.BPF_ADD, 4, 1),
        I.jmp32_imm(A.BPF_JNE, 4, 43, 6),
        *_tail([4], [43, 44, 0xFFFF]),
    ],
    # two paths meet with r1 = r6 + 4 and r1 = r6 + 5: not the same link, not pruned
    "join_other_delta": [
        *_u32(6),
        *_u32(7),
        I.mov64_reg(1, 6),
        I.jmp_imm(A.BPF_JGT, 7, 100, 2),
        I.alu64_imm(A.BPF_ADD, 1, 4),
        I.ja(1),
        I.alu64_imm(A.BPF_ADD, 1, 5),
        I.jmp_imm(A.BPF_JGT, 1, 10, 8),
        *_tail([6], [5, 6, 7, 10]),
    ],
}


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_linked_delta_program_walks_as_the_kernel(name: str) -> None:
    kernel, ours = _both(PROGRAMS[name])
    assert kernel[0], "each of these programs is one the kernel accepts"
    assert ours == kernel


@pytest.mark.kernel
def test_random_linked_programs_agree_with_the_kernel() -> None:
    """60 random programs (seed 4): every verdict the kernel's, 56 counts or more too
    (57 now; before the checker modelled the deltas, 24 of them differed; at seed 1,
    56 of 100 then, 6 now -- walks of branches no value takes, Env.inexact, and a few
    pruning differences not yet explained)."""
    rng = random.Random(4)
    same = 0
    for k in range(60):
        (ok, processed), (ours_ok, ours_processed) = _both(linked_prog(rng))
        assert ours_ok == ok, k
        same += ours_processed == processed
    print(f"linked programs: {same}/60 counts equal to the kernel's")
    assert same >= 56
