"""Explored states and scalar precision (kernel is_state_visited checkpoints and
``mark_chain_precision``, kernel/bpf/verifier.c 6.x).

A :class:`Checkpoint` is a state kept at a prune point for later comparisons.  Its scalars
start imprecise (kernel ``mark_all_scalars_imprecise``): an imprecise scalar matches any
scalar.  When an instruction relies on a scalar's exact range -- a branch whose outcome it
decides, pointer arithmetic, a constant size or map key given to a helper, a zero stored
into the stack -- :func:`mark_precise` walks the path backwards (the checkpoint chain and
each segment's jump history, kernel ``backtrack_insn``) and marks every register and
stack slot the value came from precise in the checkpoints it passes, so that they only
cover states whose values lie within theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Final, cast

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.limits import MAX_CALL_FRAMES
from bpfdsl.abi.opcodes import (
    BPF_ABS,
    BPF_ALU,
    BPF_ALU64,
    BPF_ATOMIC,
    BPF_CMPXCHG,
    BPF_END,
    BPF_FETCH,
    BPF_IND,
    BPF_JMP,
    BPF_JMP32,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_NEG,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_ST,
    BPF_STX,
    BPF_X,
)
from bpfdsl.checker import domain as D
from bpfdsl.checker.state import SPILL, CoverPlan, FramesPlan, Hist, State

_ARGS: Final = 0b111110  # r1-r5 (kernel BPF_REGMASK_ARGS)


class Checkpoint:
    """An explored state at prune point ``insn`` (kernel ``bpf_verifier_state_list``):
    ``state`` (a copy), ``branches`` (paths below it still being explored), ``parent``
    (the checkpoint before it on its path), ``first_idx``/``last_idx``/``hist`` (the
    segment from the parent checkpoint to this one: first insn, last insn, jump history),
    ``live`` (live-register bitmask per frame), ``prec``/``sprec`` (precise-register and
    precise-stack-slot bitmasks per frame), ``hit``/``miss`` (comparison counters of the
    kernel's eviction heuristic), ``listed`` (still in the explored list), ``cleaned``
    (dead stack slots dropped, once its paths were all explored), ``plan`` / ``fplan``
    (how to compare with it, made once it is frozen: one frame / more frames); ``wanted``: :func:`wanted_from` it, kept
    from the first hit on (a frozen state's marks no longer change)."""

    __slots__ = (
        "state",
        "branches",
        "parent",
        "insn",
        "first_idx",
        "last_idx",
        "hist",
        "live",
        "prec",
        "sprec",
        "hit",
        "miss",
        "listed",
        "cleaned",
        "plan",
        "fplan",
        "wanted",
    )

    def __init__(self, state: State, insn: int, last_idx: int, live: list[int]) -> None:
        self.state = state
        self.branches = 1
        self.parent: Checkpoint | None = state.parent
        self.insn = insn
        self.first_idx = state.first_idx
        self.last_idx = last_idx
        self.hist = state.hist
        self.live = live
        n = len(state.frames)
        self.prec = [0] * n
        self.sprec = [0] * n
        self.hit = 0
        self.miss = 0
        self.listed = True
        self.cleaned = False
        self.plan: CoverPlan | None = None  # once frozen (single frame, no references)
        self.fplan: FramesPlan | None = None  # once frozen (more frames, no references)
        self.wanted: tuple[list[int], list[int]] | None = None


class NotSupported(Exception):
    """Backtracking met an instruction it cannot follow (kernel -ENOTSUPP): fall back to
    marking every scalar precise."""


class Backtrack:
    """Registers and stack slots still to be found, per frame (kernel backtrack_state)."""

    __slots__ = ("frame", "regs", "slots")

    def __init__(self, frame: int) -> None:
        self.frame = frame
        self.regs = [0] * MAX_CALL_FRAMES
        self.slots = [0] * MAX_CALL_FRAMES

    def empty(self) -> bool:
        f = self.frame
        return not any(self.regs[: f + 1]) and not any(self.slots[: f + 1])


def _sync_linked(bt: Backtrack, h: Hist | None) -> None:
    """kernel bt_sync_linked_regs: a register of a linked set is wanted -> all are."""
    if h is None or not h.linked:
        return
    for fr, r in h.linked:
        if (r >= 0 and bt.regs[fr] >> r & 1) or (r < 0 and bt.slots[fr] >> (-1 - r) & 1):
            break
    else:
        return
    for fr, r in h.linked:
        if r >= 0:
            bt.regs[fr] |= 1 << r
        else:
            bt.slots[fr] |= 1 << (-1 - r)


def backtrack_insn(
    insns: Sequence[Insn],
    idx: int,
    subseq: int,
    h: Hist | None,
    bt: Backtrack,
    call_target: dict[int, int],
    global_calls: AbstractSet[int] = frozenset(),
    callback_calls: AbstractSet[int] = frozenset(),
) -> None:
    """What insn ``idx`` means for the registers still wanted (kernel backtrack_insn):
    a register it defines is found (its sources become wanted), a fill from the stack
    hands the want to the slot, a call or exit moves between frames.  ``subseq``: the
    insn walked after it on the path; ``global_calls``: calls of global functions (not
    entered: they set r0); ``callback_calls``: helper calls that call a callback
    (bpf_loop), entered when ``subseq`` is not the next insn."""
    x = insns[idx]
    _sync_linked(bt, h)
    c = x.cls
    f = bt.frame
    regs = bt.regs
    dreg, sreg = x.dst, x.src
    if c == BPF_ALU or c == BPF_ALU64:
        if not regs[f] >> dreg & 1:
            return
        op = x.op
        if op == BPF_END or op == BPF_NEG:
            return
        if op == BPF_MOV:
            regs[f] &= ~(1 << dreg)
            if x.source == BPF_X and sreg != 10:
                regs[f] |= 1 << sreg
        elif x.source == BPF_X and sreg != 10:
            regs[f] |= 1 << sreg
    elif c == BPF_LDX or (c == BPF_STX and x.mode == BPF_ATOMIC and x.imm & BPF_FETCH):
        load = dreg
        if c == BPF_STX:
            load = 0 if x.imm == BPF_CMPXCHG else sreg
        if not regs[f] >> load & 1:
            return
        regs[f] &= ~(1 << load)
        if h is None or h.slot is None:
            return  # not a fill from the stack: the loaded value's range is its own
        fr, spi = h.slot
        bt.slots[fr] |= 1 << spi
    elif c == BPF_STX or c == BPF_ST:
        if regs[f] >> dreg & 1:
            raise NotSupported  # a scalar used as an address: pointer subtraction
        if h is None or h.slot is None:
            return
        fr, spi = h.slot
        if not bt.slots[fr] >> spi & 1:
            return
        bt.slots[fr] &= ~(1 << spi)
        if c == BPF_STX:
            regs[f] |= 1 << sreg
    elif c == BPF_JMP or c == BPF_JMP32:
        if x.is_pseudo_call and idx in global_calls:
            if regs[f] & _ARGS:
                raise NotSupported  # r1-r5 are not readable after the call
            regs[f] &= ~1  # a global function always sets r0
        elif x.is_pseudo_call:
            # backwards out of the called function into its caller
            if regs[f] & ~_ARGS or bt.slots[f]:
                raise NotSupported
            args = regs[f] & _ARGS
            regs[f] = 0
            if f == 0:
                raise NotSupported
            regs[f - 1] |= args
            bt.frame = f - 1
        elif idx in callback_calls and subseq != idx + 1:
            # backwards out of a callback into the helper call that runs it: r1-r5 of
            # the callback are set by the helper, not passed on (kernel backtrack_insn)
            if regs[f] & ~_ARGS or bt.slots[f]:
                raise NotSupported
            regs[f] = 0
            if f == 0:
                raise NotSupported
            bt.frame = f - 1
        elif x.is_call:
            if x.src == BPF_PSEUDO_KFUNC_CALL and x.imm == 0:
                raise NotSupported
            regs[f] &= ~1
            if regs[f] & _ARGS:
                raise NotSupported
        elif x.is_exit:
            # backwards from a function's return into the function
            if subseq in callback_calls:
                regs[f] &= ~_ARGS  # a callback's return: r1-r5 set by the helper
            if regs[f] & _ARGS:
                raise NotSupported
            r0 = subseq - 1 >= 0 and subseq - 1 in call_target and regs[f] & 1
            regs[f] &= ~1
            if f + 1 >= MAX_CALL_FRAMES:
                raise NotSupported
            bt.frame = f + 1
            regs[f + 1] = 1 if r0 else 0
            bt.slots[f + 1] = 0
            return
        elif x.is_cond_jump and x.source == BPF_X:
            if not (regs[f] >> dreg & 1 or regs[f] >> sreg & 1):
                return
            regs[f] |= (1 << sreg) | (1 << dreg)
    elif c == BPF_LD:
        if not regs[f] >> dreg & 1:
            return
        regs[f] &= ~(1 << dreg)
        if x.mode in (BPF_IND, BPF_ABS):
            raise NotSupported
    _sync_linked(bt, h)


# ---- the single-frame case, table driven (most programs have one function) ----

_NOP: Final = 0
_MOV_X: Final = 1
_MOV_K: Final = 2
_ALU_X: Final = 3
_LOAD: Final = 4
_STORE_X: Final = 5
_STORE_K: Final = 6
_JMP_X: Final = 7
_HELPER: Final = 8
_FRAMES: Final = 9
_UNSUPPORTED: Final = 10
_KFUNC0: Final = 11


def backtrack_table(
    insns: Sequence[Insn], global_calls: AbstractSet[int] = frozenset()
) -> list[tuple[int, int, int]]:
    """Per insn (kind, register a, register b) for :func:`_mark_single`: what
    backtrack_insn does with it in one frame (_FRAMES: a call or exit, which changes
    frames; the general walk handles those).  A call of a global function (index in
    ``global_calls``) stays in its frame: a helper call's kind."""
    out = []
    for idx, x in enumerate(insns):
        c, d, s = x.cls, x.dst, x.src
        k, a, b = _NOP, d, s
        if c == BPF_ALU or c == BPF_ALU64:
            if x.op == BPF_MOV:
                k = _MOV_X if x.source == BPF_X else _MOV_K
            elif x.op not in (BPF_END, BPF_NEG) and x.source == BPF_X:
                k = _ALU_X
        elif c == BPF_LDX:
            k = _LOAD
        elif c == BPF_STX and x.mode == BPF_ATOMIC and x.imm & BPF_FETCH:
            k, a = _LOAD, (0 if x.imm == BPF_CMPXCHG else s)
        elif c == BPF_STX:
            k = _STORE_X
        elif c == BPF_ST:
            k = _STORE_K
        elif c == BPF_JMP or c == BPF_JMP32:
            if x.is_pseudo_call and idx in global_calls:
                k = _HELPER
            elif x.is_pseudo_call or x.is_exit:
                k = _FRAMES
            elif x.is_call:
                k = _KFUNC0 if x.src == BPF_PSEUDO_KFUNC_CALL and x.imm == 0 else _HELPER
            elif x.is_cond_jump and x.source == BPF_X:
                k = _JMP_X
        elif c == BPF_LD:
            k = _MOV_K if x.is_ld_imm64 else _UNSUPPORTED
        out.append((k, a, b))
    return out


class _Fallback(Exception):
    """The single-frame walk met a frame change: the general one goes on from there
    with what is still wanted, ``regs``/``slots`` (of frame 0).  ``at_cp``: at
    checkpoint ``cp``, still to be marked (its segment started at insn ``first``);
    else at insn ``idx``, still to be backtracked: ``subseq``, the insn walked after it
    (known only after a history record or a checkpoint, the only ways to an exit);
    ``hist``, the history from it; ``first``, its segment's first insn; ``cp``, the
    last checkpoint marked (None: none yet)."""

    def __init__(
        self,
        at_cp: bool,
        idx: int,
        subseq: int,
        hist: Hist | None,
        first: int,
        cp: Checkpoint | None,
        regs: int,
        slots: int,
    ) -> None:
        super().__init__()
        self.at_cp = at_cp
        self.idx = idx
        self.subseq = subseq
        self.hist = hist
        self.first = first
        self.cp = cp
        self.regs = regs
        self.slots = slots


def _linked0(regs: int, slots: int, h: Hist) -> tuple[int, int]:
    """bt_sync_linked_regs for frame 0 masks."""
    hit = False
    for fr, r in h.linked or ():
        if fr == 0 and ((r >= 0 and regs >> r & 1) or (r < 0 and slots >> (-1 - r) & 1)):
            hit = True
            break
    if hit:
        for fr, r in h.linked or ():
            if fr == 0:
                if r >= 0:
                    regs |= 1 << r
                else:
                    slots |= 1 << (-1 - r)
    return regs, slots


def _mark_single(
    table: list[tuple[int, int, int]], cur: State, cur_idx: int, regs: int, slots: int
) -> None:
    """mark_precise for a one-frame path whose checkpoints are one-frame too; raises
    _Fallback at a call or exit, NotSupported as the kernel's -ENOTSUPP."""
    first, i, hist = cur.first_idx, cur_idx, cur.hist
    cp: Checkpoint | None = None
    skip = True
    sub = -1  # the insn walked after insn i, when i was reached by a record or checkpoint
    while True:
        while True:
            # the jump-history record of this visit of insn i, if any
            h: Hist | None = hist if hist is not None and hist.idx == i else None
            if skip:
                skip = False
            else:
                if h is not None and h.linked:
                    regs, slots = _linked0(regs, slots, h)
                k, a, b = table[i]
                if k == _NOP:
                    pass
                elif k == _MOV_X:
                    if regs >> a & 1:
                        regs &= ~(1 << a)
                        if b != 10:
                            regs |= 1 << b
                elif k == _MOV_K:
                    regs &= ~(1 << a)
                elif k == _ALU_X:
                    if regs >> a & 1 and b != 10:
                        regs |= 1 << b
                elif k == _LOAD:
                    if regs >> a & 1:
                        regs &= ~(1 << a)
                        if h is not None and h.slot is not None:
                            slots |= 1 << h.slot[1]
                elif k == _STORE_X or k == _STORE_K:
                    if regs >> a & 1:
                        raise NotSupported
                    if h is not None and h.slot is not None and slots >> h.slot[1] & 1:
                        slots &= ~(1 << h.slot[1])
                        if k == _STORE_X:
                            regs |= 1 << b
                elif k == _JMP_X:
                    if regs >> a & 1 or regs >> b & 1:
                        regs |= (1 << a) | (1 << b)
                elif k == _HELPER:
                    regs &= ~1
                    if regs & _ARGS:
                        raise NotSupported
                elif k == _FRAMES:  # (no linked registers at a call or exit)
                    raise _Fallback(False, i, sub, hist, first, cp, regs, slots)
                elif k == _KFUNC0 or regs >> a & 1:  # kfunc #0; LD_ABS/IND of a wanted reg
                    raise NotSupported
                if h is not None and h.linked:
                    regs, slots = _linked0(regs, slots, h)
            if not regs and not slots:
                return
            if i == first and (hist is None or (h is not None and h.next is None)):
                break
            if h is not None:  # (h is hist)
                sub = i
                i = h.prev
                hist = h.next
            else:
                i -= 1
            if i < 0:
                raise NotSupported
        cp = cast("Checkpoint | None", cur.parent) if cp is None else cp.parent
        if cp is None:
            raise NotSupported  # wanted registers never set: kernel marks all precise
        f = cp.state.frames
        if len(f) != 1:
            raise _Fallback(True, -1, -1, None, first, cp, regs, slots)
        fregs = f[0].regs
        live = cp.live[0]
        prec = cp.prec[0]
        m = regs
        while m:  # each wanted register (lowest set bit first)
            bit = m & -m
            m ^= bit
            if prec & bit or not live & bit or fregs[bit.bit_length() - 1].t != D.SCALAR:
                regs &= ~bit
            else:
                prec |= bit
        cp.prec[0] = prec
        if slots:
            stack = f[0].stack
            sprec = cp.sprec[0]
            m = slots
            while m:  # each wanted slot
                bit = m & -m
                m ^= bit
                sl = stack.get(bit.bit_length() - 1)
                spilled = (
                    sl is not None
                    and sl.spill is not None
                    and sl.types[0] == SPILL
                    and sl.spill.t == D.SCALAR
                )
                if not spilled or sprec & bit:
                    slots &= ~bit
                else:
                    sprec |= bit
            cp.sprec[0] = sprec
        if not regs and not slots:
            return
        sub = first
        i, first, hist = cp.last_idx, cp.first_idx, cp.hist
        if i < 0:
            raise NotSupported


def mark_all_precise(start: State) -> None:
    """kernel mark_all_scalars_precise: every scalar of every checkpoint on the path."""
    cp: Checkpoint | None = start.parent
    while cp is not None:
        for fi, f in enumerate(cp.state.frames):
            m = 0
            for r in range(10):
                if f.regs[r].t == D.SCALAR:
                    m |= 1 << r
            cp.prec[fi] |= m
            sm = 0
            for k, s in f.stack.items():
                if s.spill is not None and s.types[0] == SPILL and s.spill.t == D.SCALAR:
                    sm |= 1 << k
            cp.sprec[fi] |= sm
        cp = cp.parent


def mark_precise(
    insns: Sequence[Insn],
    call_target: dict[int, int],
    cur: State,
    cur_idx: int,
    regs: list[int],
    slots: list[int],
    table: list[tuple[int, int, int]] | None = None,
    global_calls: AbstractSet[int] = frozenset(),
    callback_calls: AbstractSet[int] = frozenset(),
) -> bool:
    """kernel mark_chain_precision from insn ``cur_idx`` of path ``cur``: ``regs[f]`` /
    ``slots[f]`` are bitmasks of the registers / stack slots of frame f whose value must
    be exact.  Marks them, and all they were computed from, precise in the checkpoints
    behind ``cur``; returns True when a mark was added.  ``table``: backtrack_table of
    the insns, for the single-frame walk; ``global_calls``/``callback_calls`` as
    :func:`backtrack_insn`."""
    resume: _Fallback | None = None
    if table is not None and len(cur.frames) == 1:
        try:
            _mark_single(table, cur, cur_idx, regs[0], slots[0])
            return True
        except NotSupported:
            mark_all_precise(cur)
            return True
        except _Fallback as e:
            # the general walk goes on from where the single-frame one stopped (without
            # the traceback: it would hold this frame in a reference cycle)
            resume = e.with_traceback(None)
    bt = Backtrack(len(cur.frames) - 1)
    cp: Checkpoint | None
    if resume is None:
        for f in range(len(regs)):
            bt.regs[f] = regs[f]
            bt.slots[f] = slots[f]
        if bt.empty():
            return False
        changed = False
        first, last, hist = cur.first_idx, cur_idx, cur.hist
        subseq = -1
        skip_first = True
        cp = None
        at_cp = False
    else:
        bt.regs[0], bt.slots[0] = resume.regs, resume.slots
        changed = True
        first, last, hist = resume.first, resume.idx, resume.hist
        subseq = resume.subseq
        skip_first = False
        cp = resume.cp
        at_cp = resume.at_cp
    # something wanted besides the current frame's registers (None: not known)
    rest: bool | None = None
    bregs = bt.regs  # (changed in place only)
    f = bt.frame
    rm = bregs[f]  # bregs[f] while the walk stays in frame f (written back before use)
    try:
        while True:
            if at_cp:  # (resumed at a checkpoint of more frames)
                at_cp = False
            else:
                i = last
                while True:
                    # the jump-history record of this visit of insn i, if any
                    h: Hist | None = hist if hist is not None and hist.idx == i else None
                    if skip_first:
                        skip_first = False
                    else:
                        # an insn that stays in its frame, with no stack access or linked
                        # registers in its history record: backtrack_insn by the table, on
                        # the current frame's mask only
                        if table is None or (h is not None and (h.slot is not None or h.linked)):
                            k, a, b = _FRAMES, 0, 0
                        else:
                            k, a, b = table[i]
                        if k <= _JMP_X or (k == _HELPER and i not in callback_calls):
                            if k == _NOP:
                                pass
                            elif k == _MOV_X:
                                if rm >> a & 1:
                                    rm &= ~(1 << a)
                                    if b != 10:
                                        rm |= 1 << b
                            elif k == _MOV_K:
                                rm &= ~(1 << a)
                            elif k == _ALU_X:
                                if rm >> a & 1 and b != 10:
                                    rm |= 1 << b
                            elif k == _LOAD:
                                rm &= ~(1 << a)  # not a fill from the stack (no record)
                            elif k == _STORE_X or k == _STORE_K:
                                if rm >> a & 1:
                                    raise NotSupported
                            elif k == _JMP_X:
                                if rm >> a & 1 or rm >> b & 1:
                                    rm |= (1 << a) | (1 << b)
                            else:  # _HELPER: a helper's or a global function's call
                                rm &= ~1
                                if rm & _ARGS:
                                    raise NotSupported
                            if not rm:
                                # only this frame's registers changed: the rest is as it was
                                bregs[f] = 0
                                if rest is None:
                                    rest = not bt.empty()
                                if not rest:
                                    return changed
                        else:
                            bregs[f] = rm
                            backtrack_insn(
                                insns, i, subseq, h, bt, call_target, global_calls, callback_calls
                            )
                            f = bt.frame
                            rm = bregs[f]
                            rest = None
                            if bt.empty():
                                return changed
                    subseq = i
                    # kernel get_prev_insn_idx
                    if h is not None:
                        if i == first and h.next is None:
                            break
                        i = h.prev
                        hist = h.next
                    else:
                        if i == first and hist is None:
                            break
                        i -= 1
                    if i < 0:
                        raise NotSupported
                bregs[f] = rm
                cp = cur.parent if cp is None else cp.parent
            if cp is None:
                break
            rest = None
            frames = cp.state.frames
            for fr in range(min(bt.frame, len(frames) - 1), -1, -1):
                m = bt.regs[fr]
                if m:
                    fregs = frames[fr].regs
                    live = cp.live[fr]
                    prec = cp.prec[fr]
                    keep = m
                    while m:  # each wanted register (lowest set bit first)
                        bit = m & -m
                        m ^= bit
                        if (
                            not live & bit
                            or fregs[bit.bit_length() - 1].t != D.SCALAR
                            or prec & bit
                        ):
                            keep &= ~bit
                        else:
                            prec |= bit
                            changed = True
                    bt.regs[fr] = keep
                    cp.prec[fr] = prec
                m = bt.slots[fr]
                if m:
                    stack = frames[fr].stack
                    sprec = cp.sprec[fr]
                    keep = m
                    while m:  # each wanted slot
                        bit = m & -m
                        m ^= bit
                        s = stack.get(bit.bit_length() - 1)
                        spilled = (
                            s is not None
                            and s.spill is not None
                            and s.types[0] == SPILL
                            and s.spill.t == D.SCALAR
                        )
                        if not spilled or sprec & bit:
                            keep &= ~bit
                        else:
                            sprec |= bit
                            changed = True
                    bt.slots[fr] = keep
                    cp.sprec[fr] = sprec
            if bt.empty():
                return changed
            rm = bregs[f]
            subseq = first
            last, first, hist = cp.last_idx, cp.first_idx, cp.hist
            if last < 0:
                raise NotSupported
    except NotSupported:
        mark_all_precise(cur)
        return True
    if not bt.empty():
        mark_all_precise(cur)
        return True
    return changed


def wanted_from(cp: Checkpoint) -> tuple[list[int], list[int]]:
    """The precise registers and slots of checkpoint ``cp`` (kernel propagate_precision):
    what a state it covers must in turn have exact."""
    regs, slots = [], []
    for fi, f in enumerate(cp.state.frames):
        m = cp.prec[fi]
        keep = 0
        r = 0
        while m:
            if m & 1 and f.regs[r].t == D.SCALAR:
                keep |= 1 << r
            m >>= 1
            r += 1
        regs.append(keep)
        slots.append(cp.sprec[fi])
    return regs, slots
