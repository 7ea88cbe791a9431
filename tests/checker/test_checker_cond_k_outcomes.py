"""A conditional jump on an immediate (bpfdsl/checker/handlers.py _cond_k) remembers, per
instruction, what it decided for each tnum and bounds of its scalar; a decision taken
from that memory is branch.scalar_jump's for the register at hand: the same successors,
the same refined registers (the operand's note kept), the same precision request and
the same count of branches no value can take -- for every comparison, both widths, and
scalars that are constants, ranges, unknown or carry a note.
"""

from __future__ import annotations

import itertools

import pytest

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.opcodes import (
    BPF_ALU64,
    BPF_EXIT,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JMP,
    BPF_JMP32,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_K,
    BPF_MOV,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import domain as D
from bpfdsl.checker import handlers
from bpfdsl.checker.branch import scalar_jump
from bpfdsl.checker.cfg import Cfg, build_cfg
from bpfdsl.checker.env import Env
from bpfdsl.checker.state import Frame, State

OPS = (BPF_JEQ, BPF_JNE, BPF_JSET, BPF_JGT, BPF_JGE, BPF_JLT, BPF_JLE)
OPS += (BPF_JSGT, BPF_JSGE, BPF_JSLT, BPF_JSLE)
TARGET = 7


def _scalars() -> list[D.Reg]:
    return [
        D.known(5),
        D.known(0),
        D.known(-1),
        D.urange(0, 9),
        D.urange(0, 12),  # the same tnum as 0..9, other bounds
        D.urange(8, 15),  # the same tnum again
        D.urange(5, 5000),
        D.urange(1 << 31, (1 << 33) + 3),
        D.unknown(),
        D.urange(3, 40),  # the same tnum and bounds as the next, which has a note
        D.urange(3, 40).replace(note="read from the packet at insn 2"),
    ]


def _cfg(x: Insn) -> Cfg:
    """The jump at insn 0, its target TARGET, every path ending in an exit (the compiled
    checker's handlers take a real Cfg)."""
    mov = Insn(BPF_ALU64 | BPF_MOV | BPF_K, dst=0, src=0, off=0, imm=0)
    return build_cfg([x] + [mov] * TARGET + [Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)])


def _env() -> Env:
    return Env(ProgramType.XDP, None, None, {}, {})


def _state(r: D.Reg) -> State:
    regs = [D.NOT_INIT_REG] * 11
    regs[3] = r
    regs[10] = D.ptr(D.STACK, map=0)
    return State([Frame(regs, {}, -1, 0, 0)])


def _outcome(env: Env, succ) -> tuple:
    """Successors as (index, r3 with every field, note included), plus what the insn
    asked of the walk."""
    out = None
    if succ is not None:
        out = [(k, tuple(getattr(s.regs[3], f) for f in D.REG_FIELDS)) for k, s in succ]
    return out, list(env.want_regs), env.inexact


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("cls", (BPF_JMP, BPF_JMP32))
def test_remembered_decision_is_scalar_jumps(op: int, cls: int) -> None:
    for imm in (0, 5, 9, 4096, -1, (1 << 31) - 1):
        x = Insn(cls | op | BPF_K, dst=3, src=0, off=TARGET - 1, imm=imm)
        handler = handlers.handler(x, [1, TARGET])
        cfg = _cfg(x)
        # the memoizing handler (a compiled closure has no __name__: its class is
        # named after the function, cond_k__cond_k_obj)
        name = getattr(handler, "__name__", "") or type(handler).__name__
        assert name.split("__")[0] == "cond_k", name
        imm_reg = D.known(imm if cls == BPF_JMP else imm & D.M32)
        # every scalar twice, in two orders: the second sight of a tnum and bounds is
        # answered from the insn's memory
        scalars = _scalars()
        for r in itertools.chain(scalars, reversed(scalars), scalars):
            env_made, env_ref = _env(), _env()
            got = _outcome(env_made, handler(env_made, cfg, _state(r), 0, x))
            want = _outcome(env_ref, scalar_jump(env_ref, _state(r), 0, x, TARGET, r, imm_reg))
            assert got == want, (D.fmt_reg(r), imm)
