"""BPF-to-BPF calls, global functions, bpf_loop callbacks and tail calls (the kernel's
check_func_call, btf_check_subprog_call, set_loop_callback_state, prepare_func_exit and
check_max_stack_depth in kernel/bpf/verifier.c).

* A call of a **static** subprogram pushes a frame: r1-r5 are its arguments as the caller
  holds them (pointers keep their type and range), r10 a new stack; at ``exit`` r0 goes
  back, r1-r5 become unreadable, the caller's r6-r9 and stack are as they were.
* A call of a **global** function (BTF FUNC linkage global) does not enter it: the
  arguments are checked against its BTF prototype (a scalar, the context, or memory of the
  pointed-to type's size), r0 becomes an unknown scalar.  The function itself is verified
  once, on its own (:func:`entry_regs`), with every pointer argument ``mem_or_null``.
* ``bpf_loop(n, callback, ctx, flags)`` continues after the call (no iteration) and also
  enters the callback in a new frame with r1 = the index (unknown) and r2 = the caller's
  r3; at the callback's ``exit``, r0 must be 0 or 1, the path continues after the call,
  and the callback is entered again from the caller state its changes made, widened where
  it differs from the earlier visit (as the kernel widens imprecise scalars), until an
  earlier visit covers it.
* :func:`check_call_graph` is the kernel's static walk of the call graph: at most 8
  frames, 512 bytes of stack on every call chain (each frame rounded up to 16 bytes, the
  JIT's rule), and a subprogram that tail-calls may only be reached by callers with less
  than 256 bytes of stack between them.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, Btf, BtfFormatError, Kind
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.checker import domain as D
from bpfdsl.checker.calls import check_mem
from bpfdsl.checker.cfg import Cfg
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.state import INVALID, MISC, Frame, Slot, State, subsumes

MAX_CALL_FRAMES = 8  # kernel MAX_CALL_FRAMES
MAX_BPF_STACK = 512  # bytes, combined over a call chain
TAIL_CALL_STACK = 256  # bytes of caller stack above a subprogram that tail-calls
BPF_FUNC_LOOP = HELPERS["loop"].id
BPF_FUNC_TAIL_CALL = HELPERS["tail_call"].id
_CALLEE_SAVED = frozenset({6, 7, 8, 9})


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One argument of a global function, as the kernel reads its BTF prototype
    (btf_prepare_func_args): ``kind`` ``"scalar"`` (an int or enum), ``"ctx"`` (a pointer
    to the program type's context struct) or ``"mem"`` (a pointer to ``size`` bytes)."""

    kind: str
    size: int = 0
    name: str = ""


@dataclass(frozen=True, slots=True)
class SubprogInfo:
    """A subprogram of a program: ``name``, ``is_global`` (BTF FUNC linkage global: the
    kernel verifies it on its own), ``args`` of a global one (None when its prototype has
    an argument the kernel cannot check, ``problem`` says which) and whether it returns a
    scalar (the kernel verifies only global functions that do)."""

    name: str
    is_global: bool
    args: tuple[ArgSpec, ...] | None = ()
    problem: str = ""
    returns_scalar: bool = True


def subprog_infos(btf: Btf | None, func_info, index_of_slot, ctx: str | None) -> dict:
    """Subprogram start index -> :class:`SubprogInfo` from ``func_info`` (records with
    ``insn_off`` in slots and a BTF FUNC ``type_id``) of a program whose context struct is
    named ``ctx``; empty without BTF (every subprogram is then static)."""
    out: dict[int, SubprogInfo] = {}
    if btf is None:
        return out
    for rec in func_info:
        i = index_of_slot.get(rec.insn_off)
        if i is None or i == 0:
            continue
        try:
            fn = btf[rec.type_id]
            if fn.kind != Kind.FUNC:
                continue
            out[i] = _info(btf, fn, ctx)
        except BtfFormatError as e:
            out[i] = SubprogInfo(rec.name, True, None, f"its BTF is unreadable: {e}")
    return out


def _info(btf: Btf, fn, ctx: str | None) -> SubprogInfo:
    if fn.linkage != BTF_FUNC_GLOBAL:
        return SubprogInfo(fn.name, False)
    proto = btf[fn.type]
    ret = btf.resolve(proto.type) if proto.type else None
    returns_scalar = ret is not None and ret.kind in (Kind.INT, Kind.ENUM, Kind.ENUM64)
    args = []
    for k, m in enumerate(proto.members):
        t = btf.resolve(m.type) if m.type else None
        if t is None:
            return SubprogInfo(fn.name, True, None, f"argument {k} has no type", returns_scalar)
        if t.kind in (Kind.INT, Kind.ENUM, Kind.ENUM64):
            args.append(ArgSpec("scalar", name=m.name))
            continue
        if t.kind != Kind.PTR:
            why = f"argument {k} ('{m.name}') is a {t.kind.name.lower()}, passed by value"
            return SubprogInfo(fn.name, True, None, why, returns_scalar)
        target = btf.resolve(t.type) if t.type else None
        if target is not None and target.kind == Kind.STRUCT and ctx and target.name == ctx:
            args.append(ArgSpec("ctx", name=m.name))
            continue
        try:
            size = btf.size_of(t.type) if t.type else 0
        except BtfFormatError:
            size = 0
        if size <= 0:
            why = f"argument {k} ('{m.name}') points to a type of unknown size"
            return SubprogInfo(fn.name, True, None, why, returns_scalar)
        args.append(ArgSpec("mem", size, m.name))
    return SubprogInfo(fn.name, True, tuple(args), "", returns_scalar)


# ---- calls ----------------------------------------------------------------------------


def _frames_fault(n: int) -> Fault:
    return Fault(
        "call-depth",
        f"the call stack of {n} frames is too deep !",
        "at most 8 nested BPF-to-BPF calls (program, subprograms and loop callbacks)",
    )


def enter_call(env: Env, cfg: Cfg, st: State, i: int):
    """A ``call pc+N`` (BPF_PSEUDO_CALL): a frame for a static subprogram, an argument
    check for a global one.  Returns the analyzer's successor list (None: next insn)."""
    target = cfg.call_target[i]  # the subprogram starting at the call's destination
    info = env.subprogs.get(target)
    if info is not None and info.is_global:
        _check_global_args(env, st, info)
        regs = st.regs
        for r in range(1, 6):
            regs[r] = D.NOT_INIT_REG
        regs[0] = D.unknown()
        st.cur.r0_at = i
        return None
    if len(st.frames) >= MAX_CALL_FRAMES:
        raise _frames_fault(len(st.frames) + 1)
    regs = [D.NOT_INIT_REG] * 11
    for r in range(1, 6):
        regs[r] = st.regs[r]
    regs[10] = D.ptr(D.STACK, map=len(st.frames))
    st.frames.append(Frame(regs, {}, i, len(st.frames), target))
    return [(target, st)]


def _check_global_args(env: Env, st: State, info: SubprogInfo) -> None:
    """btf_check_func_arg_match: each register against the global function's prototype."""
    if info.args is None:
        raise Fault(
            "global-args",
            f"Caller passes invalid args into func ('{info.name}'): {info.problem}",
            "a global function takes integers, the context, or pointers to sized types",
        )
    if not info.returns_scalar:
        raise Fault(
            "global-return",
            f"Global function {info.name}() doesn't return scalar. Only those are supported.",
            "give the global function an integer return type",
        )
    for k, a in enumerate(info.args):
        regno = k + 1
        r = st.regs[regno]
        if a.kind == "scalar":
            if r.t != D.SCALAR:
                raise Fault(
                    "global-args",
                    f"R{regno} is not a scalar",
                    f"argument {k} ('{a.name}') of global function {info.name}() is an "
                    "integer; pass a number",
                    (regno,),
                )
        elif a.kind == "ctx":
            if r.t != D.CTX or r.off or r.tn != (0, 0):
                raise Fault(
                    "global-args",
                    f"arg#{k} expects pointer to ctx",
                    f"pass the program's unmodified context to {info.name}()",
                    (regno,),
                )
        elif not (r.t == D.SCALAR and r.is_const and r.value == 0):  # NULL is fine
            saved = r
            if r.t in D.NULLABLE:  # checked as if not NULL (kernel check_mem_reg)
                st.regs[regno] = r.replace(t=D.NULLABLE[r.t])
            try:
                check_mem(env, st, regno, a.size, False, f"argument '{a.name}'")
            finally:
                st.regs[regno] = saved


def entry_regs(env: Env, info: SubprogInfo) -> list[D.Reg]:
    """Registers at the start of a global function verified on its own: r1-r5 from its
    prototype (scalars unknown, pointers ``mem_or_null`` of the type's size), r10 a stack."""
    if info.args is None:
        raise Fault(
            "global-args",
            f"global function {info.name}(): {info.problem}",
            "a global function takes integers, the context, or pointers to sized types",
        )
    regs = [D.NOT_INIT_REG] * 11
    for k, a in enumerate(info.args[:5]):
        if a.kind == "scalar":
            regs[k + 1] = D.unknown()
        elif a.kind == "ctx":
            regs[k + 1] = D.ptr(D.CTX)
        else:
            regs[k + 1] = D.Reg(D.MEM_OR_NULL, id=env.new_id(), rng=a.size)
    regs[10] = D.ptr(D.STACK, map=0)
    return regs


def check_global_return(r0: D.Reg) -> None:
    """At the exit of a global function r0 must be a scalar (kernel check_return_code)."""
    if r0.t != D.SCALAR:
        raise Fault(
            "ret-type",
            f"At subprogram exit the register R0 is not a scalar value ({D.TYPE_NAMES[r0.t]})",
            "a global function returns a number",
            (0,),
        )


# ---- bpf_loop ---------------------------------------------------------------------------


def loop_call(env: Env, cfg: Cfg, st: State, i: int):
    """``call bpf_loop``: check its arguments, then two ways on: after the call with r0 =
    an unknown count (the callback never ran, or its visits are explored on the other
    way), and into the callback (set_loop_callback_state)."""
    regs = st.regs
    for regno in range(1, 5):
        if regs[regno].t == D.NOT_INIT:
            raise Fault("uninit-reg", f"R{regno} !read_ok",
                        f"argument {regno} of bpf_loop is not set", (regno,))  # fmt: skip
    f = regs[2]
    if f.t != D.FUNC:
        raise Fault(
            "helper-arg",
            f"R2 type={D.TYPE_NAMES[f.t]} expected=func",
            "the callback of bpf_loop is a static function's address (ld_imm64)",
            (2,),
        )
    target = f.off
    info = env.subprogs.get(target)
    if info is not None and info.is_global:
        raise Fault("callback-global", "callback function not static",
                    f"{info.name}() is global: bpf_loop calls only static functions")  # fmt: skip
    c = regs[3]
    if not (c.t == D.STACK or (c.t == D.SCALAR and c.is_const and c.value == 0)):
        raise Fault(
            "helper-arg",
            f"R3 type={D.TYPE_NAMES[c.t]} expected=fp",
            "the callback context of bpf_loop is a pointer to the caller's stack, or NULL",
            (3,),
        )
    if len(st.frames) >= MAX_CALL_FRAMES:
        raise _frames_fault(len(st.frames) + 1)
    env.callbacks.setdefault(i, []).append(_caller_frames(st))
    after = st.copy()
    _after_loop(after.cur, i)
    _enter_callback(st, i, target, st.regs[3])
    return [(i + 1, after), (target, st)]


def _caller_frames(st: State) -> State:
    """A copy of ``st`` as the callback's caller state to compare later visits with."""
    snap = st.copy()
    snap.parent = snap.trail = None
    return snap


def _after_loop(frame: Frame, i: int) -> None:
    regs = frame.regs
    for r in range(1, 6):
        regs[r] = D.NOT_INIT_REG
    regs[0] = D.unknown()  # the number of iterations, or a negative errno
    frame.r0_at = i


def _enter_callback(st: State, i: int, target: int, cb_ctx: D.Reg) -> None:
    regs = [D.NOT_INIT_REG] * 11
    regs[1] = D.unknown()  # the index: u64 in the kernel's bpf_loop
    regs[2] = cb_ctx
    regs[10] = D.ptr(D.STACK, map=len(st.frames))
    st.frames.append(Frame(regs, {}, i, len(st.frames), target))


def is_callback_frame(cfg: Cfg, frame: Frame) -> bool:
    x = cfg.insns[frame.callsite]
    return x.is_helper_call and x.imm == BPF_FUNC_LOOP


def leave(env: Env, cfg: Cfg, st: State, i: int):
    """``exit`` of a subprogram or callback frame: back to the caller (prepare_func_exit)."""
    r0 = st.regs[0]
    callee = st.frames[-1]
    if is_callback_frame(cfg, callee):
        return _leave_callback(env, cfg, st, i, r0)
    st.frames.pop()
    caller = st.cur
    if r0.t == D.STACK and r0.map == callee.frameno:
        raise Fault("ret-stack", "cannot return stack pointer to the caller", "", (0,))
    caller.regs[0] = r0
    caller.r0_at = callee.r0_at if callee.r0_at >= 0 else i
    for r in range(1, 6):
        caller.regs[r] = D.NOT_INIT_REG
    return [(callee.callsite + 1, st)]


def _leave_callback(env: Env, cfg: Cfg, st: State, i: int, r0: D.Reg):
    if r0.t != D.SCALAR:
        raise Fault(
            "callback-ret",
            f"At callback return the register R0 is not a known value ({D.TYPE_NAMES[r0.t]})",
            "a bpf_loop callback returns 0 (go on) or 1 (stop)",
            (0,),
        )
    if r0.smin < 0 or r0.umax > 1:
        raise Fault(
            "callback-ret",
            f"At callback return the register R0 has smin={r0.smin} smax={r0.smax} "
            "should have been in [0, 1]",
            "a bpf_loop callback returns 0 (go on) or 1 (stop)",
            (0,),
        )
    callee = st.frames.pop()
    site, target = callee.callsite, callee.subprog
    visits = env.callbacks.setdefault(site, [])
    live = [_CALLEE_SAVED] * len(st.frames)
    covered = any(subsumes(v, st, live) for v in visits if len(v.frames) == len(st.frames))
    again = None
    if not covered:
        base = next((v for v in reversed(visits) if len(v.frames) == len(st.frames)), None)
        wide = _widen(base, st) if base is not None else _caller_frames(st)
        visits.append(wide)
        again = wide.copy()
        # a fresh walk, not below this path's states: the visits differ by their number
        # (the kernel's callback_unroll_depth), so an equal state is no endless loop
        again.parent, again.trail = None, st.trail
        _enter_callback(again, site, target, again.regs[3])
    _after_loop(st.cur, site)
    out = [(site + 1, st)]
    if again is not None:
        out.append((target, again))
    return out


def _widen(old: State, new: State) -> State:
    """``old`` (a callback visit's caller frames) with every callee-saved register and
    stack slot that ``new`` holds differently made unknown: scalars become unknown
    scalars, other differences unreadable (kernel widen_imprecise_scalars, for every
    scalar: the checker keeps no precision marks)."""
    out = _caller_frames(old)
    for of, nf in zip(out.frames, new.frames, strict=True):
        for r in _CALLEE_SAVED:
            a, b = of.regs[r], nf.regs[r]
            if a != b:
                both = a.t == D.SCALAR and b.t == D.SCALAR
                of.regs[r] = D.unknown() if both else D.NOT_INIT_REG
        for k in set(of.stack) | set(nf.stack):
            a, b = of.stack.get(k), nf.stack.get(k)
            if a is not None and b is not None and a.types == b.types and a.spill == b.spill:
                continue
            of.stack[k] = _join_slot(a, b)
    return out


def _join_slot(a: Slot | None, b: Slot | None) -> Slot:
    ta = a.types if a is not None else INVALID * 8
    tb = b.types if b is not None else INVALID * 8
    ptr = any(s is not None and s.spill is not None and s.spill.t != D.SCALAR for s in (a, b))
    types = "".join(
        INVALID if (x == INVALID or y == INVALID or ptr) else MISC
        for x, y in zip(ta, tb, strict=True)
    )
    return Slot(types, None)


# ---- the call graph (check_max_stack_depth) -----------------------------------------------


def _rounded(depth: int) -> int:
    return (depth + 15) & ~15  # round_up_stack_depth with a JIT


def check_call_graph(env: Env, cfg: Cfg):
    """Every call chain from the program's start (calls and callback references alike)
    has at most 8 frames and 512 bytes of stack; a subprogram that tail-calls is entered
    with less than 256 bytes of its callers' stack.  Returns the analyzer's fault tuple
    (index, Fault, state text, regs) or None."""
    edges: dict[int, list[tuple[int, int]]] = {}
    for i, t in [*cfg.call_target.items(), *cfg.func_refs.items()]:
        edges.setdefault(cfg.subprog_of[i], []).append((i, t))
    tail_calls = {
        cfg.subprog_of[i]
        for i, x in enumerate(cfg.insns)
        if x.is_helper_call and x.imm == BPF_FUNC_TAIL_CALL
    }

    def fault(at: int, f: Fault):
        return (at, f, "", {})

    todo: list[tuple[int, int, int, int, tuple[int, ...]]] = [
        (0, 0, 1, 0, (0,))
    ]  # (subprog, stack above it, frames, call insn, chain)
    while todo:
        sp, above, frames, at, chain = todo.pop()
        if frames > MAX_CALL_FRAMES:
            return fault(at, _frames_fault(frames - 1))
        if sp and sp in tail_calls and above >= TAIL_CALL_STACK:
            return fault(
                at,
                Fault(
                    "tail-call-stack",
                    f"tail_calls are not allowed when call stack of previous frames is "
                    f"{above} bytes. Too large",
                    "a subprogram that tail-calls may be called with less than 256 bytes "
                    "of stack in its callers",
                ),
            )
        depth = above + _rounded(env.stack_depth.get(sp, 0))
        if depth > MAX_BPF_STACK:
            return fault(
                at,
                Fault(
                    "stack-depth",
                    f"combined stack size of {frames} calls is {depth}. Too large",
                    "the functions on this call chain use more than 512 bytes of stack together",
                ),
            )
        for i, t in edges.get(sp, []):
            if t not in chain:
                todo.append((t, depth, frames + 1, i, (*chain, t)))
    return None
