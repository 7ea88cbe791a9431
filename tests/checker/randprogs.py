"""Differential-test corpus: random programs (mostly well-formed XDP, context accesses per
program kind, BPF-to-BPF calls).  Used by scripts/difftest_checker.py."""

from __future__ import annotations

import dataclasses
import random

from mutations import NOP, Item

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_AND,
    BPF_ARSH,
    BPF_DIV,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSLT,
    BPF_LSH,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_XOR,
)
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker.env import MapRef

PT, AT = ProgramType, AttachType


# ---- random programs ----


def random_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """A random, mostly well-formed XDP program: scalar ALU on r0/r7-r9, ctx loads through
    r6 (= r1), aligned stack traffic, packet reads behind a (sometimes wrong) bounds
    check, map lookups (sometimes without NULL check), forward branches, helper calls.
    Each rule is broken now and then, so both verdicts occur."""
    code: list = [I.mov64_reg(6, 1), I.mov64_imm(0, 2), I.mov64_imm(7, 0)]
    refs: dict = {}
    scal = {0, 7}
    n = rng.randint(3, 25)
    err = rng.choice([0.0, 0.02, 0.05, 0.1])  # how often a rule is broken

    def bad() -> bool:
        return rng.random() < err

    def sreg() -> int:
        if bad() or not scal:
            return rng.choice(range(10))
        return rng.choice(sorted(scal))

    def dreg() -> int:
        return rng.choice(range(10)) if bad() else rng.choice([0, 7, 8, 9])

    for _ in range(n):
        c = rng.random()
        if c < 0.30:
            op = rng.choice(
                [
                    BPF_ADD,
                    BPF_SUB,
                    BPF_MUL,
                    BPF_DIV,
                    BPF_OR,
                    BPF_AND,
                    BPF_LSH,
                    BPF_RSH,
                    BPF_MOD,
                    BPF_XOR,
                    BPF_MOV,
                    BPF_ARSH,
                ]
            )
            d = dreg() if op == BPF_MOV else (sreg() if scal else dreg())
            wide = rng.random() < 0.7
            if rng.random() < 0.4:
                f = I.alu64_reg if wide else I.alu32_reg
                code.append(f(op, d, sreg()))
            else:
                imm = rng.choice([0, 1, 2, 4, 7, 8, 14, 31, 63, 255, -1, rng.randint(-1000, 1000)])
                if op in (BPF_LSH, BPF_RSH, BPF_ARSH) and not bad():
                    imm = rng.randint(0, 31)
                if op in (BPF_DIV, BPF_MOD) and imm == 0 and not bad():
                    imm = 3
                f = I.alu64_imm if wide else I.alu32_imm
                code.append(f(op, d, imm))
            if d != 6:
                scal.add(d)
        elif c < 0.42:
            d = dreg()
            off = rng.choice([0, 4, 8, 12, 16]) if not bad() else rng.choice([2, 20, 24, 13])
            code.append(I.ldx_mem(8 if bad() else 4, d, 6, off))
            if off in (0, 4, 8):
                scal.discard(d)
            else:
                scal.add(d)
        elif c < 0.52:
            off = -8 * rng.randint(1, 8) + (rng.choice([4, 2, -512, 1]) if bad() else 0)
            if rng.random() < 0.5 and scal:
                code.append(I.stx_mem(rng.choice([8, 4]), 10, sreg(), off))
            else:
                code.append(I.st_mem(rng.choice([8, 4, 2, 1]), 10, off, rng.randint(-5, 5)))
        elif c < 0.60:
            d = dreg()
            code.append(I.ldx_mem(rng.choice([8, 4, 8]), d, 10, -8 * rng.randint(1, 8)))
            scal.add(d)
        elif c < 0.72:
            n_chk = rng.choice([1, 2, 4, 8, 14, 20])
            n_acc = n_chk + (rng.choice([-1, 1]) if bad() else 0)
            sz = rng.choice([s for s in (1, 2, 4) if s <= n_chk])
            n_acc = max(n_acc, sz)
            code += [
                I.ldx_mem(4, 2, 6, 0),
                I.ldx_mem(4, 3, 6, 4),
                I.mov64_reg(4, 2),
                I.alu64_imm(BPF_ADD, 4, n_chk),
                I.jmp_reg(rng.choice([BPF_JGT, BPF_JGE]), 4, 3, 2),
                I.ldx_mem(sz, 5, 2, n_acc - sz),
                I.mov64_reg(7, 5) if rng.random() < 0.5 else I.mov64_imm(7, 1),
                I.mov64_imm(0, 1),
            ]
            scal |= {0, 7}
            scal -= {2, 3, 4, 5}
        elif c < 0.80 and maps:
            name = rng.choice(sorted(maps))
            m = maps[name]
            code.append(I.st_mem(4, 10, -4, rng.randint(0, 5)) if not bad() else NOP)
            refs[len(code)] = MapRef(m)
            code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(BPF_ADD, 2, -4), I.call(1)]
            if not bad():
                code.append(I.jmp_imm(BPF_JEQ, 0, 0, 2))
            sz = rng.choice([8, 4])
            off = rng.randrange(0, m.value_size - sz + 1, sz) if not bad() else m.value_size - 2
            code.append(I.ldx_mem(sz, 7, 0, off))
            code.append(I.alu64_imm(BPF_ADD, 7, 1))
            scal -= {1, 2, 3, 4, 5, 0}
            scal.add(7)
        elif c < 0.92:
            skip = rng.randint(1, 3)
            if scal:
                if rng.random() < 0.6:
                    code.append(
                        I.jmp_imm(
                            rng.choice([BPF_JEQ, BPF_JNE, BPF_JGT, BPF_JSLT, BPF_JSET]),
                            sreg(),
                            rng.randint(-3, 20),
                            skip,
                        )
                    )
                else:
                    code.append(
                        I.jmp_reg(rng.choice([BPF_JEQ, BPF_JGT, BPF_JSGE]), sreg(), sreg(), skip)
                    )
                for _ in range(skip):
                    d = dreg()
                    code.append(I.mov64_imm(d, rng.randint(0, 9)))
        else:
            code.append(I.call(rng.choice([5, 7, 8])))
            scal -= {1, 2, 3, 4, 5}
            scal.add(0)
    if 0 not in scal or rng.random() < 0.5:
        code.append(I.mov64_imm(0, rng.choice([0, 1, 2, 3, 4])))
    code.append(I.exit_())
    return Item("random", f"random#{k}", code, PT.XDP, AT.XDP, 0, refs)


CTX_KINDS = [
    (PT.XDP, AT.XDP, 24, "xdp"),
    (PT.XDP, AT.XDP_DEVMAP, 24, "xdp_devmap"),
    (PT.SK_MSG, AT.SK_MSG_VERDICT, 80, "sk_msg"),
    (PT.SOCK_OPS, AT.CGROUP_SOCK_OPS, 224, "sock_ops"),
]


def ctx_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """Random context accesses (offset, width, load/store/atomic) for each program kind,
    then a helper call with packet/stack/map memory arguments of random sizes."""
    pt, at, size, name = rng.choice(CTX_KINDS)
    code: list = [I.mov64_reg(6, 1)]
    refs: dict = {}
    from bpfdsl.checker.ctx import CTX_TABLES

    table = CTX_TABLES[{"sk_msg": "sk_msg_md", "sock_ops": "bpf_sock_ops"}.get(name, "xdp_md")]
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.7:  # a real field, with its width or a narrower one
            f = rng.choice(list(table.values()))
            off, sz = f.off, rng.choice([f.size, f.size, 1, 2, 4])
        else:
            off = rng.randrange(0, size + 8) & (~3 if rng.random() < 0.7 else ~0)
            sz = rng.choice([1, 2, 4, 4, 8])
        how = rng.random()
        if how < 0.7:
            code.append(I.ldx_mem(sz, 7, 6, off))
        elif how < 0.85:
            code.append(I.st_mem(sz, 6, off, 1))
        else:
            code += [I.mov64_imm(7, 1), I.stx_mem(sz, 6, 7, off)]
    ret = {"sock_ops": 1, "sk_msg": 1}.get(name, 2)
    if pt == PT.XDP and rng.random() < 0.6:
        # csum_diff / xdp_load_bytes with memory of random size
        n = rng.choice([4, 8, 16])
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_reg(4, 2),
            I.alu64_imm(BPF_ADD, 4, n),
        ]
        code.append(("J", I.jmp_reg(BPF_JGT, 4, 3, 0)))
        for off in range(-32, 0, 8):
            if rng.random() < 0.9:
                code.append(I.st_mem(8, 10, off, 0))
        sz = rng.choice([0, 4, 8, 12, 16, 20, 33])
        if rng.random() < 0.5:
            src = rng.choice(["pkt", "stack"])
            code.append(I.mov64_reg(1, 2) if src == "pkt" else I.mov64_reg(1, 10))
            if src == "stack":
                code.append(I.alu64_imm(BPF_ADD, 1, -32))
            code += [
                I.mov64_imm(2, sz),
                I.mov64_imm(3, 0),
                I.mov64_imm(4, 0),
                I.mov64_imm(5, 0),
                I.call(28),
            ]
        else:
            code += [
                I.mov64_reg(1, 6),
                I.mov64_imm(2, 0),
                I.mov64_reg(3, 10),
                I.alu64_imm(BPF_ADD, 3, rng.choice([-32, -8, -16])),
                I.mov64_imm(4, sz),
                I.call(189),
            ]
    code.append(I.mov64_imm(0, ret))
    slots, pos = 0, []
    for x in code:
        pos.append(slots)
        slots += 2 if (not isinstance(x, tuple) and x.is_ld_imm64) else 1
    final = [
        dataclasses.replace(x[1], off=slots - pos[n] - 1) if isinstance(x, tuple) else x
        for n, x in enumerate(code)
    ]
    final.append(I.exit_())
    return Item("random_ctx", f"ctx#{k}:{name}", final, pt, at, 0, refs)


def calls_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """BPF-to-BPF calls passing stack pointers, scalars and returning values that are used
    as offsets by the caller."""
    body_callee = []
    a_off = rng.choice([0, -8, 8, 4])
    if rng.random() < 0.5:
        body_callee += [I.ldx_mem(8, 0, 1, a_off)]
    else:
        body_callee += [I.st_mem(8, 1, a_off, 3), I.mov64_reg(0, 2)]
    if rng.random() < 0.3:
        body_callee.append(I.alu64_imm(BPF_AND, 0, 7))
    body_callee.append(I.exit_())
    caller = [I.mov64_reg(6, 1)]
    if rng.random() < 0.8:
        caller.append(I.st_mem(8, 10, -16, 5))
    caller += [
        I.mov64_reg(1, 10),
        I.alu64_imm(BPF_ADD, 1, -16),
        I.mov64_imm(2, rng.choice([1, 5, 100])),
    ]
    use = rng.random() < 0.5
    after = []
    if use:
        for off in range(-64, -16, 8):
            after.append(I.st_mem(8, 10, off, 0))
        after += [
            I.alu64_imm(BPF_AND, 0, rng.choice([7, 15, 63])),
            I.mov64_reg(7, 10),
            I.alu64_imm(BPF_ADD, 7, -64),
            I.alu64_reg(BPF_ADD, 7, 0),
            I.ldx_mem(1, 0, 7, 0),
        ]
    after += [I.mov64_imm(0, 2), I.exit_()]
    call = I.call_pc(len(after))
    code = caller + [call] + after + body_callee
    if rng.random() < 0.2:  # r6..r9 are not passed to the callee
        code[-2 - (len(body_callee) - 2)] = I.mov64_reg(0, 6)
    return Item("random_calls", f"calls#{k}", code, PT.XDP, AT.XDP, 0, {})
