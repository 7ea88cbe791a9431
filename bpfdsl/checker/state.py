"""Verifier state: call frames with registers and stack, and the pruning order.

A stack slot covers 8 bytes ``[fp - 8*(k+1), fp - 8*k)`` and records per byte whether it
is invalid (never written), misc (some scalar bytes), zero, or part of a spilled register
(kernel ``STACK_INVALID/MISC/ZERO/SPILL``).  :func:`states_equal` is the kernel's
``states_equal``/``regsafe``/``stacksafe`` (kernel/bpf/verifier.c, 6.x): if an explored
state covers a new one, the new path need not be walked again.  Scalars of the explored
state count only by type unless they are marked precise (``mark_chain_precision``,
checker/precision.py); registers not live at the insn are ignored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T

INVALID: Final = "i"
MISC: Final = "m"
ZERO: Final = "z"
SPILL: Final = "s"


class Slot:
    """8 bytes of stack: ``types`` (8 chars, byte 0 = lowest address) and the spilled reg."""

    __slots__ = ("types", "spill")
    types: str
    spill: D.Reg | None

    def __init__(self, types: str = INVALID * 8, spill: D.Reg | None = None) -> None:
        self.types = types
        self.spill = spill

    def __repr__(self) -> str:
        return f"Slot({self.types!r}, {self.spill!r})"


class Hist:
    """One jump-history record of a path (kernel ``bpf_jmp_history_entry``): insn ``idx``
    reached from ``prev``; ``slot`` = (frame number, stack slot) when the insn spilled or
    filled a register there (kernel ``INSN_F_STACK_ACCESS``); ``linked``: registers and
    slots sharing a scalar id at a conditional jump, as ((frame, regno) | (frame, -1 - slot))
    tuples (kernel ``linked_regs``); ``next``: the older record; ``count``: records in the
    chain including this one."""

    __slots__ = ("idx", "prev", "slot", "linked", "next", "count")
    idx: int
    prev: int
    slot: tuple[int, int] | None
    linked: tuple[tuple[int, int], ...] | None  # (frame, regno | -1 - slot) pairs
    next: Hist | None
    count: int

    def __init__(
        self,
        idx: int,
        prev: int,
        slot: tuple[int, int] | None,
        linked: tuple[tuple[int, int], ...] | None,
        nxt: Hist | None,
    ) -> None:
        self.idx = idx
        self.prev = prev
        self.slot = slot
        self.linked = linked
        self.next = nxt
        self.count = 1 if nxt is None else nxt.count + 1


class Frame:
    """One function's registers r0..r10 and stack; ``callsite``: insn index of the call
    that made it (-1 for the main program); ``frameno``: depth (0 = main); ``r0_at``: insn
    index that last wrote r0 on this path (-1: none), for messages about the return value
    (not part of state equality); ``callback_depth``: callback visits pushed from this
    frame's current bpf_loop call (kernel bpf_func_state.callback_depth, not compared
    either); ``allocated``: bytes of stack this path has accessed below the frame
    pointer, a multiple of 8 (kernel allocated_stack, grown by every access: a slot at or
    beyond it was never touched on this path, which stacksafe tells from one touched and
    left uninitialized)."""

    __slots__ = (
        "regs",
        "stack",
        "callsite",
        "frameno",
        "subprog",
        "r0_at",
        "callback_depth",
        "allocated",
    )
    regs: list[D.Reg]
    stack: dict[int, Slot]  # slot number k (bytes fp-8*(k+1)..fp-8*k) -> Slot
    callsite: int
    frameno: int
    subprog: int
    r0_at: int
    callback_depth: int
    allocated: int

    def __init__(
        self,
        regs: list[D.Reg],
        stack: dict[int, Slot],
        callsite: int,
        frameno: int,
        subprog: int,
        r0_at: int = -1,
    ) -> None:
        self.regs = regs
        self.stack = stack
        self.callsite = callsite
        self.frameno = frameno
        self.subprog = subprog
        self.r0_at = r0_at
        self.callback_depth = 0
        self.allocated = 0

    def copy(self) -> Frame:
        f = Frame(
            self.regs.copy(),
            self.stack.copy(),
            self.callsite,
            self.frameno,
            self.subprog,
            self.r0_at,
        )
        f.callback_depth = self.callback_depth
        f.allocated = self.allocated
        return f


class State:
    """Whole abstract machine state on one path: frames (last = current), acquired
    reference ids, and the pruning bookkeeping: ``parent``, the explored state (checkpoint)
    this path continues from; ``hist``, the path's jump history since that checkpoint
    (kernel ``jmp_history``: :class:`Hist` records, newest first, None when empty);
    ``first_idx``, the insn where that segment starts (kernel ``first_insn_idx``);
    ``cb_unroll``: callback visits begun on this path (kernel callback_unroll_depth: states
    of different visits are no infinite loop)."""

    __slots__ = (
        "frames", "refs", "parent", "trail", "hist", "first_idx", "cb_unroll", "lock_id",
        "lock_ptr",
    )  # fmt: skip
    frames: list[Frame]
    refs: tuple[int, ...]
    lock_id: int  # the held bpf_spin_lock's entry of refs (kernel active_lock_id), 0: none
    lock_ptr: object  # the map whose value holds it (kernel active_lock_ptr)
    parent: Any  # precision.Checkpoint | None (precision imports this module)
    trail: tuple | None
    hist: Hist | None
    first_idx: int
    cb_unroll: int

    def __init__(
        self,
        frames: list[Frame],
        refs: tuple[int, ...] = (),
        parent: Any = None,
        trail: tuple | None = None,
    ) -> None:
        self.frames = frames
        self.refs = refs
        self.parent = parent
        self.trail = trail  # branch decisions on this path: (insn index, taken, older trail)
        self.hist = None
        self.first_idx = 0
        self.cb_unroll = 0
        self.lock_id = 0
        self.lock_ptr = None

    @property
    def cur(self) -> Frame:
        return self.frames[-1]

    @property
    def regs(self) -> list[D.Reg]:
        return self.frames[-1].regs

    def copy(self) -> State:
        fs = self.frames
        frames = [fs[0].copy()] if len(fs) == 1 else [f.copy() for f in fs]
        s = State(frames, self.refs, self.parent, self.trail)
        s.hist, s.first_idx, s.cb_unroll = self.hist, self.first_idx, self.cb_unroll
        s.lock_id, s.lock_ptr = self.lock_id, self.lock_ptr
        return s

    def update_regs(self, fn: Callable[[D.Reg], D.Reg | None]) -> None:
        """Replace every register and spilled register ``r`` of every frame by ``fn(r)``
        where that is not None."""
        for f in self.frames:
            regs = f.regs
            for i, r in enumerate(regs):
                n = fn(r)
                if n is not None:
                    regs[i] = n
            stack = f.stack
            for k, s in list(stack.items()):
                if s.spill is not None:
                    n = fn(s.spill)
                    if n is not None:
                        stack[k] = Slot(s.types, n)


# ---- pruning (kernel states_equal / regsafe / stacksafe) ----

NOT_EXACT: Final = 0
EXACT: Final = 1
RANGE_WITHIN: Final = 2
AT_PKT_END: Final = -1
BEYOND_PKT_END: Final = -2
_ALL_INVALID: Final = INVALID * 8


class IdMap:
    """Old id -> new id pairs of one comparison (kernel ``bpf_idmap``): an old id maps to
    one new id and a new id to one old id; ``fresh`` numbers ids given to unlinked
    registers of the new state (kernel ``tmp_id_gen``)."""

    __slots__ = ("old", "cur", "fresh")

    def __init__(self) -> None:
        self.old: dict = {}
        self.cur: dict = {}
        self.fresh = 0

    def check(self, old_id: int, cur_id: int | tuple[str, int]) -> bool:
        """kernel check_ids: both zero, or a consistent one-to-one pair."""
        if not old_id or not cur_id:
            return not old_id and not cur_id
        seen = self.old.get(old_id)
        if seen is not None:
            return seen == cur_id
        if cur_id in self.cur:
            return False
        self.old[old_id] = cur_id
        self.cur[cur_id] = old_id
        return True

    def check_scalar(self, old_id: int, cur_id: int | tuple[str, int]) -> bool:
        """kernel check_scalar_ids: an unlinked old scalar constrains nothing; an unlinked
        new one gets a fresh id (two linked old registers need linked new ones)."""
        if not old_id:
            return True
        if not cur_id:
            self.fresh += 1
            cur_id = ("fresh", self.fresh)
        if not self.check(old_id, cur_id):
            return False
        if old_id & D.ADD_CONST and isinstance(cur_id, int):
            # base + delta: the base ids map consistently too (6.18 stable, "Enforce
            # regsafe base id consistency for BPF_ADD_CONST scalars")
            return self.check(old_id & ~D.ADD_CONST, cur_id & ~D.ADD_CONST)
        return True

    def scalar_ids(self, o: D.Reg, n: D.Reg) -> bool:
        """kernel regsafe's id checks of an explored scalar ``o`` with an id against the
        current ``n``: the same BPF_ADD_CONST flag (32- and 64-bit deltas link
        differently), the same delta, then check_scalar_ids."""
        oid = o.id
        if oid & D.ADD_CONST != n.id & D.ADD_CONST:
            return False
        if oid & D.ADD_CONST and o.off != n.off:
            return False
        return self.check_scalar(oid, n.id)


def _range_within(o: D.Reg, n: D.Reg) -> bool:
    """kernel range_within + tnum_in: every value ``n`` admits, ``o`` admits."""
    return (
        o.smin <= n.smin
        and n.smax <= o.smax
        and o.umin <= n.umin
        and n.umax <= o.umax
        and o.s32min <= n.s32min
        and n.s32max <= o.s32max
        and o.u32min <= n.u32min
        and n.u32max <= o.u32max
        and T.contains(o.tn, n.tn)
    )


def _same_value(o: D.Reg, n: D.Reg) -> bool:
    """The fields before ``id`` in kernel bpf_reg_state (type, offset, var_off, bounds,
    the type's union: packet range, map, frame number)."""
    return (
        o.t == n.t
        and o.off == n.off
        and o.tn == n.tn
        and o.smin == n.smin
        and o.smax == n.smax
        and o.umin == n.umin
        and o.umax == n.umax
        and o.s32min == n.s32min
        and o.s32max == n.s32max
        and o.u32min == n.u32min
        and o.u32max == n.u32max
        and o.rng == n.rng
        and o.map is n.map
    )


def regs_exact(o: D.Reg, n: D.Reg, idmap: IdMap) -> bool:
    """kernel regs_exact: the same value, ids and references mapped consistently."""
    return _same_value(o, n) and idmap.check(o.id, n.id) and idmap.check(o.ref, n.ref)


# ring buffer reservations (kernel base type PTR_TO_MEM, MEM_RINGBUF)
_MEM_TYPES: Final = (D.RINGBUF_MEM, D.RINGBUF_MEM_OR_NULL)


def regsafe(o: D.Reg, n: D.Reg, precise: bool, idmap: IdMap, exact: int) -> bool:
    """kernel regsafe: ``o`` (explored, safe) implies ``n`` (current) safe.  ``precise``:
    the explored scalar was marked precise (an imprecise one only needs the same type)."""
    if exact == EXACT:
        return regs_exact(o, n, idmap)
    t = o.t
    if t == D.NOT_INIT:
        return True
    if t != n.t:
        return False
    if t == D.SCALAR:
        if not precise and exact == NOT_EXACT:
            return True
        if o.id and not idmap.scalar_ids(o, n):
            return False
        return _range_within(o, n)
    if t in D.PACKET_TYPES:
        if o.rng < 0 or n.rng < 0:
            if o.rng != n.rng:  # AT/BEYOND_PKT_END match only themselves
                return False
        elif o.rng > n.rng:
            return False
        return o.off == n.off and idmap.check(o.id, n.id) and _range_within(o, n)
    if t == D.MAP_VALUE or t == D.MAP_VALUE_OR_NULL or t in _MEM_TYPES:
        # kernel regsafe PTR_TO_MAP_VALUE / PTR_TO_MEM: the fields before var_off equal
        # (type, off, the union: map, or a ring buffer reservation's mem_size), the
        # current offsets within the explored ones, ids and references mapped
        return (
            o.off == n.off
            and o.map is n.map
            and o.rng == n.rng
            and _range_within(o, n)
            and idmap.check(o.id, n.id)
            and idmap.check(o.ref, n.ref)
        )
    return regs_exact(o, n, idmap)


def _spilled_scalar64(s: Slot | None) -> bool:
    return s is not None and s.types == SPILL * 8 and s.spill is not None and s.spill.t == D.SCALAR


def stacksafe(
    old: Frame, cur: Frame, precise: int, idmap: IdMap, exact: int, uninit_ok: bool
) -> bool:
    """kernel stacksafe for one frame: every slot the explored state used is at least as
    initialized in the current one.  ``precise``: bitmask of explored slots whose spilled
    scalar is precise; ``uninit_ok``: the loader may read uninitialized stack (root,
    kernel ``allow_uninit_stack``), so never-written and misc bytes are alike."""
    cstack = cur.stack
    if exact == EXACT and old.allocated > cur.allocated:
        return False
    for k, os in old.stack.items():
        cs = cstack.get(k)
        otypes = os.types
        ctypes = cs.types if cs is not None else _ALL_INVALID
        if exact == EXACT and otypes != ctypes:
            return False
        if os is cs and (os.spill is None or (not os.spill.id and not os.spill.ref)):
            continue  # the same (immutable) slot, no id to map
        if otypes == _ALL_INVALID or (uninit_ok and SPILL not in otypes and ZERO not in otypes):
            continue
        if 8 * k >= cur.allocated:
            # kernel: "explored stack has more populated slots than current stack and
            # these slots were used" -- never touched on this path, not even as misc
            return False
        prec = bool(precise >> k & 1)
        if _spilled_scalar64(os):
            nreg = None
            if cs is not None and _spilled_scalar64(cs):
                nreg = cs.spill
            elif all(c == MISC or (c == INVALID and uninit_ok) for c in ctypes):
                nreg = _UNBOUND
            if nreg is not None and os.spill is not None:
                if not regsafe(os.spill, nreg, prec, idmap, exact):
                    return False
                continue
        for o, c in zip(otypes, ctypes, strict=True):
            if o == INVALID or (o == MISC and (uninit_ok or c == ZERO)):
                continue
            if o != c:
                return False
        if otypes[0] == SPILL:  # kernel slot_type[7]: the slot's lowest byte
            if cs is None or cs.spill is None or os.spill is None:
                return False
            if not regsafe(os.spill, cs.spill, prec, idmap, exact):
                return False
    return True


_UNBOUND: Final = D.unknown()  # what a load from misc stack bytes gives (kernel unbound_reg)


def states_equal(
    old: State,
    prec: list[int],
    sprec: list[int],
    cur: State,
    live: list[int],
    exact: int,
    uninit_ok: bool,
) -> bool:
    """kernel states_equal: explored ``old`` (with its precise register masks ``prec`` and
    precise slot masks ``sprec``, one per frame) covers ``cur``.  ``live[i]``: bitmask of
    the registers of frame i live at its insn (the current frame's at the pruning insn, a
    caller's at its call)."""
    ofs, nfs = old.frames, cur.frames
    if len(ofs) != len(nfs) or len(old.refs) != len(cur.refs):
        return False
    idmap = IdMap()
    # kernel refsafe: the held lock (its id mapped, the same map), then each entry of refs
    # pairwise, of the same kind (a lock or a pointer reference)
    if old.lock_ptr is not cur.lock_ptr or not idmap.check(old.lock_id, cur.lock_id):
        return False
    for a, b in zip(old.refs, cur.refs, strict=True):
        if not idmap.check(a, b) or (a == old.lock_id) != (b == cur.lock_id):
            return False
    for fi in range(len(ofs)):
        of, nf = ofs[fi], nfs[fi]
        if of.callsite != nf.callsite:
            return False
        oregs, nregs = of.regs, nf.regs
        m, pm = live[fi], prec[fi]
        r = 0
        while m:
            if m & 1:
                o, n = oregs[r], nregs[r]
                if o is not n or o.id or o.ref:
                    if not regsafe(o, n, bool(pm >> r & 1), idmap, exact):
                        return False
            m >>= 1
            r += 1
        if of.stack and not stacksafe(of, nf, sprec[fi], idmap, exact, uninit_ok):
            return False
    return True


def states_maybe_looping(old: State, cur: State, live: int) -> bool:
    """kernel states_maybe_looping: the current frames' live registers hold the very same
    values and ids (dead registers are cleaned to NOT_INIT in both)."""
    if len(old.frames) != len(cur.frames):
        return False
    oregs, nregs = old.frames[-1].regs, cur.frames[-1].regs
    r = 0
    while live:
        if live & 1:
            o, n = oregs[r], nregs[r]
            if o is not n and not (_same_value(o, n) and o.id == n.id and o.ref == n.ref):
                return False
        live >>= 1
        r += 1
    return True


# ---- the same comparison, planned once per frozen explored state ----


_CONST: Final = 0  # CoverPlan.checks kinds, in the order they are tried
_RANGE: Final = 1
_ANY: Final = 2
_LINKED: Final = 3  # a precise scalar linked to others: bounds and tnum, then its id (before _ANY)


class CoverPlan:
    """What covering one explored single-frame state needs, computed once its paths are
    all done (its registers, precision marks and stack no longer change): ``types``, the
    live registers' types (None: never set, anything goes); ``exact_types``: no None
    among them, so one tuple comparison checks them all; ``checks``: (regno, register,
    how) still to compare by value, cheapest and most telling first: _CONST (a precise
    constant: the same tnum), _RANGE (a precise scalar not linked to others: bounds and
    tnum), _LINKED (a precise scalar linked to others: bounds and tnum, then its id),
    _ANY (ids to map or a pointer: regsafe); ``stack``: whether its stack holds
    anything a later state must match (spills, zero bytes).  ``pre_reg``/``pre_tn``/
    ``pre_umin``/``pre_umax``: a _CONST (the tnum) or _RANGE/_LINKED (the unsigned
    bounds) one of ``checks``, at first the first, then the last that failed in
    :func:`covers` (states compared with one explored state tend to differ from it in
    the same register), for the caller to reject most non-covered states without
    calling :func:`covers` (``pre_reg`` -1: none)."""

    __slots__ = (
        "types",
        "exact_types",
        "checks",
        "stack",
        "pre_reg",
        "pre_tn",
        "pre_umin",
        "pre_umax",
    )

    def __init__(self, st: State, prec: int, live_regs: tuple[int, ...], uninit_ok: bool) -> None:
        regs = st.frames[0].regs
        types: list[int | None] = []
        # by kind, each in register order (live_regs is ascending): sorted by (how, regno)
        consts: list[tuple[int, D.Reg, int]] = []
        ranges: list[tuple[int, D.Reg, int]] = []
        linked: list[tuple[int, D.Reg, int]] = []
        others: list[tuple[int, D.Reg, int]] = []
        for r in live_regs:
            o = regs[r]
            t = o.t
            if t == D.NOT_INIT:
                types.append(None)
                continue
            types.append(t)
            if t != D.SCALAR:
                others.append((r, o, _ANY))
            elif prec >> r & 1:
                if o.id:
                    linked.append((r, o, _LINKED))
                elif o.tn[1] == 0:
                    consts.append((r, o, _CONST))
                else:
                    ranges.append((r, o, _RANGE))
        self.types = tuple(types)
        self.exact_types = None not in self.types
        self.checks = tuple(consts + ranges + linked + others)
        self.pre_reg, self.pre_tn, self.pre_umin, self.pre_umax = -1, None, 0, 0
        if self.checks and self.checks[0][2] != _ANY:
            r, o, how = self.checks[0]
            self.pre_reg = r
            if how == _CONST:
                self.pre_tn = o.tn
            else:
                self.pre_umin, self.pre_umax = o.umin, o.umax
        self.stack = any(
            sl.types != _ALL_INVALID
            and not (uninit_ok and SPILL not in sl.types and ZERO not in sl.types)
            for sl in st.frames[0].stack.values()
        )


def covers(
    plan: CoverPlan,
    old: State,
    sprec: int,
    cur: State,
    cur_types: tuple,
    uninit_ok: bool,
) -> bool:
    """:func:`states_equal` (NOT_EXACT) for single-frame states without references,
    through the explored state's :class:`CoverPlan`; ``cur_types``: the current state's
    live register types in the plan's order."""
    if plan.exact_types:
        if plan.types != cur_types:
            return False
    else:
        for a, b in zip(plan.types, cur_types, strict=True):
            if a is not None and a != b:
                return False
    idmap = None
    nregs = cur.frames[0].regs
    for r, o, how in plan.checks:
        n = nregs[r]
        if how == _CONST:
            if n.tn != o.tn:  # a constant covers only itself
                if plan.pre_reg != r:  # the caller's first check next time: this one
                    plan.pre_reg, plan.pre_tn = r, o.tn
                return False
            continue
        if o is n and not o.id and not o.ref:
            continue
        if how == _RANGE or how == _LINKED:
            # a precise scalar: kernel range_within + tnum_in (and, linked to others,
            # check_scalar_ids: the answer is the same in either order)
            if not (
                o.smin <= n.smin
                and n.smax <= o.smax
                and o.umin <= n.umin
                and n.umax <= o.umax
                and o.s32min <= n.s32min
                and n.s32max <= o.s32max
                and o.u32min <= n.u32min
                and n.u32max <= o.u32max
                and T.contains(o.tn, n.tn)
            ):
                if plan.pre_reg != r:  # the caller's first check next time: this one
                    plan.pre_reg, plan.pre_tn = r, None
                    plan.pre_umin, plan.pre_umax = o.umin, o.umax
                return False
            if how == _RANGE:
                continue
            if idmap is None:
                idmap = IdMap()
            if not idmap.scalar_ids(o, n):
                return False
            continue
        if idmap is None:
            idmap = IdMap()
        if not regsafe(o, n, True, idmap, NOT_EXACT):
            return False
    if plan.stack:
        if idmap is None:
            idmap = IdMap()
        return stacksafe(old.frames[0], cur.frames[0], sprec, idmap, NOT_EXACT, uninit_ok)
    return True


class FramesPlan:
    """What covering one explored state of more than one frame (static subprograms)
    needs, computed once its paths are all done, as :class:`CoverPlan` over all its
    frames: ``sites``, the callsite of each frame (a state of other calls is never
    covered: kernel states_equal compares frames pairwise, func_states_equal, only when
    the callsites are the same); ``types``: (frame, regno, type) of the live registers
    that were set (the current frame's live at the pruning insn, a caller's at its call:
    the same for all states of those calls); ``checks``: (frame, regno, register, how)
    still to compare by value: _CONST, _RANGE, _LINKED (a precise scalar with an id:
    bounds and tnum, then the id map), _ANY (regsafe); ``stacks``: the frames whose
    stack holds anything a later state must match; ``pre_frame``/``pre_reg``/``pre_tn``/
    ``pre_umin``/``pre_umax``: as :class:`CoverPlan`'s, a _CONST (the tnum) or
    _RANGE/_LINKED (the unsigned bounds) one of ``checks``, at first the first, then
    the last that failed, for the caller to try before :func:`covers_frames`
    (``pre_reg`` -1: none).  The answer is :func:`states_equal`'s whatever the order:
    the id map only needs to stay one-to-one over all the pairs."""

    __slots__ = (
        "sites",
        "types",
        "checks",
        "stacks",
        "pre_frame",
        "pre_reg",
        "pre_tn",
        "pre_umin",
        "pre_umax",
    )

    def __init__(self, st: State, prec: list[int], live: list[int], uninit_ok: bool) -> None:
        self.sites = tuple([f.callsite for f in st.frames])
        types: list[tuple[int, int, int]] = []
        consts: list[tuple[int, int, D.Reg, int]] = []
        ranges: list[tuple[int, int, D.Reg, int]] = []
        linked: list[tuple[int, int, D.Reg, int]] = []
        others: list[tuple[int, int, D.Reg, int]] = []
        stacks: list[int] = []
        # the current frame first: the callers' registers are mostly the same objects
        for fi in range(len(st.frames) - 1, -1, -1):
            f = st.frames[fi]
            m, pm = live[fi], prec[fi]
            for r in range(11):
                if not m >> r & 1:
                    continue
                o = f.regs[r]
                t = o.t
                if t == D.NOT_INIT:
                    continue
                types.append((fi, r, t))
                if t != D.SCALAR:
                    others.append((fi, r, o, _ANY))
                elif pm >> r & 1:
                    if o.id:
                        linked.append((fi, r, o, _LINKED))
                    elif o.tn[1] == 0:
                        consts.append((fi, r, o, _CONST))
                    else:
                        ranges.append((fi, r, o, _RANGE))
            if any(
                sl.types != _ALL_INVALID
                and not (uninit_ok and SPILL not in sl.types and ZERO not in sl.types)
                for sl in f.stack.values()
            ):
                stacks.append(fi)
        self.types = tuple(types)
        self.checks = tuple(consts + ranges + linked + others)
        self.stacks = tuple(stacks)
        self.pre_frame, self.pre_reg = 0, -1
        self.pre_tn: tuple[int, int] | None = None
        self.pre_umin, self.pre_umax = 0, 0
        if self.checks and self.checks[0][3] != _ANY:
            fi, r, o, how = self.checks[0]
            self.pre_frame, self.pre_reg = fi, r
            if how == _CONST:
                self.pre_tn = o.tn
            else:
                self.pre_umin, self.pre_umax = o.umin, o.umax


def covers_frames(
    fplan: FramesPlan, old: State, sprec: list[int], cur: State, uninit_ok: bool
) -> bool:
    """:func:`states_equal` (NOT_EXACT) for states of more than one frame without
    references, through the explored state's :class:`FramesPlan` (one id map for all
    frames, as the kernel's); the caller has checked that ``cur``'s callsites are
    ``fplan.sites``."""
    nfs = cur.frames
    checks = fplan.checks
    for fi, r, t in fplan.types:
        if nfs[fi].regs[r].t != t:
            return False
    idmap: IdMap | None = None
    for fi, r, o, how in checks:
        n = nfs[fi].regs[r]
        if how == _CONST:
            if n.tn != o.tn:  # a constant covers only itself
                if fplan.pre_reg != r or fplan.pre_frame != fi:  # the caller's next first
                    fplan.pre_frame, fplan.pre_reg, fplan.pre_tn = fi, r, o.tn
                return False
            continue
        if o is n and not o.id and not o.ref:
            continue
        if how == _RANGE or how == _LINKED:
            if not (
                o.smin <= n.smin
                and n.smax <= o.smax
                and o.umin <= n.umin
                and n.umax <= o.umax
                and o.s32min <= n.s32min
                and n.s32max <= o.s32max
                and o.u32min <= n.u32min
                and n.u32max <= o.u32max
                and T.contains(o.tn, n.tn)
            ):
                if fplan.pre_reg != r or fplan.pre_frame != fi:  # the caller's next first
                    fplan.pre_frame, fplan.pre_reg, fplan.pre_tn = fi, r, None
                    fplan.pre_umin, fplan.pre_umax = o.umin, o.umax
                return False
            if how == _RANGE:
                continue
            if idmap is None:
                idmap = IdMap()
            if not idmap.scalar_ids(o, n):
                return False
            continue
        if idmap is None:
            idmap = IdMap()
        if not regsafe(o, n, True, idmap, NOT_EXACT):
            return False
    if fplan.stacks:
        ofs = old.frames
        if idmap is None:
            idmap = IdMap()
        for fi in fplan.stacks:
            if not stacksafe(ofs[fi], nfs[fi], sprec[fi], idmap, NOT_EXACT, uninit_ok):
                return False
    return True
