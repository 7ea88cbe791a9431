"""The values a program can return, from its instructions alone (no verifier): the
constants ``mov r0, K`` puts in r0 on the paths of the main function that reach an
``exit``.  Used to say whether an XDP program can return ``XDP_TX`` (warnings at attach,
in ``show`` and ``run``: :func:`bpfdsl.kernel.netlink.xdp_xmit_problem`)."""

from __future__ import annotations

from collections.abc import Sequence

from bpfdsl.abi.insn import Insn, index_by_slot, jump_target, slot_offsets
from bpfdsl.abi.opcodes import BPF_ABS, BPF_ALU, BPF_ALU64, BPF_IND, BPF_K, BPF_LD, BPF_LDX, BPF_MOV

MAX_VALUES = 32  # more distinct constants than this: "any value"


def possible_returns(insns: Sequence[Insn]) -> frozenset[int] | None:
    """The values r0 can hold at an ``exit`` of the main function (BPF-to-BPF calls and
    helper calls give an unknown r0), each path's last ``mov r0, K`` (ALU32 zero-extends);
    None when some path returns a value that is not such a constant (a helper's result, a
    computed value) or the program cannot be followed.  Over-approximate: a path no input
    takes counts too, so a value in the set may never be returned, one outside never is."""
    if not insns:
        return frozenset()
    slots, by_slot = slot_offsets(insns), index_by_slot(insns)
    top: frozenset[int] | None = None
    state: dict[int, frozenset[int] | None] = {0: top}
    out: set[int] = set()
    todo = [0]
    while todo:
        i = todo.pop()
        vals = state[i]
        x = insns[i]
        if x.is_exit:
            if vals is None:
                return None
            out.update(vals)
            continue
        vals = _after(x, vals)
        succ: list[int] = []
        if x.is_ja:
            t = jump_target(insns, i, slots, by_slot)
            succ = [] if t is None else [t]
            if t is None:
                return None
        elif x.is_cond_jump:
            t = jump_target(insns, i, slots, by_slot)
            if t is None:
                return None
            succ = [i + 1, t]
        else:
            succ = [i + 1]
        for s in succ:
            if s >= len(insns):
                return None
            old = state.get(s, frozenset())
            if s not in state:
                new = vals
            elif old is None or vals is None:
                new = None
            else:
                new = old | vals
                if len(new) > MAX_VALUES:
                    new = None
            if s not in state or new != old:
                state[s] = new
                todo.append(s)
    return frozenset(out)


def may_return(insns: Sequence[Insn], value: int) -> bool:
    """Whether the program can return ``value`` (True when it cannot be told)."""
    got = possible_returns(insns)
    return got is None or value in got


def _after(x: Insn, vals: frozenset[int] | None) -> frozenset[int] | None:
    """r0's possible constants after ``x``."""
    cls = x.cls
    if x.is_call or x.is_atomic:
        return None  # a call's result; an atomic fetch or cmpxchg may write r0
    if cls in (BPF_ALU, BPF_ALU64) and x.dst == 0:
        if x.op == BPF_MOV and x.opcode & 0x08 == BPF_K and x.off == 0:
            if cls == BPF_ALU:
                return frozenset({x.imm & 0xFFFFFFFF})
            return frozenset({x.imm & 0xFFFFFFFFFFFFFFFF})
        return None
    if cls == BPF_LDX and x.dst == 0:
        return None
    if cls == BPF_LD:  # ld_imm64 into r0, or LD_ABS/LD_IND (their result is r0)
        if x.dst == 0 or x.mode in (BPF_ABS, BPF_IND):
            return None
    return vals
