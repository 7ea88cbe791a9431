"""A ``dst += const`` / ``dst -= const`` of a scalar with an id (a copy of another
register): Linux 6.18 with the 2026 stable linked-register backports (this project's VM,
6.18.44) keeps dst linked to its copies with the delta -- BPF_ADD_CONST64 for a 64-bit
constant of S32_MIN..S32_MAX (so the ``r1 = r6; r1 += -lo; if r1 < n`` LLVM makes of every
range check), BPF_ADD_CONST32 for a 32-bit one of a value that fits in 32 bits -- for a
bpf_capable loader.  The checker records the same id and delta (transfer.link_delta), in
the made handler (handlers._fast_alu hands such an add to do_alu) and in do_alu, and
walks the link exactly (no Env.inexact, so the full budget).  (bpfdsl issue #23: a
2,367-rule ACL at v2 the kernel accepts at 652,733 processed insns.)
"""

from __future__ import annotations

import functools
import itertools
import re

import pytest

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_EXIT,
    BPF_JMP,
    BPF_K,
    BPF_SUB,
    BPF_X,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import INSN_LIMIT, check_object, handlers
from bpfdsl.checker import domain as D
from bpfdsl.checker.cfg import build_cfg
from bpfdsl.checker.env import Env
from bpfdsl.checker.state import Frame, State
from bpfdsl.checker.transfer import do_alu
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import load_collection

EXIT = Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)


def _state(linked: bool) -> State:
    regs = [D.NOT_INIT_REG] * 11
    r = D.urange(0, 65535)
    if linked:
        r = r.replace(id=7)
    regs[1] = regs[6] = r  # r1 = r6: copies sharing the id
    regs[2] = D.known(0)
    regs[10] = D.ptr(D.STACK, map=0)
    return State([Frame(regs, {}, -1, 0, 0)])


# (op, 64-bit, constant, the delta the kernel records or None: no link), Linux 6.18 with
# the 2026 stable backports (adjust_reg_min_max_vals): any s32 constant of a 64-bit add
# or sub, a 32-bit one of a value that fits in 32 bits; a sub of S32_MIN cannot be negated
CASES = [(BPF_ADD, True, v, v) for v in (-0x119, -1, -(1 << 31), 0, 8, (1 << 31) - 1)]
CASES += [(BPF_SUB, True, 43, -43), (BPF_SUB, True, -(1 << 31), None)]
CASES += [(BPF_ADD, False, -43, -43), (BPF_SUB, False, 5, -5), (BPF_ADD, False, -1, -1)]


def _flag(is64: bool) -> int:
    return D.ADD_CONST64 if is64 else D.ADD_CONST32


@pytest.mark.parametrize(("op", "is64", "val", "delta"), CASES)
@pytest.mark.parametrize("privileged", (True, False))
@pytest.mark.parametrize("linked", (True, False))
def test_made_handler_links_with_the_kernels_delta(
    op: int, is64: bool, val: int, delta: int | None, privileged: bool, linked: bool
) -> None:
    x = Insn((BPF_ALU64 if is64 else BPF_ALU) | op | BPF_K, dst=1, src=0, off=0, imm=val)
    handler = handlers.handler(x, [1])
    cfg = build_cfg([x, EXIT])
    env = Env(ProgramType.XDP, None, None, {}, {}, privileged=privileged)
    st = _state(linked)
    handler(env, cfg, st, 0, x)
    r1 = st.frames[-1].regs[1]
    assert env.inexact == 0  # the link is modelled, not approximated
    if delta is not None and privileged and linked:
        assert (r1.id, r1.off) == (7 | _flag(is64), delta)
    else:
        assert (r1.id, r1.off) == (0, 0)  # a fresh scalar


@pytest.mark.parametrize(("op", "is64", "val", "delta"), CASES)
@pytest.mark.parametrize("privileged", (True, False))
def test_do_alu_links_a_register_operand_known_constant(
    op: int, is64: bool, val: int, delta: int | None, privileged: bool
) -> None:
    x = Insn((BPF_ALU64 if is64 else BPF_ALU) | op | BPF_X, dst=1, src=2, off=0, imm=0)
    env = Env(ProgramType.XDP, None, None, {}, {}, privileged=privileged)
    st = _state(True)
    st.frames[-1].regs[2] = D.known(val)
    do_alu(env, st, x)
    r1 = st.frames[-1].regs[1]
    linked = delta is not None and privileged
    assert (r1.id, r1.off) == ((7 | _flag(is64), delta) if linked else (0, 0))


def test_no_link_of_rx_plus_rx_a_second_delta_or_a_wide_alu32_value() -> None:
    """6.18 stable: ``rX += rX`` keeps no delta (it reads the sum, "Fix linked reg delta
    tracking when src_reg == dst_reg"); a register already ``base + delta`` loses its
    link on a second add; a 32-bit add links only a value that fits in 32 bits."""
    env = Env(ProgramType.XDP, None, None, {}, {})
    st = _state(True)
    do_alu(env, st, Insn(BPF_ALU64 | BPF_ADD | BPF_X, dst=1, src=1, off=0, imm=0))
    assert st.frames[-1].regs[1].id == 0
    st = _state(True)
    do_alu(env, st, Insn(BPF_ALU64 | BPF_ADD | BPF_K, dst=1, src=0, off=0, imm=3))
    assert st.frames[-1].regs[1].id == 7 | D.ADD_CONST64
    do_alu(env, st, Insn(BPF_ALU64 | BPF_ADD | BPF_K, dst=1, src=0, off=0, imm=3))
    assert (st.frames[-1].regs[1].id, st.frames[-1].regs[1].off) == (0, 0)
    st = _state(True)
    st.frames[-1].regs[1] = D.unknown().replace(id=7)
    do_alu(env, st, Insn(BPF_ALU | BPF_ADD | BPF_K, dst=1, src=0, off=0, imm=3))
    assert st.frames[-1].regs[1].id == 0


# The program of the report: `scripts/fuzz.py --kind bigprogs --seed 7 --count 40` case 26,
# 2,367 lines at --mcpu v2, its range rules all `r1 = r6; r1 += -lo; if r1 < n`.
BIG_PROCESSED = 652_733  # Linux 6.18 (this project's VM), BPF_PROG_LOAD log_level 4


@functools.cache
def _big():
    from fuzz import bigprogs

    case = list(itertools.islice(bigprogs.cases(7, 40, True), 27))[26]
    src, _pkts, mcpu = case.payload
    assert mcpu == "v2" and src.count("\n") == 2367
    spec = read_object(compile_source(src, "gen.bpfd", mcpu=mcpu, check=False).obj)
    (prog,) = check_object(spec).programs
    return spec, prog


def test_range_check_acl_is_checked_on_the_full_budget() -> None:
    """Over half the budget, so only an exact walk passes: the checker's count is the
    kernel's and the verdict OK (it was complexity-limit-checker-only)."""
    _spec, prog = _big()
    assert prog.status == "ok", prog.errors
    assert prog.insns_processed == BIG_PROCESSED > INSN_LIMIT // 2


@pytest.mark.kernel
def test_range_check_acl_kernel_count() -> None:
    spec, _prog = _big()
    with load_collection(spec, log_level=1 | 4, log_size=1 << 20) as coll:
        log = next(iter(coll.programs.values())).log
    m = re.search(r"processed (\d+) insns", log)
    assert m is not None and int(m.group(1)) == BIG_PROCESSED
