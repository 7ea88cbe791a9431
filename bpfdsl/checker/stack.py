"""Stack accesses (kernel check_stack_read/write_fixed_off, check_stack_range_initialized).

The stack is 512 bytes below r10, accesses must be aligned to their size; slot-aligned
scalar stores are register spills of their size, pointers spill only whole (8 bytes);
reads of never-written bytes are allowed for privileged loaders (a warning here).
"""

from __future__ import annotations

from bpfdsl.abi.limits import BPF_MAX_VAR_OFF, MAX_BPF_STACK
from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.state import INVALID, MISC, SPILL, ZERO, Frame, Slot, State


def _tn(r: D.Reg) -> str:
    return T.fmt(r.tn)


def check_bounds(regno: int, r: D.Reg, base: int, size: int, write: bool, explain: str) -> None:
    """kernel check_stack_access_within_bounds: a ``size``-byte access (0: a zero-sized
    helper argument, which still needs a valid first byte) at ``r`` whose fixed offset is
    ``base`` must lie in the 512 bytes below r10, a variable offset be bounded; raises the
    kernel's message ("invalid read from stack R1 off=-4 size=8", "invalid variable-offset
    write to stack ...", "invalid unbounded variable-offset read from stack R1") for direct
    and helper (or global function) accesses alike."""
    kind = " write to" if write else " read from"
    if r.tn[1] == 0:
        lo = hi = base + D.s64(r.tn[0])
    else:
        if r.smax >= BPF_MAX_VAR_OFF or r.smin <= -BPF_MAX_VAR_OFF:
            raise Fault(
                "stack-bounds",
                f"invalid unbounded variable-offset{kind} stack R{regno}",
                "bound the index (`&` a mask or compare it) before adding it to the stack pointer",
                (regno,),
            )
        lo, hi = base + r.smin, base + r.smax
    last = hi + size - 1 if size > 0 else lo
    if -MAX_BPF_STACK <= lo <= -1 and -MAX_BPF_STACK <= last <= -1:
        return
    if r.tn[1] == 0:
        msg = f"invalid{kind} stack R{regno} off={lo} size={size}"
    else:
        msg = (
            f"invalid variable-offset{kind} stack R{regno} var_off={_tn(r)} off={base} size={size}"
        )
    raise Fault("stack-bounds", msg, explain, (regno,))


def note_depth(env: Env, frame: Frame, lowest: int) -> None:
    """Record how deep a function uses its stack (kernel subprog_info stack_depth) and how
    deep this path has accessed the frame's (kernel grow_stack_state: allocated_stack, in
    8-byte steps)."""
    d = env.stack_depth
    if -lowest > d.get(frame.subprog, 0):
        d[frame.subprog] = -lowest
    if -lowest > frame.allocated:
        frame.allocated = (-lowest + 7) & ~7


def stack_access(
    env: Env, st: State, regno: int, r: D.Reg, off: int, size: int, write: bool, value: D.Reg | None
) -> D.Reg | None:
    """Check (and for writes apply) a ``size``-byte access at ``r + off`` on a stack."""
    frame = st.frames[r.map] if isinstance(r.map, int) and r.map < len(st.frames) else st.cur
    base = r.off + off
    note_depth(env, frame, base + (D.s64(r.tn[0]) if r.tn[1] == 0 else r.smin))
    if r.tn[1] == 0:
        full = base + D.s64(r.tn[0])
        if full % size:
            raise Fault(
                "misaligned-stack",
                f"misaligned stack access off {_tn(r)}+{r.off}+{off} size {size}",
                f"stack accesses must be aligned to their size ({size} bytes); "
                "lay out stack variables with natural alignment",
                (regno,),
            )
        check_bounds(
            regno, r, base, size, write,
            f"the stack is {MAX_BPF_STACK} bytes below r10: offsets -{MAX_BPF_STACK}..-1 only",
        )  # fmt: skip
        k = (-full - 1) // 8
        fr = frame.frameno
        if write:
            if full % 8 == 0 and size == 8:  # kernel: only whole-slot writes kill a slot
                env.live_writes.append((fr, k))
            kind = _stack_write(frame, full, size, value)
            if kind == SPILL:  # a register spill: the jump history records its slot
                env.hist_slot = (fr, k)
            elif kind == ZERO and value is not None:
                env.stored_zero = True  # kernel: the zero stored must stay exact
            return None
        env.live_reads.append((fr, k))
        v, fill = _stack_read(env, regno, frame, full, size)
        if fill:
            env.hist_slot = (fr, k)
        return v
    # variable offset
    if not T.is_aligned(T.add(r.tn, T.const(base)), size):  # kernel: alignment first
        raise Fault(
            "misaligned-stack",
            f"misaligned stack access off {_tn(r)}+{r.off}+{off} size {size}",
            "stack accesses must be aligned to their size",
            (regno,),
        )
    check_bounds(
        regno, r, base, size, write,
        "bound the index so that every possible address stays inside the 512-byte stack",
    )  # fmt: skip
    lo, hi = base + r.smin, base + r.smax
    if write:
        for a in range(lo, hi + size):
            _set_byte(frame, a, MISC)
        return None
    _mark_read(env, frame, lo, hi + size)
    for a in range(lo, hi + size):
        if _byte(frame, a) == INVALID and not env.privileged:
            raise Fault(
                "uninit-stack",
                f"invalid variable-offset read from stack R{regno} var_off={_tn(r)} off={base} size={size}",
                "initialize the stack bytes before reading them",
                (regno,),
            )
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


def _mark_read(env: Env, frame: Frame, lo: int, end: int) -> None:
    """Stack bytes [lo, end) are read: their slots are live before this insn."""
    for k in range((-end) // 8, (-lo - 1) // 8 + 1):
        env.live_reads.append((frame.frameno, k))


def _byte(frame: Frame, a: int) -> str:
    k, j = (-a - 1) // 8, a % 8
    s = frame.stack.get(k)
    return s.types[j] if s else INVALID


def _set_byte(frame: Frame, a: int, typ: str) -> None:
    k, j = (-a - 1) // 8, a % 8
    s = frame.stack.get(k) or Slot()
    types = s.types[:j] + typ + s.types[j + 1 :]
    spill = s.spill if SPILL in types else None
    if spill is not None and types != SPILL * 8 and not types.startswith(SPILL):
        spill = None
    frame.stack[k] = Slot(types, spill)


def coerce(r: D.Reg, size: int) -> D.Reg:
    """Truncate a scalar to its low ``size`` bytes (kernel coerce_reg_to_size)."""
    if size >= 8 or r.t != D.SCALAR:
        return r
    if r.umax >> (8 * size) == 0:
        return r
    return D.sync(D.Reg(D.SCALAR, tn=T.cast(r.tn, size), b=D.UNKNOWN_BOUNDS))


_SPILL_TO_MISC = str.maketrans(SPILL, MISC)  # slot byte types: a spill's bytes become misc


def _stack_write(frame: Frame, full: int, size: int, value: D.Reg | None) -> str:
    """check_stack_write_fixed_off: slot-aligned scalar stores (and BPF_ST immediates) are
    register spills of ``size`` bytes; pointers spill only whole; the rest is misc/zero.
    Returns what the bytes became: SPILL (a register spill), ZERO or MISC."""
    k, j = (-full - 1) // 8, full % 8
    old = frame.stack.get(k) or Slot()
    if value is not None and value.t not in (D.SCALAR, D.NOT_INIT):
        if size != 8:
            raise Fault(
                "spill-size",
                "invalid size of register spill",
                "pointers are 8 bytes; save them on the stack with an 8-byte store",
            )
        frame.stack[k] = Slot(SPILL * 8, value)
        return SPILL
    if j == 0 and value is not None and value.t == D.SCALAR:
        rest = old.types[size:].translate(_SPILL_TO_MISC)  # zero, invalid kept; rest misc
        frame.stack[k] = Slot(SPILL * size + rest, value)
        return SPILL
    zero = value is not None and value.is_const and value.tn[0] == 0
    types = old.types.replace(SPILL, MISC)
    kind = ZERO if zero else MISC
    frame.stack[k] = Slot(types[:j] + kind * size + types[j + size :], None)
    return kind


def _stack_read(env: Env, regno: int, frame: Frame, full: int, size: int) -> tuple[D.Reg, bool]:
    """check_stack_read_fixed_off: the loaded value, and whether the load restores a
    spilled register (a fill, recorded in the jump history)."""
    k, j = (-full - 1) // 8, full % 8
    s = frame.stack.get(k) or Slot()
    part = s.types[j : j + size]
    sp = s.spill if (s.spill is not None and s.types[0] == SPILL) else None
    if sp is not None:
        nspill = len(s.types) - len(s.types.lstrip(SPILL))
        if sp.t != D.SCALAR:
            if size != 8 or nspill != 8:
                raise Fault(
                    "partial-fill",
                    "invalid size of register fill",
                    "a pointer saved on the stack must be reloaded with an 8-byte load",
                    (regno,),
                )
            return sp, True
        if j == 0 and size <= nspill:
            return coerce(sp, size), True
    if INVALID in part:
        if not env.privileged:
            raise Fault(
                "uninit-stack",
                f"invalid read from stack off {full}+{part.index(INVALID)} size {size}",
                "this stack memory was never written; initialize it before reading",
                (regno,),
            )
        env.warn(
            "uninit-stack",
            f"read of uninitialized stack off {full} size {size}",
            "the kernel allows it for privileged loaders but the value is garbage; "
            "initialize the variable",
            (regno,),
        )
    elif part == SPILL * size and sp is not None and sp.is_const and sp.tn[0] == 0:
        return D.known(0), True
    elif part == ZERO * size:
        return D.known(0), False
    return (D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)), False


def stack_range_readable(env: Env, st: State, regno: int, size: int, what: str) -> None:
    """Helper memory argument on the stack: ``size`` bytes from ``regno`` must be inside the
    stack and (unprivileged) initialized (kernel check_stack_range_initialized)."""
    r = st.regs[regno]
    frame = st.frames[r.map] if isinstance(r.map, int) and r.map < len(st.frames) else st.cur
    lo = r.off + (r.smin if r.tn[1] else D.s64(r.tn[0]))
    hi = r.off + (r.smax if r.tn[1] else D.s64(r.tn[0]))
    note_depth(env, frame, lo)
    check_bounds(regno, r, r.off, size, False, f"the {what} must lie inside the 512-byte stack")
    _mark_read(env, frame, lo, hi + size)
    for a in range(lo, hi + size):
        b = _byte(frame, a)
        if b == INVALID:
            if not env.privileged:
                raise Fault(
                    "uninit-stack",
                    f"invalid read from stack R{regno} off {lo}+{a - lo} size {size}",
                    f"initialize all {size} bytes of the {what} before the call",
                    (regno,),
                )
            env.warn(
                "uninit-stack",
                f"helper reads uninitialized stack R{regno} off {a} ({what})",
                f"initialize all {size} bytes of the {what} before the call",
                (regno,),
            )
            return
        if b == SPILL:
            k = (-a - 1) // 8
            sp = frame.stack[k].spill
            if sp is not None and sp.t != D.SCALAR and not env.privileged:
                raise Fault("leak", f"R{regno} leaks addr into helper", "", (regno,))


def stack_range_written(st: State, regno: int, size: int) -> None:
    """A helper writes ``size`` bytes at ``regno`` on the stack: mark them initialized."""
    r = st.regs[regno]
    frame = st.frames[r.map] if isinstance(r.map, int) and r.map < len(st.frames) else st.cur
    lo = r.off + (r.smin if r.tn[1] else D.s64(r.tn[0]))
    hi = r.off + (r.smax if r.tn[1] else D.s64(r.tn[0]))
    for a in range(lo, min(hi + size, 0)):
        _set_byte(frame, a, MISC)
