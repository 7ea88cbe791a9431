"""Random XDP instruction programs around linked scalars (shared ids, BPF_ADD_CONST64/32
deltas): copies (64- and 32-bit, sign-extending), adds and subs of constants of both widths
(negative ones, S32_MIN, ``rX += rX``, a second add), spills and fills, unlinking ALU
operations, forward conditional jumps of both widths on registers and constants, then
comparisons whose outcomes the links decide or not.  Loop-free, every register set before
the first jump, so the kernel accepts each; what differs is its walk: the processed count.
Deterministic for a seed (tests/checker/test_checker_linked_deltas.py).
"""

from __future__ import annotations

import random

from bpfdsl.abi import insn as I
from bpfdsl.abi import opcodes as A
from bpfdsl.abi.insn import Insn

PRANDOM = 7  # bpf_get_prandom_u32
# constants the adds, subs and comparisons draw from: small ones of both signs, the edges
# of the 32-bit ranges (S32_MIN cannot be negated: the kernel keeps no link for a sub of it)
DELTAS = [1, 2, 3, 5, 43, -1, -4, -43, 0x7FFFFFFF, -(1 << 31), 0x100, -0x100]
CMPS = [0, 1, 2, 4, 5, 8, 10, 43, 44, 45, 46, 0xFF, 0xFFFF, 0x7FFFFFFF, -1, -4, -43]
JOPS = [A.BPF_JEQ, A.BPF_JNE, A.BPF_JGT, A.BPF_JGE, A.BPF_JLT, A.BPF_JLE]
JOPS += [A.BPF_JSGT, A.BPF_JSGE, A.BPF_JSLT, A.BPF_JSLE]
REGS = [1, 2, 3, 4, 5, 6, 7, 8, 9]
SLOTS = [-8, -16, -24]


def _prologue(rng: random.Random) -> list[Insn]:
    """r6, r7: random u32s (r7 sometimes all 64 bits), r8, r9 and r1..r5 derived from them."""
    out = [I.call(PRANDOM), I.mov64_reg(6, 0), I.call(PRANDOM), I.mov64_reg(7, 0)]
    if rng.random() < 0.3:
        out += [I.alu64_imm(A.BPF_LSH, 7, 32), I.alu64_reg(A.BPF_OR, 7, 6)]
    if rng.random() < 0.5:
        out.append(I.alu64_imm(A.BPF_AND, 6, rng.choice([0xFF, 0xFFFF, 0x3F])))
    out += [I.mov64_reg(8, 6), I.mov64_reg(9, 7)]
    for r in (1, 2, 3, 4, 5):
        k = rng.random()
        if k < 0.5:
            out.append(I.mov64_reg(r, rng.choice([6, 7])))
        elif k < 0.7:
            out.append(I.mov32_reg(r, rng.choice([6, 7])))
        else:
            out.append(I.mov64_imm(r, rng.choice([0, 1, 100])))
    return out


def _op(rng: random.Random, spilled: list[int]) -> Insn | tuple[int, int, int, bool] | None:
    """One body instruction, or (jump op, register, constant, 32-bit) for a forward jump."""
    a, b = rng.choice(REGS), rng.choice(REGS)
    k = rng.random()
    if k < 0.14:
        return I.mov64_reg(a, b)
    if k < 0.2:
        return I.mov32_reg(a, b)
    if k < 0.23:
        return Insn(A.BPF_ALU64 | A.BPF_MOV | A.BPF_X, a, b, rng.choice([8, 16, 32]), 0)
    if k < 0.38:
        return I.alu64_imm(rng.choice([A.BPF_ADD, A.BPF_SUB]), a, rng.choice(DELTAS))
    if k < 0.48:
        return I.alu32_imm(rng.choice([A.BPF_ADD, A.BPF_SUB]), a, rng.choice(DELTAS))
    if k < 0.52:
        return I.alu64_reg(A.BPF_ADD, a, a if rng.random() < 0.5 else b)
    if k < 0.55:
        return I.alu64_imm(rng.choice([A.BPF_AND, A.BPF_RSH]), a, rng.choice([0xFF, 3]))
    if k < 0.62:
        slot = rng.choice(SLOTS)
        spilled.append(slot)
        return I.stx_mem(8, 10, a, slot)
    if k < 0.68:
        if not spilled:
            return None
        return I.ldx_mem(8, a, 10, rng.choice(spilled))
    return (rng.choice(JOPS), a, rng.choice(CMPS), rng.random() < 0.4)


def linked_prog(rng: random.Random, n_body: int = 14, n_tail: int = 10) -> list[Insn]:
    """One program: prologue, ``n_body`` instructions (forward jumps skip up to 4), a tail of
    ``n_tail`` comparisons each guarding a store to r0's copy, ``exit``."""
    out = _prologue(rng)
    body: list[Insn | tuple[int, int, int, bool]] = []
    spilled: list[int] = []
    while len(body) < n_body:
        x = _op(rng, spilled)
        if x is not None:
            body.append(x)
    tail: list[Insn] = []
    for _ in range(n_tail):
        r, op, c = rng.choice(REGS), rng.choice(JOPS), rng.choice(CMPS)
        j = I.jmp32_imm if rng.random() < 0.3 else I.jmp_imm
        tail += [j(op, r, c, 1), I.mov64_imm(0, rng.randrange(3))]
    for n, x in enumerate(body):
        if isinstance(x, tuple):
            op, r, c, is32 = x
            skip = rng.randint(1, 4)
            skip = min(skip, len(body) - n - 1 + 1)  # at most to the tail's start
            j = I.jmp32_imm if is32 else I.jmp_imm
            out.append(j(op, r, c, skip))
        else:
            out.append(x)
    return [*out, I.mov64_imm(0, 2), *tail, I.exit_()]
