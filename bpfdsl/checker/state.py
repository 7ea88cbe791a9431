"""Verifier state: call frames with registers and stack, and the pruning order.

A stack slot covers 8 bytes ``[fp - 8*(k+1), fp - 8*k)`` and records per byte whether it
is invalid (never written), misc (some scalar bytes), zero, or part of a spilled register
(kernel ``STACK_INVALID/MISC/ZERO/SPILL``).  :func:`subsumes` is the kernel's
``states_equal``/``regsafe``: if an already-verified state covers a new one, the new path
need not be walked again (the explored one was safe for every value it admits).
"""

from __future__ import annotations

from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T

INVALID, MISC, ZERO, SPILL = "i", "m", "z", "s"
MAX_STACK = 512


class Slot:
    """8 bytes of stack: ``types`` (8 chars, byte 0 = lowest address) and the spilled reg."""

    __slots__ = ("types", "spill")

    def __init__(self, types: str = INVALID * 8, spill: D.Reg | None = None):
        self.types = types
        self.spill = spill

    def __repr__(self) -> str:
        return f"Slot({self.types!r}, {self.spill!r})"


class Frame:
    """One function's registers r0..r10 and stack; ``callsite``: insn index of the call
    that made it (-1 for the main program); ``frameno``: depth (0 = main); ``r0_at``: insn
    index that last wrote r0 on this path (-1: none), for messages about the return value
    (not part of state equality)."""

    __slots__ = ("regs", "stack", "callsite", "frameno", "subprog", "r0_at")

    def __init__(self, regs, stack, callsite: int, frameno: int, subprog: int, r0_at: int = -1):
        self.regs = regs
        self.stack = stack
        self.callsite = callsite
        self.frameno = frameno
        self.subprog = subprog
        self.r0_at = r0_at

    def copy(self) -> Frame:
        f = Frame.__new__(Frame)
        f.regs, f.stack = self.regs.copy(), self.stack.copy()
        f.callsite, f.frameno, f.subprog, f.r0_at = (
            self.callsite,
            self.frameno,
            self.subprog,
            self.r0_at,
        )
        return f


class State:
    """Whole abstract machine state on one path: frames (last = current), acquired
    reference ids, and the pruning bookkeeping (``parent`` explored entry)."""

    __slots__ = ("frames", "refs", "parent", "trail")

    def __init__(self, frames: list[Frame], refs: tuple[int, ...] = (), parent=None, trail=None):
        self.frames = frames
        self.refs = refs
        self.parent = parent
        self.trail = trail  # branch decisions on this path: (insn index, taken, older trail)

    @property
    def cur(self) -> Frame:
        return self.frames[-1]

    @property
    def regs(self) -> list[D.Reg]:
        return self.frames[-1].regs

    def copy(self) -> State:
        fs = self.frames
        frames = [fs[0].copy()] if len(fs) == 1 else [f.copy() for f in fs]
        s = State.__new__(State)
        s.frames, s.refs, s.parent, s.trail = frames, self.refs, self.parent, self.trail
        return s

    def update_regs(self, fn) -> None:
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


def _scalar_within(old: D.Reg, new: D.Reg) -> bool:
    return (
        old.smin <= new.smin
        and new.smax <= old.smax
        and old.umin <= new.umin
        and new.umax <= old.umax
        and old.s32min <= new.s32min
        and new.s32max <= old.s32max
        and old.u32min <= new.u32min
        and new.u32max <= old.u32max
        and T.contains(old.tn, new.tn)
    )


def _ids_match(idmap: dict, old_id, new_id) -> bool:
    if not old_id and not new_id:
        return True
    if not old_id or not new_id:
        return False
    seen = idmap.get(old_id)
    if seen is None:
        idmap[old_id] = new_id
        return True
    return seen == new_id


def regsafe(old: D.Reg, new: D.Reg, idmap: dict, exact: bool) -> bool:
    """Whether every behaviour possible from ``new`` was already covered by ``old``."""
    if exact:
        return old == new
    if old.t == D.NOT_INIT:
        return True
    if old.t != new.t:
        return False
    if old.t == D.SCALAR:
        if old.id:
            # linked copies in the old state must be linked in the new one (check_scalar_ids)
            nid = new.id if new.id else ("fresh", id(new))
            if not _ids_match(idmap, ("s", old.id), nid):
                return False
        if old.tn == T.UNKNOWN and old.smin == D.S64_MIN and old.umax == D.M64:
            return True
        return _scalar_within(old, new)
    if old.off != new.off or old.map is not new.map:
        return False
    if not _scalar_within(old, new):
        return False
    if old.t in D.PACKET_TYPES:
        if new.rng < old.rng:
            return False
        return _ids_match(idmap, old.id, new.id)
    if old.t in (D.MAP_VALUE_OR_NULL, D.SOCKET_OR_NULL) or old.ref:
        return _ids_match(idmap, old.id, new.id) and _ids_match(idmap, -old.ref, -new.ref)
    return True


def _stacksafe(old: Frame, new: Frame, idmap: dict, exact: bool) -> bool:
    nstack = new.stack
    for k, os in old.stack.items():
        ns = nstack.get(k)
        if os is ns and (os.spill is None or (not os.spill.id and not os.spill.ref)):
            continue  # the same (immutable) slot, no id to map: safe
        ntypes = ns.types if ns is not None else INVALID * 8
        if exact:
            if ns is None or os.types != ns.types or os.spill != ns.spill:
                if not (ns is None and os.types == INVALID * 8):
                    return False
            continue
        if os.types == INVALID * 8:
            continue
        if os.spill is not None and SPILL in os.types:
            if ns is None or ns.spill is None or os.types != ntypes:
                # an old spilled unknown scalar is covered by any initialized bytes
                if os.spill.t == D.SCALAR and regsafe(os.spill, D.unknown(), idmap, False):
                    if INVALID not in "".join(
                        n for o, n in zip(os.types, ntypes, strict=True) if o != INVALID
                    ):
                        continue
                return False
            if not regsafe(os.spill, ns.spill, idmap, False):
                return False
            continue
        for o, n in zip(os.types, ntypes, strict=True):
            if o == INVALID:
                continue
            if n == INVALID:
                return False
            if o == ZERO and n != ZERO:
                return False
            if o == MISC and n == SPILL and ns is not None and ns.spill is not None:
                if ns.spill.t != D.SCALAR:
                    return False
    return True


def subsumes(old: State, new: State, live: list[frozenset[int]], exact: bool = False) -> bool:
    """``old`` covers ``new`` (kernel states_equal): same call chain, every live register and
    every stack byte of ``new`` within what ``old`` allowed.  ``live[i]`` gives the live
    registers of frame i (the current frame's set at the pruning insn)."""
    ofs, nfs = old.frames, new.frames
    if len(ofs) != len(nfs) or len(old.refs) != len(new.refs):
        return False
    idmap: dict = {}
    for fi in range(len(ofs)):
        of, nf = ofs[fi], nfs[fi]
        if of.callsite != nf.callsite:
            return False
        oregs, nregs = of.regs, nf.regs
        for r in live[fi]:
            o, n = oregs[r], nregs[r]
            if o is n and not o.id and not o.ref:
                continue  # the same (immutable) register, no id to map: regsafe is True
            if not regsafe(o, n, idmap, exact):
                return False
        if not _stacksafe(of, nf, idmap, exact):
            return False
    return True


def state_key(st: State, live: list[frozenset[int]]) -> tuple:
    """Hashable exact description of a state's live part (ids renumbered by first use):
    two states with equal keys behave identically from here on (infinite loop check)."""
    ids: dict = {}
    out = []
    for fi, f in enumerate(st.frames):
        regs = f.regs
        rk = []
        for r in sorted(live[fi]):
            rk.append(_reg_key(regs[r], ids))
        sk = []
        for k, s in sorted(f.stack.items()):
            if s.types != _ALL_INVALID:
                sk.append((k, s.types, _reg_key(s.spill, ids) if s.spill is not None else None))
        out.append((f.callsite, tuple(rk), tuple(sk)))
    return (tuple(out), st.refs)


_ALL_INVALID = INVALID * 8
_NOT_INIT_KEY = (0,)


def _reg_key(r: D.Reg, ids: dict) -> tuple:
    """One register's part of :func:`state_key` (its id renumbered through ``ids``)."""
    if r.t == D.NOT_INIT:
        return _NOT_INIT_KEY
    i = ids.setdefault(r.id, len(ids)) if r.id else 0
    m = r.map
    if not (isinstance(m, int) or m is None):
        m = id(m)
    return (
        r.t,
        r.off,
        r.tn,
        r.smin,
        r.smax,
        r.umin,
        r.umax,
        r.s32min,
        r.s32max,
        r.u32min,
        r.u32max,
        i,
        r.rng,
        m,
        r.ref,
    )
