"""The values a program can return, from its instructions alone (no verifier): the
constants ``mov r0, K`` puts in r0 on the paths of the main function that reach an
``exit``, and the results of XDP's redirect helpers (the kernel's rule, below).  Used to say whether an XDP program can return ``XDP_TX`` (warnings at attach,
in ``show`` and ``run``: :func:`bpfdsl.kernel.netlink.xdp_xmit_problem`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bpfdsl.abi.flags import XDP_REDIRECT_FALLBACK_MASK
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.insn import Insn, index_by_slot, jump_target, slot_offsets
from bpfdsl.abi.opcodes import (
    BPF_ABS,
    BPF_ALU,
    BPF_ALU64,
    BPF_IND,
    BPF_K,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_X,
)
from bpfdsl.abi.prog_types import XdpAction

MAX_VALUES = 32  # more distinct constants than this: "any value"
NREGS = 10  # r0..r9 (r10, the frame pointer, holds no constant)

Vals = frozenset[int] | None  # a register's possible constants; None: any value
Regs = tuple[Vals, ...]  # r0..r9
HelperOf = Callable[[Insn], int | None]  # a helper call -> its BPF_FUNC_* id, None: unknown

_REDIRECT_ID: int = HELPERS["redirect"].id
_REDIRECT_MAP_ID: int = HELPERS["redirect_map"].id
_ANY_ACTION = frozenset(int(a) for a in XdpAction)


def object_helper(x: Insn) -> int | None:
    """The helper id of call ``x`` as an object file holds it (``imm`` is BPF_FUNC_*)."""
    return x.imm


def xdp_redirect_result(helper_id: int, flags: Vals) -> Vals:
    """What XDP helper ``helper_id`` returns for flag values ``flags`` (None: unknown),
    None for a helper other than bpf_redirect / bpf_redirect_map.  The kernel's rule:
    ``__bpf_xdp_redirect_map`` (include/linux/filter.h) returns XDP_REDIRECT, or on a
    lookup miss ``flags & BPF_F_ACTION_MASK`` (XDP_ABORTED..XDP_TX), or XDP_ABORTED for
    a flag bit the map does not take (counted for any bit above the mask: the map type is
    not known here); ``bpf_xdp_redirect`` (net/core/filter.c) returns XDP_REDIRECT for
    flags 0, XDP_ABORTED for any other."""
    redirect, aborted = int(XdpAction.REDIRECT), int(XdpAction.ABORTED)
    if helper_id == _REDIRECT_MAP_ID:
        if flags is None:
            return _ANY_ACTION
        out = {redirect}
        for f in flags:
            out.add(f & XDP_REDIRECT_FALLBACK_MASK)
            if f & ~XDP_REDIRECT_FALLBACK_MASK:
                out.add(aborted)
        return frozenset(out)
    if helper_id == _REDIRECT_ID:
        if flags is None:
            return frozenset({redirect, aborted})
        return frozenset(redirect if f == 0 else aborted for f in flags)
    return None


def possible_returns(
    insns: Sequence[Insn], helper_of: HelperOf | None = None
) -> frozenset[int] | None:
    """The values r0 can hold at an ``exit`` of the main function: each path's constants
    (``mov rN, K``, ``mov rN, rM``; ALU32 zero-extends), or with ``helper_of`` (how to tell
    a helper call's BPF_FUNC_* id: :func:`object_helper` for an object's instructions, a
    kallsyms lookup for the kernel's xlated ones) XDP's bpf_redirect / bpf_redirect_map
    result for the flags argument's constants (:func:`xdp_redirect_result`).  Other calls
    (BPF-to-BPF, other helpers) give an unknown r0.  None when some path returns a value
    that is not known so, or the program cannot be followed.  Over-approximate: a path no
    input takes counts too, so a value in the set may never be returned, one outside never
    is."""
    if not insns:
        return frozenset()
    slots, by_slot = slot_offsets(insns), index_by_slot(insns)
    top: Regs = (None,) * NREGS
    state: dict[int, Regs] = {0: top}
    out: set[int] = set()
    todo = [0]
    while todo:
        i = todo.pop()
        regs = state[i]
        x = insns[i]
        if x.is_exit:
            if regs[0] is None:
                return None
            out.update(regs[0])
            continue
        regs = _after(x, regs, helper_of)
        succ: list[int] = []
        if x.is_ja:
            t = jump_target(insns, i, slots, by_slot)
            if t is None:
                return None
            succ = [t]
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
            if s not in state:
                state[s] = regs
                todo.append(s)
                continue
            old = state[s]
            new = tuple(_join(a, b) for a, b in zip(old, regs, strict=True))
            if new != old:
                state[s] = new
                todo.append(s)
    return frozenset(out)


def may_return(insns: Sequence[Insn], value: int, helper_of: HelperOf | None = None) -> bool:
    """Whether the program can return ``value`` (True when it cannot be told);
    ``helper_of`` as for :func:`possible_returns`."""
    got = possible_returns(insns, helper_of)
    return got is None or value in got


def _join(a: Vals, b: Vals) -> Vals:
    if a is None or b is None:
        return None
    new = a | b
    return None if len(new) > MAX_VALUES else new


def _set(regs: Regs, reg: int, v: Vals) -> Regs:
    if reg >= NREGS:
        return regs
    return regs[:reg] + (v,) + regs[reg + 1 :]


def _after(x: Insn, regs: Regs, helper_of: HelperOf | None) -> Regs:
    """The registers' possible constants after ``x``."""
    cls = x.cls
    if x.is_call:
        r0: Vals = None
        if x.is_helper_call and helper_of is not None:
            hid = helper_of(x)
            if hid == _REDIRECT_MAP_ID:
                r0 = xdp_redirect_result(hid, regs[3])
            elif hid == _REDIRECT_ID:
                r0 = xdp_redirect_result(hid, regs[2])
        return (r0,) + (None,) * 5 + regs[6:]  # r1..r5: clobbered by the call
    if x.is_atomic:
        return _set(_set(regs, 0, None), x.src, None)  # a fetch or cmpxchg writes these
    if cls in (BPF_ALU, BPF_ALU64):
        mask = 0xFFFFFFFF if cls == BPF_ALU else 0xFFFFFFFFFFFFFFFF
        v: Vals = None
        if x.op == BPF_MOV and x.off == 0:
            if x.opcode & 0x08 == BPF_K:
                v = frozenset({x.imm & mask})
            elif x.opcode & 0x08 == BPF_X and x.src < NREGS:
                src = regs[x.src]
                v = None if src is None else frozenset(s & mask for s in src)
        return _set(regs, x.dst, v)
    if cls == BPF_LDX:
        return _set(regs, x.dst, None)
    if cls == BPF_LD:
        if x.mode in (BPF_ABS, BPF_IND):  # result in r0; r1..r5 clobbered
            return (None,) * 6 + regs[6:]
        return _set(regs, x.dst, None)  # ld_imm64 (a map address or a constant)
    return regs
