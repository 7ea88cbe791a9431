"""Differential-test corpus: random programs built from idioms whose verdict hinges on exact
range reasoning (variable offsets behind masks, shifts, 32-bit/signed compares, atomics,
pointer compares, diamonds, loop accumulators, NULL-check forms)."""

from __future__ import annotations

import dataclasses
import random

from mutations import Item

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU64,
    BPF_AND,
    BPF_CMPXCHG,
    BPF_FETCH,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_LSH,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_X,
    BPF_XCHG,
)
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker.env import MapRef

PT, AT = ProgramType, AttachType


def _scalar_expr(rng: random.Random, d: int, code: list) -> None:
    """Put a bounded-or-not scalar in r``d`` (ctx field, packet-free) and shape it."""
    code.append(I.ldx_mem(4, d, 6, rng.choice([12, 16])))
    for _ in range(rng.randint(0, 3)):
        op = rng.choice(
            [
                "and",
                "and",
                "lsh",
                "rsh",
                "add",
                "sub",
                "neg",
                "mod",
                "alu32",
                "jmp",
                "jmp32",
                "sjmp",
                "movsx",
                "bswap",
                "or",
                "mul",
            ]
        )
        if op == "and":
            code.append(
                I.alu64_imm(BPF_AND, d, rng.choice([0xF, 0x1F, 0x3F, 0x7, 0xFF, -8, 0x7FFFFFFF]))
            )
        elif op == "or":
            code.append(I.alu64_imm(BPF_OR, d, rng.choice([1, 8, 0x100])))
        elif op == "mul":
            code.append(I.alu64_imm(BPF_MUL, d, rng.choice([2, 3, 8])))
        elif op == "lsh":
            code.append(I.alu64_imm(BPF_LSH, d, rng.choice([1, 2, 3, 32])))
        elif op == "rsh":
            code.append(I.alu64_imm(BPF_RSH, d, rng.choice([1, 4, 28, 32])))
        elif op == "add":
            code.append(I.alu64_imm(BPF_ADD, d, rng.choice([1, 4, -4, 100, -1])))
        elif op == "sub":
            code.append(I.alu64_imm(BPF_SUB, d, rng.choice([1, 8, -3])))
        elif op == "neg":
            code.append(I.alu64_imm(BPF_NEG, d, 0))
        elif op == "mod":
            code += [I.mov64_imm(9, rng.choice([0, 3, 16])), I.alu64_reg(BPF_MOD, d, 9)]
        elif op == "alu32":
            code.append(
                I.alu32_imm(
                    rng.choice([BPF_ADD, BPF_AND, BPF_SUB]), d, rng.choice([15, -1, 7, 0x10])
                )
            )
        elif op == "movsx":
            code.append(I.Insn(BPF_ALU64 | BPF_MOV | BPF_X, d, d, rng.choice([8, 16]), 0))
        elif op == "bswap":
            code.append(I.endian(d, rng.choice([16, 32]), True))
        else:
            jop = {
                "jmp": rng.choice([BPF_JGT, BPF_JGE, BPF_JLT, BPF_JLE, BPF_JNE, BPF_JEQ]),
                "jmp32": rng.choice([BPF_JGT, BPF_JLE, BPF_JSGT, BPF_JSLT]),
                "sjmp": rng.choice([BPF_JSGT, BPF_JSGE, BPF_JSLT, BPF_JSLE]),
            }[op]
            f = I.jmp32_imm if op == "jmp32" else I.jmp_imm
            # jump to the common "return" at the end: patched later (off placeholder)
            code.append(("J", f(jop, d, rng.choice([0, 7, 15, 16, 63, -1, 255]), 0)))


def idiom_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """Random programs built from idioms whose verdict hinges on exact range reasoning:
    variable map-value / stack / packet offsets behind masks, shifts and (32-bit, signed)
    compares, plus atomics, pointer compares and sign-extending moves."""
    code: list = [I.mov64_reg(6, 1)]
    refs: dict = {}
    kind = rng.choice(
        [
            "map",
            "stack",
            "pkt",
            "pkt2",
            "atomic",
            "ptrcmp",
            "diamond",
            "diamond",
            "loopacc",
            "ptrbranch",
            "ptrbranch",
        ]
    )
    if kind == "map":
        m = maps["a"]
        code += [I.st_mem(4, 10, -8, rng.choice([0, 1, 5]))]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(BPF_ADD, 2, -8), I.call(1)]
        if rng.random() < 0.7:
            code.append(("J", I.jmp_imm(BPF_JEQ, 0, 0, 0)))
        code.append(I.mov64_reg(8, 0))
        _scalar_expr(rng, 7, code)
        code += [
            I.alu64_reg(BPF_ADD, 8, 7),
            I.ldx_mem(rng.choice([1, 2, 4, 8]), 0, 8, rng.choice([0, 0, 1, 4, 8])),
        ]
    elif kind == "stack":
        for off in range(-64, 0, 8):
            if rng.random() < 0.9:
                code.append(I.st_mem(8, 10, off, off))
        _scalar_expr(rng, 7, code)
        code += [I.mov64_reg(8, 10), I.alu64_imm(BPF_ADD, 8, -64), I.alu64_reg(BPF_ADD, 8, 7)]
        sz = rng.choice([1, 4, 8])
        code.append(I.ldx_mem(sz, 0, 8, 0) if rng.random() < 0.7 else I.st_mem(sz, 8, 0, 1))
    elif kind in ("pkt", "pkt2"):
        n = rng.choice([14, 20, 34])
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_reg(4, 2),
            I.alu64_imm(BPF_ADD, 4, n),
        ]
        code.append(("J", I.jmp_reg(BPF_JGT, 4, 3, 0)))
        code.append(I.ldx_mem(1, 7, 2, rng.choice([0, 13, n - 1])))
        code.append(I.alu64_imm(BPF_AND, 7, rng.choice([0xF, 0x3F, 0xFF])))
        code.append(I.alu64_imm(BPF_LSH, 7, rng.choice([0, 2])))
        if kind == "pkt2":
            code.append(
                ("J", I.jmp_imm(rng.choice([BPF_JGT, BPF_JLT]), 7, rng.choice([20, 60]), 0))
            )
        code += [
            I.mov64_reg(5, 2),
            I.alu64_reg(BPF_ADD, 5, 7),
            I.mov64_reg(4, 5),
            I.alu64_imm(BPF_ADD, 4, rng.choice([1, 2, 4, 8])),
        ]
        code.append(("J", I.jmp_reg(rng.choice([BPF_JGT, BPF_JGE]), 4, 3, 0)))
        code.append(I.ldx_mem(rng.choice([1, 2, 4, 8]), 0, 5, rng.choice([0, 1, 3])))
    elif kind == "atomic":
        m = maps["h"]
        code += [I.st_mem(4, 10, -8, 1)]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(BPF_ADD, 2, -8), I.call(1)]
        code.append(("J", I.jmp_imm(BPF_JEQ, 0, 0, 0)))
        code.append(I.mov64_imm(1, 1))
        op = rng.choice(
            [
                BPF_ADD,
                BPF_ADD | BPF_FETCH,
                BPF_XCHG,
                BPF_CMPXCHG,
                BPF_OR,
                BPF_AND | BPF_FETCH,
            ]
        )
        tgt = rng.choice([0, 0, 10, 6])
        off = rng.choice([0, 0, 4, -8]) if tgt != 10 else -16
        if tgt == 10:
            code.append(I.st_mem(8, 10, -16, 0))
        code.append(I.atomic(rng.choice([8, 8, 4]), op, tgt, 1, off))
    elif kind == "diamond":
        # two paths meet; one may leave an unsafe offset in a register or a stack slot
        m = maps["a"]
        code += [I.st_mem(4, 10, -8, 0)]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(BPF_ADD, 2, -8), I.call(1)]
        code.append(("J", I.jmp_imm(BPF_JEQ, 0, 0, 0)))
        code.append(I.ldx_mem(4, 7, 6, rng.choice([12, 16])))
        via_stack = rng.random() < 0.5
        vals = [rng.choice([0, 4, 8, 12, 15, 16, 17, -1]) for _ in range(2)]
        store = rng.choice([8, 4])
        for n_d in range(rng.randint(1, 3)):
            thr = rng.choice([0, 1, 5, 100])
            a_val, b_val = vals if n_d == 0 else (rng.choice([0, 4, 8]), rng.choice([0, 4, 8, 16]))
            seg_a = [I.mov64_imm(8, a_val)]
            seg_b = (
                [I.alu64_imm(BPF_AND, 7, rng.choice([3, 7, 15, 31])), I.mov64_reg(8, 7)]
                if rng.random() < 0.4
                else [I.mov64_imm(8, b_val)]
            )
            if via_stack:
                seg_a.append(I.stx_mem(store, 10, 8, -16))
                seg_b.append(I.stx_mem(store, 10, 8, -16))
            code.append(I.jmp_imm(rng.choice([BPF_JGT, BPF_JEQ, BPF_JSLT]), 7, thr, len(seg_a) + 1))
            code += seg_a + [I.ja(len(seg_b))] + seg_b
        if via_stack:
            code.append(I.ldx_mem(rng.choice([store, 8, 4]), 8, 10, -16))
        code += [I.alu64_reg(BPF_ADD, 0, 8), I.ldx_mem(1, 0, 0, 0)]
    elif kind == "ptrbranch":
        # compare a pointer of some type with 0 / a register / another pointer, 32- or 64-bit,
        # then use an uninitialized register or dereference the pointer on one side only
        m = maps[rng.choice(["a", "h"])]
        code += [I.st_mem(4, 10, -8, rng.choice([0, 1, 9]))]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(BPF_ADD, 2, -8), I.call(1)]
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_imm(4, 0),
            I.mov64_reg(7, 10),
        ]
        a = rng.choice([0, 0, 2, 3, 6, 7, 4])
        op = rng.choice([BPF_JEQ, BPF_JNE, BPF_JEQ, BPF_JNE, BPF_JGT, BPF_JSET, BPF_JLE])
        form = rng.choice(["k0", "k0", "k1", "x0", "xrev", "xptr"])
        j32 = rng.random() < 0.2
        if form.startswith("k"):
            f = I.jmp32_imm if j32 else I.jmp_imm
            jmp = f(op, a, 0 if form == "k0" else 1, 0)
        else:
            f = I.jmp32_reg if j32 else I.jmp_reg
            b = 4 if form in ("x0", "xrev") else rng.choice([2, 7, 0])
            jmp = f(op, b, a, 0) if form == "xrev" else f(op, a, b, 0)
        body = [I.mov64_reg(0, 5)] if rng.random() < 0.5 else [I.ldx_mem(4, 8, a, 0)]
        if rng.random() < 0.5:  # the body on the taken side
            code.append(dataclasses.replace(jmp, off=1))
            code.append(("J", I.ja(0)))
        else:
            code.append(("J", jmp))
        code += body
    elif kind == "loopacc":
        # a bounded loop whose accumulator becomes an offset
        n = rng.choice([2, 4, 8, 20])
        step = rng.choice([1, 2, 4])
        code += [I.mov64_imm(7, 0), I.mov64_imm(8, 0)]
        code += [
            I.alu64_imm(BPF_ADD, 8, step),
            I.alu64_imm(BPF_ADD, 7, 1),
            I.jmp_imm(BPF_JLT, 7, n, -3),
        ]
        for off in range(-64, 0, 8):
            code.append(I.st_mem(8, 10, off, 0))
        code += [
            I.mov64_reg(9, 10),
            I.alu64_imm(BPF_ADD, 9, -64),
            I.alu64_reg(BPF_ADD, 9, 8),
            I.ldx_mem(1, 0, 9, 0),
        ]
    else:  # pointer comparisons
        code += [I.ldx_mem(4, 2, 6, 0), I.ldx_mem(4, 3, 6, 4), I.ldx_mem(4, 4, 6, 8)]
        a, b = rng.sample([2, 3, 4, 10, 6], 2)
        code.append(("J", I.jmp_reg(rng.choice([BPF_JGT, BPF_JLE, BPF_JEQ, BPF_JSGT]), a, b, 0)))
        code.append(I.ldx_mem(1, 0, rng.choice([2, 4]), 0))
    code.append(I.mov64_imm(0, 2))
    out = []
    for x in code:
        out.append(x)
    end = len(out)
    final = []
    slots = 0
    pos = []
    for x in out:
        pos.append(slots)
        slots += 2 if (not isinstance(x, tuple) and x.is_ld_imm64) else 1
    for n_i, x in enumerate(out):
        if isinstance(x, tuple):
            x = dataclasses.replace(x[1], off=slots - pos[n_i] - 1)
        final.append(x)
    del end
    final.append(I.exit_())
    return Item("random_idioms", f"idiom#{k}:{kind}", final, PT.XDP, AT.XDP, 0, refs)
