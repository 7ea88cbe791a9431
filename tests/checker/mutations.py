"""Differential-test corpus: the program record and instruction-level mutations.

Used by scripts/difftest_checker.py: ``mutate(base, rng, per_kind)`` turns a program the
kernel accepts into variants with one fault each (bounds check removed / off by one, NULL
check removed, bad return value, uninitialized stack read, write to read-only ctx, out of
range or misaligned stack access, unbounded loop, wrong helper argument).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS_BY_ID
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU64,
    BPF_JEQ,
    BPF_JLT,
    BPF_JMP,
    BPF_JNE,
    BPF_K,
    BPF_ST,
    BPF_STX,
    BPF_X,
)
from bpfdsl.abi.prog_types import PROGRAM_KINDS, AttachType, ProgramType

PT, AT = ProgramType, AttachType


@dataclass
class Item:
    """One corpus program.  ``refs``: insn index -> MapRef; ``line``: for mutants, the
    source line of the mutated instruction in the base program (None when unknown);
    ``*_processed`` / ``*_seconds``: instructions walked and time taken by the checker and
    the kernel verifier ("processed N insns", "verification time N usec")."""

    category: str
    name: str
    insns: list
    prog_type: PT
    attach_type: AT | None
    prog_flags: int = 0
    refs: dict = field(default_factory=dict)
    line_at: object = None
    mut_idx: int | None = None
    ours: str = ""
    kernel: str = ""
    our_msg: str = ""
    kernel_msg: str = ""
    our_err_idx: int | None = None
    our_processed: int = 0
    kernel_processed: int | None = None
    our_seconds: float = 0.0
    kernel_seconds: float | None = None


# ---- mutations (instruction level) ----

NOP = I.ja(0)


def _mut(base: Item, kind: str, insns, idx: int, refs=None, tag: str = "") -> Item:
    return dataclasses.replace(
        base,
        category=f"mutant:{kind}",
        name=f"{base.name}#{kind}@{idx}{tag}",
        insns=insns,
        refs=dict(base.refs if refs is None else refs),
        mut_idx=idx,
    )


def _prepend(base: Item, kind: str, pre: list, tag: str) -> Item:
    refs = {k + len(pre): v for k, v in base.refs.items()}
    it = _mut(base, kind, pre + list(base.insns), 0, refs, tag)
    it.line_at = None
    return it


def _is_reg_jump(x) -> bool:
    return x.is_cond_jump and x.source == BPF_X and x.cls == BPF_JMP


def mutate(base: Item, rng: random.Random, per_kind: int) -> list[Item]:
    out: list[Item] = []
    ins = base.insns
    n = len(ins)

    def pick(idxs):
        idxs = list(idxs)
        rng.shuffle(idxs)
        return idxs[:per_kind]

    # bounds check removed: a pointer comparison becomes "never" or "always" taken
    for i in pick(i for i, x in enumerate(ins) if _is_reg_jump(x)):
        for variant, new in (("nop", NOP), ("always", I.ja(ins[i].off))):
            m = list(ins)
            m[i] = new
            out.append(_mut(base, "bounds_removed", m, i, tag=variant))
    # off by one: the constant added before a bounds check, or an access offset
    for i in pick(
        i
        for i, x in enumerate(ins)
        if x.cls == BPF_ALU64 and x.op == BPF_ADD and x.source == BPF_K and 0 < x.imm < 256
    ):
        m = list(ins)
        m[i] = dataclasses.replace(ins[i], imm=ins[i].imm - 1)
        out.append(_mut(base, "off_by_one", m, i, tag="add"))
    for i in pick(i for i, x in enumerate(ins) if x.is_load and x.src != 10):
        m = list(ins)
        m[i] = dataclasses.replace(ins[i], off=ins[i].off + 1)
        out.append(_mut(base, "off_by_one", m, i, tag="ldx"))
    # NULL check removed
    for i in pick(
        i
        for i, x in enumerate(ins)
        if x.is_cond_jump and x.source == BPF_K and x.imm == 0 and x.op in (BPF_JEQ, BPF_JNE)
    ):
        for variant, new in (("nop", NOP), ("always", I.ja(ins[i].off))):
            m = list(ins)
            m[i] = new
            out.append(_mut(base, "null_check_removed", m, i, tag=variant))
    # bad return value
    for i in pick(
        i
        for i, x in enumerate(ins)
        if i + 1 < n and ins[i + 1].is_exit and x.opcode == 0xB7 and x.dst == 0
    ):
        for v in (7, -1):
            m = list(ins)
            m[i] = I.mov64_imm(0, v)
            out.append(_mut(base, "bad_return", m, i, tag=str(v)))
    # uninitialized stack read: drop a stack store
    for i in pick(i for i, x in enumerate(ins) if x.cls in (BPF_ST, BPF_STX) and x.dst == 10):
        m = list(ins)
        m[i] = NOP
        out.append(_mut(base, "uninit_stack", m, i))
    # out-of-range / misaligned stack access
    for i in pick(
        i for i, x in enumerate(ins) if (x.is_store or x.is_load) and (x.dst == 10 or x.src == 10)
    ):
        for delta, tag in ((-512, "below"), (512, "above"), (1, "misaligned")):
            m = list(ins)
            m[i] = dataclasses.replace(ins[i], off=ins[i].off + delta)
            out.append(_mut(base, "stack_oob", m, i, tag=tag))
    # write to a read-only ctx field (prepended store through the ctx pointer r1)
    ctx_offs = {
        "xdp_md": range(0, 24, 4),
        "sk_msg_md": range(0, 72, 4),
        "bpf_sock_ops": range(0, 224, 4),
    }
    kind = next((k for k in PROGRAM_KINDS if k.program_type == base.prog_type), None)
    if kind is not None and kind.ctx in ctx_offs:
        for off in pick(ctx_offs[kind.ctx]):
            out.append(_prepend(base, "ctx_write", [I.st_mem(4, 1, off, 0)], f"st{off}"))
            out.append(
                _prepend(
                    base, "ctx_write", [I.mov64_imm(0, 1), I.stx_mem(4, 1, 0, off)], f"stx{off}"
                )
            )
    # unbounded loops: a backward jump made unconditional / never-ending prologue loops
    for i in pick(i for i, x in enumerate(ins) if x.is_cond_jump and x.off < 0):
        m = list(ins)
        m[i] = I.ja(ins[i].off)
        out.append(_mut(base, "unbounded_loop", m, i, tag="back"))
    if rng.random() < 0.5:
        out.append(_prepend(base, "unbounded_loop", [I.ja(-1)], "self"))
        out.append(
            _prepend(
                base,
                "unbounded_loop",
                [I.mov64_imm(0, 0), I.jmp_imm(BPF_JEQ, 0, 0, -2)],
                "reset",
            )
        )
        out.append(
            _prepend(
                base,
                "unbounded_loop",
                [I.mov64_imm(6, 0), I.alu64_imm(BPF_ADD, 6, 1), I.jmp_imm(BPF_JLT, 6, 16, -2)],
                "bounded16",
            )
        )
    # wrong helper argument: the register set up for an argument becomes a scalar, or the
    # helper id changes to another of the table
    for i in pick(i for i, x in enumerate(ins) if x.is_helper_call):
        h = HELPERS_BY_ID.get(ins[i].imm)
        if h is None:
            continue
        for a in range(1, len(h.args) + 1):
            for j in range(i - 1, max(-1, i - 8), -1):
                x = ins[j]
                if x.dst == a and (x.is_alu or x.is_ld_imm64 or x.is_load):
                    m = list(ins)
                    m[j] = I.mov64_imm(a, 0) if not x.is_ld_imm64 else I.ld_imm64(a, 0)
                    refs = {k: v for k, v in base.refs.items() if k != j}
                    out.append(_mut(base, "helper_arg", m, j, refs, tag=f"r{a}"))
                    break
        other = rng.choice(sorted(HELPERS_BY_ID))
        m = list(ins)
        m[i] = I.call(other)
        out.append(_mut(base, "helper_arg", m, i, tag=f"id{other}"))
    return out
