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
* ``bpf_loop(n, callback, ctx, flags)`` as the kernel 6.x verifies it (push_callback_call):
  the path goes on after the call, and a visit of the callback is pushed, in a new frame
  with r1 = the index (unknown) and r2 = the caller's r3; at the callback's ``exit`` r0
  (marked precise) must be 0 or 1 and the path goes back to the call, with the caller's
  imprecise scalars that changed since the checkpoint there widened to unknown, and the
  call pushes the next visit -- at most ``umax(r1)`` of them -- until the checkpoint at
  the call covers the returning state (compared by range, not only by type).
* A subprogram **changes packet data** (kernel 6.13+ ``bpf_subprog_info.changes_pkt_data``,
  set by check_cfg's visit_insn: mark_subprog_changes_pkt_data, merge_callee_effects) when
  it calls a helper for which bpf_helper_changes_pkt_data() holds, a pkt-changing kfunc
  or ``bpf_tail_call`` (the tail-called program may resize; since 6.18 the tail call does
  not invalidate packet pointers where it returns), or calls (or takes the address of) a
  subprogram that does.  A call of such a global function invalidates every packet
  pointer of the caller (check_func_call: clear_all_pkt_pointers), so does the return
  from such a static one (:func:`changes_pkt_data`, :func:`enter_call`, :func:`leave`).
* :func:`check_call_graph` is the kernel's static walk of the call graph: at most 8
  frames, 512 bytes of stack on every call chain (each frame rounded up to 16 bytes, the
  JIT's rule), and a subprogram that tail-calls may only be reached by callers with less
  than 256 bytes of stack between them (the rules: :mod:`bpfdsl.abi.stack`, which the
  back end's located ``stack-limit`` error applies too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, Btf, BtfFormatError, BtfType, Kind
from bpfdsl.abi.helpers import BPF_FUNC_TAIL_CALL, HELPERS_BY_ID
from bpfdsl.abi.kfuncs import PKT_CHANGING as PKT_CHANGING_KFUNCS
from bpfdsl.abi.limits import MAX_CALL_FRAMES
from bpfdsl.abi.opcodes import BPF_PSEUDO_KFUNC_CALL
from bpfdsl.abi.stack import Rule, Subprog, check_max_stack_depth, has_tail_call
from bpfdsl.checker import domain as D
from bpfdsl.checker.calls import UNMODELLED, check_mem
from bpfdsl.checker.cfg import Cfg
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.stack import stack_range_written
from bpfdsl.checker.state import SPILL, Frame, IdMap, Slot, State, regs_exact

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.obj.spec import FuncRecord

# A fault as the analyzer reports it: (index, Fault, state text, register number -> text).
FaultAt = tuple[int, Fault, str, dict[int, str]]


@dataclass(frozen=True, slots=True)
class ArgSpec:
    """One argument of a global function, as the kernel reads its BTF prototype and its
    ``arg:`` decl tags (btf_prepare_func_args): ``kind`` ``"scalar"`` (an int or enum,
    ARG_ANYTHING), ``"ctx"`` (a pointer to the program type's context struct, or any
    pointer tagged ``arg:ctx``: ARG_PTR_TO_CTX), ``"mem"`` (a pointer to ``size`` bytes:
    ARG_PTR_TO_MEM, NULL allowed unless tagged ``arg:nonnull``, ``nullable`` False),
    ``"dynptr"`` (``struct bpf_dynptr *``: ARG_PTR_TO_DYNPTR | MEM_RDONLY), ``"arena"``
    (tagged ``arg:arena``: ARG_PTR_TO_ARENA, a scalar for the checker) or ``"trusted"``
    (tagged ``arg:trusted``: a trusted kernel object of BTF type ``btf_name``, NULL allowed
    with ``arg:nullable``)."""

    kind: str
    size: int = 0
    name: str = ""
    nullable: bool = True
    btf_name: str = ""


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


# the ``arg:`` decl tags btf_prepare_func_args knows (Linux 6.18; include/linux/bpf.h ARG_TAG_*)
ARG_TAGS: frozenset[str] = frozenset(
    {"ctx", "trusted", "untrusted", "nonnull", "nullable", "arena"}
)


def subprog_infos(
    btf: Btf | None,
    func_info: Sequence[FuncRecord],
    index_of_slot: dict[int, int],
    ctx: str | None,
) -> dict[int, SubprogInfo]:
    """Subprogram start index -> :class:`SubprogInfo` from ``func_info`` (records with
    ``insn_off`` in slots and a BTF FUNC ``type_id``; ``index_of_slot``: slot -> list
    index, abi.insn.index_by_slot) of a program whose context struct is named ``ctx``;
    empty without BTF (every subprogram is then static)."""
    out: dict[int, SubprogInfo] = {}
    if btf is None:
        return out
    tags: dict[tuple[int, int], list[str]] = {}  # (FUNC id, argument) -> its arg: tags
    for t in btf.types:
        if t.kind == Kind.DECL_TAG and t.name.startswith("arg:"):
            tags.setdefault((t.type, t.component_idx), []).append(t.name[4:])
    for rec in func_info:
        i = index_of_slot.get(rec.insn_off)
        if i is None or i == 0:
            continue
        try:
            fn = btf[rec.type_id]
            if fn.kind != Kind.FUNC:
                continue
            out[i] = _info(btf, fn, ctx, tags)
        except BtfFormatError as e:
            out[i] = SubprogInfo(rec.name, True, None, f"its BTF is unreadable: {e}")
    return out


def _info(
    btf: Btf, fn: BtfType, ctx: str | None, tags: dict[tuple[int, int], list[str]]
) -> SubprogInfo:
    """btf_prepare_func_args for one function (a static one's tags are not looked at: the
    kernel ignores its failure for a static function)."""
    if fn.linkage != BTF_FUNC_GLOBAL:
        return SubprogInfo(fn.name, False)
    proto = btf[fn.type]
    ret = btf.resolve(proto.type) if proto.type else None
    returns_scalar = ret is not None and ret.kind in (Kind.INT, Kind.ENUM, Kind.ENUM64)
    args: list[ArgSpec] = []

    def bad(why: str) -> SubprogInfo:
        return SubprogInfo(fn.name, True, None, why, returns_scalar)

    for k, m in enumerate(proto.members):
        arg_tags = set(tags.get((fn.id, k), ()))
        unknown = arg_tags - ARG_TAGS
        if unknown:
            return bad(f"arg#{k} has unsupported set of tags")
        t = btf.resolve(m.type) if m.type else None
        if t is None:
            return bad(f"argument {k} has no type")
        if t.kind != Kind.PTR:
            if arg_tags:
                return bad(f"arg#{k} has pointer tag, but is not a pointer type")
            if t.kind in (Kind.INT, Kind.ENUM, Kind.ENUM64):
                args.append(ArgSpec("scalar", name=m.name))
                continue
            return bad(f"argument {k} ('{m.name}') is a {t.kind.name.lower()}, passed by value")
        target = btf.resolve(t.type) if t.type else None
        is_ctx = (
            target is not None and target.kind == Kind.STRUCT and bool(ctx) and target.name == ctx
        )
        if "ctx" in arg_tags or is_ctx:
            if arg_tags - {"ctx"}:
                return bad(f"arg#{k} has invalid combination of tags")
            if "ctx" in arg_tags and target is not None and not is_ctx:
                # btf_validate_prog_ctx_type: void * or the program type's context struct
                return bad(f"arg#{k} should be `struct {ctx} *`")
            args.append(ArgSpec("ctx", name=m.name))
            continue
        if target is not None and target.kind == Kind.STRUCT and target.name == "bpf_dynptr":
            if arg_tags:
                return bad(f"arg#{k} has invalid combination of tags")
            args.append(ArgSpec("dynptr", 16, m.name))
            continue
        if "trusted" in arg_tags:
            if "nonnull" in arg_tags:
                return bad(f"arg#{k} has invalid combination of tags")
            if target is None or target.kind not in (Kind.STRUCT, Kind.UNION):
                what = "FWD" if target is not None and target.kind == Kind.FWD else "void"
                tname = target.name if target is not None else ""
                return bad(f"arg#{k} reference type('{what} {tname}') has no matches")
            args.append(ArgSpec("trusted", name=m.name, nullable="nullable" in arg_tags,
                                btf_name=target.name))  # fmt: skip
            continue
        if "untrusted" in arg_tags:
            return bad(f"cannot check: arg#{k} is tagged arg:untrusted (a kernel object "
                       "read with probes), which bpfdsl check does not model")  # fmt: skip
        if "arena" in arg_tags:
            if arg_tags - {"arena"}:
                return bad(f"arg#{k} arena cannot be combined with any other tags")
            args.append(ArgSpec("arena", name=m.name))
            continue
        if "nullable" in arg_tags:
            return bad(f"arg#{k} has invalid combination of tags")
        try:
            size = btf.size_of(t.type) if t.type else 0
        except BtfFormatError:
            size = 0
        if size <= 0:
            return bad(f"argument {k} ('{m.name}') points to a type of unknown size")
        args.append(ArgSpec("mem", size, m.name, nullable="nonnull" not in arg_tags))
    return SubprogInfo(fn.name, True, tuple(args), "", returns_scalar)


# ---- changes_pkt_data -------------------------------------------------------------------


def changes_pkt_data(
    cfg: Cfg, kfuncs: dict[int, str], subprogs: dict[int, SubprogInfo]
) -> dict[int, str]:
    """Subprogram start index -> why it changes packet data (``bpf_xdp_adjust_head at insn
    12``, ``calls leaf() at insn 30``), for every subprogram that does (see the module
    doc): its own instructions (the kernel's check_cfg visits them all: an unreachable one
    is refused), then a fixed point over its calls and function references."""
    out: dict[int, str] = {}
    for i, x in enumerate(cfg.insns):
        if not x.is_call:
            continue
        why = ""
        if x.is_helper_call:
            h = HELPERS_BY_ID.get(x.imm)
            if h is not None and (h.pkt_changing or x.imm == BPF_FUNC_TAIL_CALL):
                why = f"{h.kernel_name} at insn {cfg.slots[i]}"
        elif x.src == BPF_PSEUDO_KFUNC_CALL and kfuncs.get(i) in PKT_CHANGING_KFUNCS:
            why = f"{kfuncs[i]} at insn {cfg.slots[i]}"
        sp = cfg.subprog_of[i]
        if why and sp not in out:
            out[sp] = why
    edges = [
        (cfg.subprog_of[i], t, i) for i, t in [*cfg.call_target.items(), *cfg.func_refs.items()]
    ]
    changed = True
    while changed:
        changed = False
        for caller, callee, i in edges:
            if callee in out and caller not in out:
                info = subprogs.get(callee)
                name = (
                    f"{info.name}()"
                    if info is not None
                    else f"the function at insn {cfg.slots[callee]}"
                )
                out[caller] = (
                    f"calls {name} at insn {cfg.slots[i]}, which changes packet data ({out[callee]})"
                )
                changed = True
    return out


def _invalidate_packet(st: State, note: str) -> None:
    """kernel clear_all_pkt_pointers: every packet pointer of every frame, registers and
    spills, becomes an unknown scalar (``note`` says why, for the error a use gives)."""
    st.update_regs(lambda r: D.unknown(note) if r.t in (D.PKT, D.PKT_META, D.PKT_END) else None)


# ---- calls ----------------------------------------------------------------------------


def _frames_fault(n: int) -> Fault:
    return Fault(
        "call-depth",
        f"the call stack of {n} frames is too deep !",
        "at most 8 nested BPF-to-BPF calls (program, subprograms and loop callbacks)",
    )


def enter_call(env: Env, cfg: Cfg, st: State, i: int) -> list[tuple[int, State]] | None:
    """A ``call pc+N`` (BPF_PSEUDO_CALL): a frame for a static subprogram, an argument
    check for a global one.  Returns the analyzer's successor list (None: next insn)."""
    target = cfg.call_target[i]  # the subprogram starting at the call's destination
    info = env.subprogs.get(target)
    if info is not None and info.is_global:
        _check_global_args(env, st, info)
        why = env.pkt_changers.get(target)
        if why is not None:
            _invalidate_packet(st, f"packet pointer invalidated by the call of global function "
                               f"{info.name}() at insn {cfg.slots[i]}: it changes packet "
                               f"data ({why})")  # fmt: skip
        env.called.add(target)  # verified on its own once the program is (do_check_subprogs)
        regs = st.regs
        for r in range(1, 6):
            regs[r] = D.NOT_INIT_REG
        regs[0] = D.unknown()
        st.cur.r0_at = i
        return None
    if len(st.frames) >= MAX_CALL_FRAMES:
        raise _frames_fault(len(st.frames) + 1)
    regs = [D.NOT_INIT_REG] * 11
    caller = st.regs
    for r in range(1, 6):
        regs[r] = caller[r]
    regs[10] = D.ptr(D.STACK, map=len(st.frames))
    for r in range(0, 6):  # kernel clear_caller_saved_regs: r0-r5 of the caller
        caller[r] = D.NOT_INIT_REG
    st.frames.append(Frame(regs, {}, i, len(st.frames), target))
    return [(target, st)]


def _check_global_args(env: Env, st: State, info: SubprogInfo) -> None:
    """btf_check_func_arg_match: each register against the global function's prototype."""
    if info.args is None:
        raise Fault(
            UNMODELLED if info.problem.startswith("cannot check") else "global-args",
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
        elif a.kind == "arena":  # any scalar (or arena pointer, which the checker lacks)
            if r.t != D.SCALAR:
                raise Fault(
                    "global-args",
                    f"R{regno} is not a pointer to arena or scalar.",
                    f"argument {k} ('{a.name}') of {info.name}() is tagged arg:arena",
                    (regno,),
                )
        elif a.kind == "dynptr":
            _check_dynptr_arg(st, regno, k, info)
        elif a.kind == "trusted":
            if not (a.nullable and r.t == D.SCALAR and r.is_const and r.value == 0):
                raise Fault(
                    "global-args",
                    f"R{regno} type={D.TYPE_NAMES[r.t]} expected=ptr_, trusted_ptr_, rcu_ptr_",
                    f"argument {k} ('{a.name}') of {info.name}() is a trusted `struct "
                    f"{a.btf_name} *` (arg:trusted): only the kernel hands those out"
                    + (", or pass NULL" if a.nullable else ""),
                    (regno,),
                )
        elif r.t == D.SCALAR and r.is_const and r.value == 0:  # NULL
            if not a.nullable:
                raise Fault(
                    "global-args",
                    f"arg#{k} is expected to be non-NULL",
                    f"argument {k} ('{a.name}') of {info.name}() is tagged arg:nonnull",
                    (regno,),
                )
        else:
            saved = r
            if r.t in D.NULLABLE:  # checked as if not NULL (kernel check_mem_reg)
                st.regs[regno] = r.replace(t=D.NULLABLE[r.t])
            try:
                check_mem(env, st, regno, a.size, False, f"argument '{a.name}'")
                if st.regs[regno].t == D.STACK:
                    # check_mem_reg checks a write too: the function may write the bytes,
                    # so the caller's stack there holds unknown data after the call
                    # (check_stack_range_initialized with clobber)
                    stack_range_written(st, regno, a.size)
            finally:
                st.regs[regno] = saved
            if not a.nullable and r.t in D.NULLABLE:
                raise Fault(
                    "global-args",
                    f"arg#{k} is expected to be non-NULL",
                    f"argument {k} ('{a.name}') of {info.name}() is tagged arg:nonnull: "
                    "compare the pointer with 0 before the call",
                    (regno,),
                )


def _check_dynptr_arg(st: State, regno: int, k: int, info: SubprogInfo) -> None:
    """process_dynptr_func for a global function's ``struct bpf_dynptr *`` argument (read
    only): a dynptr of the caller's (CONST_PTR_TO_DYNPTR, its own argument), or its stack
    holding an initialized dynptr -- which no helper the checker models makes."""
    r = st.regs[regno]
    if r.t == D.DYNPTR and r.off == 0:
        return
    if r.t not in (D.STACK, D.DYNPTR):
        raise Fault(
            "global-args",
            f"arg#{k} expected pointer to stack or const struct bpf_dynptr",
            f"pass {info.name}() a dynptr (struct bpf_dynptr on the stack, initialized)",
            (regno,),
        )
    raise Fault(
        "global-args",
        f"Expected an initialized dynptr as arg #{k}",
        f"initialize the dynptr before passing it to {info.name}()",
        (regno,),
    )


def entry_regs(env: Env, info: SubprogInfo) -> list[D.Reg]:
    """Registers at the start of a global function verified on its own: r1-r5 from its
    prototype (scalars unknown, pointers ``mem_or_null`` of the type's size), r10 a stack."""
    if info.args is None:
        raise Fault(
            UNMODELLED if info.problem.startswith("cannot check") else "global-args",
            f"global function {info.name}(): {info.problem}",
            "a global function takes integers, the context, or pointers to sized types",
        )
    regs = [D.NOT_INIT_REG] * 11
    for k, a in enumerate(info.args[:5]):
        if a.kind == "scalar":
            regs[k + 1] = D.unknown()
        elif a.kind == "ctx":
            regs[k + 1] = D.ptr(D.CTX)
        elif a.kind == "arena":
            regs[k + 1] = D.unknown()  # the caller may pass an arena pointer or a scalar
        elif a.kind == "dynptr":
            regs[k + 1] = D.ptr(D.DYNPTR, id=env.new_id())  # a LOCAL dynptr, read only
        elif a.kind == "trusted":
            raise Fault(
                UNMODELLED,
                f"cannot check: argument {k} ('{a.name}') of {info.name}() is a trusted "
                f"kernel object (arg:trusted `struct {a.btf_name} *`), which bpfdsl check "
                "does not model",
                "load the object to let the kernel verify it",
            )
        elif a.nullable:
            regs[k + 1] = D.Reg(D.MEM_OR_NULL, id=env.new_id(), rng=a.size)
        else:  # arg:nonnull: PTR_TO_MEM without PTR_MAYBE_NULL
            regs[k + 1] = D.Reg(D.MEM, rng=a.size)
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


def loop_call(env: Env, cfg: Cfg, st: State, i: int) -> list[tuple[int, State]] | None:
    """``call bpf_loop`` (kernel check_helper_call BPF_FUNC_loop, push_callback_call): check
    its arguments, mark the count (r1) precise, push a visit of the callback (its own frame,
    set_loop_callback_state) while fewer than ``umax(r1)`` visits were pushed from this
    frame's call, and go on after the call with r0 an unknown count.  The callback's
    ``exit`` comes back to this call (:func:`leave`), which pushes the next visit: the
    kernel's way of verifying a callback called any number of times, ended by the
    checkpoint at the call covering a later state (explorer: calls_callback)."""
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
    if regs[1].t == D.SCALAR:
        env.precise(1)  # kernel: the iteration count decides when the visits end
    # the kernel also keeps the callback's visits as a loop (SCC backedges) and compares
    # states inside it by range until those are done; that is not modelled: the count
    # may differ from the kernel's, so the complexity margin is the lower one
    env.inexact += 1
    caller = st.cur
    out = None
    if regs[1].t != D.SCALAR or caller.callback_depth < regs[1].umax:
        if len(st.frames) >= MAX_CALL_FRAMES:
            raise _frames_fault(len(st.frames) + 1)
        cb = st.copy()
        cb.cur.callback_depth += 1
        cb.cb_unroll += 1
        _enter_callback(cb, i, target, cb.regs[3])
        out = [(i + 1, st), (target, cb)]
    caller.callback_depth = 0
    _after_loop(caller, i)
    return out


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
    """Whether ``frame`` runs a callback (its call site is a callback-calling helper)."""
    return frame.callsite in cfg.callback_calls


def leave(env: Env, cfg: Cfg, st: State, i: int) -> list[tuple[int, State]]:
    """``exit`` of a subprogram or callback frame: back to the caller (prepare_func_exit)."""
    r0 = st.regs[0]
    callee = st.frames[-1]
    if r0.t == D.STACK:
        # any frame's stack, the caller's too ("technically it's ok ... but let's be
        # conservative"): LLVM leaves a pointer argument in r0 when no caller uses the
        # result, so this happens to compiled code
        raise Fault(
            "ret-stack",
            "cannot return stack pointer to the caller",
            "r0 holds a stack address at the subprogram's exit",
            (0,),
        )
    if is_callback_frame(cfg, callee):
        return _leave_callback(st, r0)
    st.frames.pop()
    caller = st.cur
    caller.regs[0] = r0
    caller.r0_at = callee.r0_at if callee.r0_at >= 0 else i
    for r in range(1, 6):
        caller.regs[r] = D.NOT_INIT_REG
    why = env.pkt_changers.get(callee.subprog)
    if why is not None:  # the kernel (6.18) clears them as the function returns
        info = env.subprogs.get(callee.subprog)
        name = f"{info.name}()" if info is not None else "the function"
        _invalidate_packet(st, f"packet pointer invalidated by the return from {name} "
                           f"called at insn {cfg.slots[callee.callsite]}: it changes packet "
                           f"data ({why})")  # fmt: skip
    return [(callee.callsite + 1, st)]


def tail_call_exit(env: Env, cfg: Cfg, st: State, i: int) -> list[tuple[int, State]] | None:
    """``bpf_tail_call`` at insn ``i`` in a subprogram frame (kernel 6.18 check_helper_call,
    BPF_FUNC_tail_call with ``curframe`` set): the path where the tail call fails, the
    state after the helper, is pushed to go on at ``i + 1``; the current path is the one
    where it succeeds, which leaves the subprogram there -- every packet pointer cleared
    (clear_all_pkt_pointers), r0 an unknown scalar (the tail-called program's return
    value), then prepare_func_exit.  None in the program's own frame and in a callback
    frame (the path just goes on)."""
    if len(st.frames) == 1 or is_callback_frame(cfg, st.frames[-1]):
        return None
    failed = st.copy()
    _invalidate_packet(st, f"packet pointer invalidated by bpf_tail_call at insn {cfg.slots[i]}")
    st.regs[0] = D.unknown()
    return [*leave(env, cfg, st, i), (i + 1, failed)]


def _leave_callback(st: State, r0: D.Reg) -> list[tuple[int, State]]:
    """A callback's ``exit``: r0 in [0, 1] (its precision was marked by the explorer
    before), then back to the bpf_loop call, which is walked again (the explorer widens
    the caller state first: kernel widen_imprecise_scalars)."""
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
    return [(callee.callsite, st)]


def widen(old: State, old_prec: list[int], old_sprec: list[int], cur: State) -> None:
    """kernel widen_imprecise_scalars: every scalar register and spilled scalar of ``cur``
    that is imprecise in the checkpoint ``old`` (precision masks ``old_prec``/``old_sprec``
    per frame) and differs from it there becomes unknown, so that the next callback visit
    is covered by an earlier one instead of counting on."""
    idmap = IdMap()
    for fr in range(len(old.frames) - 1, -1, -1):
        of, cf = old.frames[fr], cur.frames[fr]
        pm = old_prec[fr] if fr < len(old_prec) else 0
        for r in range(11):
            o, c = of.regs[r], cf.regs[r]
            if o.t != D.SCALAR or c.t != D.SCALAR or pm >> r & 1:
                continue
            if not regs_exact(o, c, idmap):
                cf.regs[r] = D.unknown()
        sm = old_sprec[fr] if fr < len(old_sprec) else 0
        changed = None
        for k, os in of.stack.items():
            cs = cf.stack.get(k)
            if cs is None or os.spill is None or cs.spill is None or sm >> k & 1:
                continue
            if os.types[0] != SPILL or cs.types[0] != SPILL:
                continue
            o, c = os.spill, cs.spill
            if o.t != D.SCALAR or c.t != D.SCALAR or regs_exact(o, c, idmap):
                continue
            if changed is None:
                changed = dict(cf.stack)
            changed[k] = Slot(cs.types, D.unknown())
        if changed is not None:
            cf.stack = changed


# ---- the call graph (check_max_stack_depth) -----------------------------------------------


def check_call_graph(env: Env, cfg: Cfg) -> FaultAt | None:
    """Every call chain from the program's start (calls and callback references alike)
    has at most 8 frames and 512 bytes of stack; a subprogram that tail-calls is entered
    with less than 256 bytes of its callers' stack, and none under a callback tail-calls:
    the kernel's check_max_stack_depth, :func:`bpfdsl.abi.stack.check_max_stack_depth` on
    the object's calls with the frame sizes the walk found (``env.stack_depth``).  Returns
    the analyzer's fault tuple (index, Fault, state text, regs) for the chain the kernel
    refuses first, at the call that enters its last frame (for a tail call under a
    callback: that tail call), or None."""
    targets = {**cfg.call_target, **cfg.func_refs}  # call or ld_imm64 insn -> function
    calls: dict[int, list[tuple[int, int]]] = {}
    for i in sorted(targets):  # the kernel walks each function's calls in insn order
        calls.setdefault(cfg.subprog_of[i], []).append((i, targets[i]))
    callbacks = {cfg.subprog_of[t] for t in cfg.func_refs.values()}
    end = dict(zip(cfg.subprogs, [*cfg.subprogs[1:], len(cfg.insns)], strict=True))
    graph = {
        sp: Subprog(
            env.stack_depth.get(sp, 0),
            calls.get(sp, ()),
            bool(calls) and has_tail_call(cfg.insns[sp : end[sp]]),  # none matters alone
            sp in callbacks,
        )
        for sp in cfg.subprogs
    }
    hit = check_max_stack_depth(graph, 0)
    if hit is None:
        return None
    at = hit.sites[-1] if hit.sites else 0
    frames, last = len(hit.chain), hit.chain[-1]
    if hit.rule is Rule.FRAMES:
        f = _frames_fault(frames - 1)
    elif hit.rule is Rule.TAIL_CALL_IN_CALLBACK:
        # kernel: a tail call in the callback itself fails its precision backtracking
        # (backtrack_insn, the selftest tailcall_fail.c tailcall_direct_callback); one in
        # a subprogram a callback calls, check_max_stack_depth_subprog (is_cb)
        at = next(i for i in range(last, end[last])
                  if cfg.insns[i].is_helper_call and cfg.insns[i].imm == BPF_FUNC_TAIL_CALL)  # fmt: skip
        f = Fault(
            "tail-call-callback",
            "verifier bug: callback unexpected regs 1"
            if last in callbacks
            else "cannot tail call within callback",
            "a bpf_loop callback may not tail-call, nor call a function that does: "
            "return from the callback and tail-call after the loop",
        )
    elif hit.rule is Rule.TAIL_CALL_STACK:
        f = Fault(
            "tail-call-stack",
            f"tail_calls are not allowed when call stack of previous frames is "
            f"{hit.stack} bytes. Too large",
            "a subprogram that tail-calls may be called with less than 256 bytes "
            "of stack in its callers",
        )
    else:
        f = Fault(
            "stack-depth",
            f"combined stack size of {frames} calls is {hit.stack}. Too large",
            "the functions on this call chain use more than 512 bytes of stack together",
        )
    return (at, f, "", {})


# ---- after the walk: dead code and the JIT's subprograms ----------------------------------


def jit_subprog_fault(cfg: Cfg, visits: Sequence[int]) -> tuple[int, Fault] | None:
    """What the kernel does with the code no path reached once every walk is done (6.18,
    privileged: opt_remove_dead_code / verifier_remove_insns, bpf_adj_branches'
    bpf_adj_delta_to_imm, adjust_subprog_starts_after_remove), then jit_subprogs: every
    BPF-to-BPF call and function address (ld_imm64 BPF_PSEUDO_FUNC) left must name the
    start of a subprogram left, else "verifier bug: No program to jit at insn N" (EFAULT).

    A subprogram reached only as the callback of a ``bpf_loop`` whose count is known to
    be 0 (umax(r1) = 0: a constant, a frozen .rodata config) is never walked
    (check_helper_call: no visit pushed), so all of it is removed as dead, while the
    function address of the call, walked, stays and is not adjusted (its target is in
    the removed range): it then names the insn after the removed range, the start of the
    next subprogram when there is one, else the end of the program; with more than one
    subprogram left (jit_subprogs returns early for one) that is refused.  Returns the
    insn index of the first reference that is refused and the fault, or None.  ``N`` is
    counted before the kernel's later rewrites (bpf_loop inlining, context accesses),
    so the kernel's number can be higher."""
    if len(cfg.subprogs) <= 1:
        return None  # one function: jit_subprogs has nothing to split
    insns = cfg.insns
    slot_seen: list[bool] = []
    for i, x in enumerate(insns):
        slot_seen += [visits[i] > 0] * x.width
    if all(slot_seen):
        return None
    # (current slot, imm, list index) of each call / function address, kept or not
    refs: list[list[int]] = []
    for i in sorted(set(cfg.call_target) | set(cfg.func_refs)):
        refs.append([cfg.slots[i], insns[i].imm, i])
    starts = [cfg.slots[s] for s in cfg.subprogs]
    length = len(slot_seen)
    seen = slot_seen
    pos = 0
    while pos < length:
        if seen[pos]:
            pos += 1
            continue
        cnt = 1
        while pos + cnt < length and not seen[pos + cnt]:
            cnt += 1
        end_old = pos + cnt
        kept: list[list[int]] = []
        for ref in refs:  # bpf_remove_insns: memmove, then bpf_adj_branches
            cur, imm, idx = ref
            if pos <= cur < end_old:
                continue  # removed with its range
            if cur >= end_old:
                cur -= cnt
            if cur < pos and cur + imm + 1 >= end_old:
                imm -= cnt
            elif cur >= pos and cur + imm + 1 < pos:
                imm += cnt
            kept.append([cur, imm, idx])
        refs = kept
        starts.append(length)  # the fake 'exit' subprogram
        k = next(k for k in range(len(starts)) if starts[k] >= pos)
        j = next(j for j in range(k, len(starts)) if starts[j] >= end_old)
        if starts[j] != end_old:
            j -= 1
        if j > k:
            del starts[k:j]
        elif starts[k] == pos:
            k += 1
        for m in range(k, len(starts)):
            starts[m] -= cnt
        starts.pop()
        seen = seen[:pos] + seen[end_old:]
        length -= cnt
    if len(starts) <= 1:
        return None  # jit_subprogs: nothing to split
    left = set(starts)
    for cur, imm, idx in refs:
        target = cur + imm + 1
        if target not in left:
            return idx, Fault(
                "dead-subprog",
                f"verifier bug: No program to jit at insn {target} (subprog < 0)",
                "the kernel never walks the callback of a bpf_loop whose count is known to "
                "be 0 (a constant or a config set to 0), removes its code as dead, and then "
                "finds this reference to it naming no function; skip the loop when the "
                "count is 0, or give it a count that is not known to be 0",
            )
    return None
