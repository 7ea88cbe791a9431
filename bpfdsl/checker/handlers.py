"""One instruction's step: a handler per instruction, chosen once (no per-step if-chain).

The explorer (checker/analyzer.py) walks paths; at each instruction it calls that
instruction's :data:`Handler`, which applies the instruction to the state with the transfer
functions (checker/transfer.py, alu.py, branch.py, calls.py, subprog.py) and returns None
for "next instruction, same state", else the successor list [(index, state), ...] (empty:
the path ended).  The general handler (:func:`general_handler`, by opcode) serves an insn's
first walk; from its second on, the commonest well-formed kinds get one made for that insn
(:func:`handler`: _fast_alu, _cond_k -- the checks and the immediate's register decided
once), which hands every case it does not cover to the general one
(tests/checker/test_checker_insn_handlers.py holds them to the same outcomes).  The
program's ``exit`` and its return-value rules by program type are here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from bpfdsl.abi.helpers import BPF_FUNC_LOOP, BPF_FUNC_TAIL_CALL
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.opcodes import (
    BPF_ABS,
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_AND,
    BPF_ARSH,
    BPF_ATOMIC,
    BPF_CALL,
    BPF_CMPXCHG,
    BPF_EXIT,
    BPF_IND,
    BPF_JA,
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
    BPF_LD,
    BPF_LDX,
    BPF_LSH,
    BPF_MOV,
    BPF_MUL,
    BPF_OR,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_RSH,
    BPF_ST,
    BPF_STX,
    BPF_SUB,
    BPF_XOR,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import alu as ALU
from bpfdsl.checker import domain as D
from bpfdsl.checker import features as F
from bpfdsl.checker.branch import do_cond_jump, scalar_jump, scalar_outcome
from bpfdsl.checker.calls import check_helper_call, check_kfunc_call
from bpfdsl.checker.cfg import Cfg
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.refs import calls_locked, exit_locked, global_call_locked, leak_fault
from bpfdsl.checker.state import State
from bpfdsl.checker.subprog import (
    check_global_return,
    enter_call,
    is_callback_frame,
    leave,
    loop_call,
    tail_call_exit,
)
from bpfdsl.checker.transfer import (
    do_alu,
    do_ld,
    do_ldx,
    do_store,
    fork_scalars,
    read_reg,
)

# the handler of one instruction: None = the next instruction, same state; else the
# successors [(index, state), ...] (empty: the path ended)
Handler = Callable[[Env, Cfg, State, int, Insn], list[tuple[int, State]] | None]


def general_alu(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
    other = fork_scalars(st, x)
    do_alu(env, st, x)
    if x.dst == 0:
        st.frames[-1].r0_at = i
    if other is not None:  # the dst = 0 copy runs this insn again (maybe_fork_scalars)
        return [(i + 1, st), (i, other)]
    return None


def _ldx(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> None:
    do_ldx(env, st, x)
    if x.dst == 0:
        st.frames[-1].r0_at = i


def _store(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> None:
    do_store(env, st, x)
    if x.cls == BPF_STX and x.mode == BPF_ATOMIC and x.imm == BPF_CMPXCHG:
        st.frames[-1].r0_at = i


def _ld(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> None:
    do_ld(env, st, i, x)
    if x.dst == 0 or x.mode in (BPF_ABS, BPF_IND):  # LD_ABS/IND write r0
        st.frames[-1].r0_at = i


def _ja(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
    c = x.cls
    if x.source or x.src or x.dst or (c == BPF_JMP and x.imm) or (c == BPF_JMP32 and x.off):
        raise Fault("reserved-fields", "BPF_JA uses reserved fields", "bad jump encoding")
    return [(cfg.succ[i][0], st)]


def _exit_insn(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
    if x.source or x.imm or x.src or x.dst or x.cls == BPF_JMP32:
        raise Fault("reserved-fields", "BPF_EXIT uses reserved fields", "bad exit encoding")
    return _exit(env, cfg, st, i)


def _call(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
    if x.source or x.off or x.src not in (0, BPF_PSEUDO_CALL) or x.dst or x.cls == BPF_JMP32:
        if x.src == BPF_PSEUDO_KFUNC_CALL and not x.source and not x.dst:
            check_kfunc_call(env, st, env.kfuncs.get(i), cfg.slots[i])
            st.frames[-1].r0_at = i
            return None
        if x.src == BPF_PSEUDO_KFUNC_CALL:
            raise Fault("kfunc", "kernel function calls are not supported by the checker", "")
        raise Fault("reserved-fields", "BPF_CALL uses reserved fields", "bad call encoding")
    if x.src == BPF_PSEUDO_CALL:
        info = env.subprogs.get(cfg.call_target.get(i, -1))
        if info is not None and info.is_global:
            global_call_locked(env, st, info.name)
        return enter_call(env, cfg, st, i)
    calls_locked(env, st, x.imm)  # bpf_loop too
    if x.imm == BPF_FUNC_LOOP:
        return loop_call(env, cfg, st, i)
    check_helper_call(env, st, x.imm, cfg.slots[i])
    st.frames[-1].r0_at = i
    if x.imm == BPF_FUNC_TAIL_CALL:  # in a subprogram: also the function's exit
        return tail_call_exit(env, cfg, st, i)
    return None


def _cond(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
    succ = cfg.succ[i]
    target = succ[-1] if len(succ) == 2 else succ[0]
    return do_cond_jump(env, st, i, x, target)


_BY_CLASS: Final[dict[int, Handler]] = {
    BPF_ALU: general_alu,
    BPF_ALU64: general_alu,
    BPF_LDX: _ldx,
    BPF_ST: _store,
    BPF_STX: _store,
    BPF_LD: _ld,
}
_BY_JMP_OP: Final[dict[int, Handler]] = {BPF_JA: _ja, BPF_EXIT: _exit_insn, BPF_CALL: _call}


def handler(x: Insn, succ: list[int], made: bool = True) -> Handler:
    """The handler of one decoded instruction (abi.insn.Insn) whose successors are
    ``succ``, by class and jump operation; with ``made``, the commonest well-formed ALU
    instructions and conditional jumps on an immediate get one made for them
    (:func:`_fast_alu`, :func:`_cond_k`)."""
    h = _BY_CLASS.get(x.cls)
    if h is general_alu:
        return (made and _fast_alu(x)) or h
    if h is not None:
        return h
    h = _BY_JMP_OP.get(x.op, _cond)
    if made and h is _cond and x.source == BPF_K and not x.src and x.dst <= 10 and x.op in _JMP_OPS:
        return _cond_k(x, succ[-1] if len(succ) == 2 else succ[0])
    return h


# opcode byte -> handler(made=False) of its insns, for first walks (general_handler)
_GENERAL: dict[int, Handler] = {}


def general_handler(x: Insn) -> Handler:
    """The general handler of ``x``'s opcode (the same for every insn with that opcode:
    what an insn's first walk runs), made once per opcode."""
    h = _GENERAL.get(x.opcode)
    if h is None:
        h = _GENERAL[x.opcode] = handler(x, [], made=False)
    return h


_JMP_OPS: Final = frozenset(
    (BPF_JEQ, BPF_JNE, BPF_JSET, BPF_JGT, BPF_JGE, BPF_JLT, BPF_JLE)
    + (BPF_JSGT, BPF_JSGE, BPF_JSLT, BPF_JSLE)
)


def _cond_k(x: Insn, target: int) -> Handler:
    """A handler for one well-formed ``if dst op imm goto target``: do_cond_jump with the
    immediate's register made once; a scalar destination goes straight to the scalar
    comparison (branch.scalar_jump), anything else through do_cond_jump."""
    is32 = x.cls == BPF_JMP32
    imm = D.known(x.imm if not is32 else x.imm & D.M32)
    dst, op = x.dst, x.op
    general = op == BPF_JSET  # its false branch is not a refinement: scalar_jump
    rebound = D.rebound
    # this insn's outcomes by the destination's tnum and bounds (branch.scalar_outcome)
    memo: dict[tuple, tuple[int, tuple | None, tuple | None]] = {}

    def cond_k(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
        regs = st.frames[-1].regs
        d = regs[dst]
        if d.t != D.SCALAR:
            return do_cond_jump(env, st, i, x, target)
        if is32 and env.kernel is not None:
            env.need(F.JMP32_MIN, "32-bit conditional jump (jmp32)")
        if general or d.id:  # linked copies to refine and record: scalar_jump
            return scalar_jump(env, st, i, x, target, d, imm)
        key = (d.tn, d.smin, d.smax, d.umin, d.umax, d.s32min, d.s32max, d.u32min, d.u32max)
        o = memo.get(key)
        if o is None:
            o = scalar_outcome(d, imm, op, is32)
            if len(memo) >= 1024:
                memo.clear()
            memo[key] = o
        bt, fall, tk = o
        if bt >= 0:  # as scalar_jump: the outcome rests on dst's range
            env.want_regs.append(dst)
            return [(target, st)] if bt else None
        taken = st.copy()
        out = []
        if fall is None:  # no value falls through (the kernel walks it: inexact)
            env.inexact += 1
        else:
            regs[dst] = rebound(d, fall[0], fall[1])
            out.append((i + 1, st))
        if tk is None:
            env.inexact += 1
        else:
            taken.frames[-1].regs[dst] = rebound(d, tk[0], tk[1])
            out.append((target, taken))
        return out

    return cond_k


# ALU operations with an immediate whose scalar case _fast_alu handles (div/mod: do_alu)
_FAST_K_OPS: Final = frozenset(
    (BPF_ADD, BPF_SUB, BPF_MUL, BPF_AND, BPF_OR, BPF_XOR) + (BPF_LSH, BPF_RSH, BPF_ARSH)
)


def _fast_alu(x: Insn) -> Handler | None:
    """A handler for one well-formed ALU instruction that does do_alu's work for its common
    case with what depends only on the instruction decided once (encoding checks, the
    immediate's register), else through general_alu: ``dst op= imm`` on a scalar, ``dst = imm``,
    ``w_dst = w_src`` of a scalar, ``dst = src`` of a pointer, a constant or a scalar
    with an id.  None when the instruction is not one of these (or is malformed: do_alu
    reports it)."""
    op, is64, dst = x.op, x.cls == BPF_ALU64, x.dst
    if x.off or dst >= 10:
        return None
    if x.source == BPF_K:
        if x.src:
            return None
        imm = D.known(x.imm if is64 else x.imm & D.M32)
        if op == BPF_MOV:
            return _mov_k(dst, imm)
        if op not in _FAST_K_OPS:
            return None
        if op in (BPF_LSH, BPF_RSH, BPF_ARSH) and not 0 <= x.imm < (64 if is64 else 32):
            return None
        return _alu_k(op, is64, dst, imm)
    if op != BPF_MOV or x.imm or x.src > 10:
        return None
    return _mov_x(is64, dst, x.src)


def _mov_k(dst: int, imm: D.Reg) -> Handler:
    def mov_k(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> None:
        f = st.frames[-1]
        f.regs[dst] = imm
        if dst == 0:
            f.r0_at = i

    return mov_k


def _alu_k(op: int, is64: bool, dst: int, imm: D.Reg) -> Handler:
    scalar_alu = ALU.scalar_alu
    # an add or sub of a scalar with an id may link dst to its copies with a delta
    # (BPF_ADD_CONST64/32: transfer.link_delta): do_alu
    link = op == BPF_ADD or op == BPF_SUB
    fork = op == BPF_AND or op == BPF_OR  # transfer.fork_scalars
    memo: dict[tuple, D.Reg] = {}  # this insn's results by the operand's tnum and bounds

    def alu_k(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
        f = st.frames[-1]
        regs = f.regs
        d = regs[dst]
        if d.t != D.SCALAR:  # pointer arithmetic, an unset register: do_alu
            return general_alu(env, cfg, st, i, x)
        if link and d.id and env.privileged:
            return general_alu(env, cfg, st, i, x)
        if fork and ((d.smin == -1 and d.smax == 0) or (d.s32min == -1 and d.s32max == 0)):
            return general_alu(env, cfg, st, i, x)  # maybe_fork_scalars: two states
        key = (d.tn, d.smin, d.smax, d.umin, d.umax, d.s32min, d.s32max, d.u32min, d.u32max)
        r = memo.get(key)
        if r is None:
            r = scalar_alu(op, d, imm, is64)  # a fresh scalar: a pure function of the key
            if len(memo) >= 1024:
                memo.clear()
            memo[key] = r
        regs[dst] = r
        if dst == 0:
            f.r0_at = i
        return None

    return alu_k


def _mov_x(is64: bool, dst: int, src: int) -> Handler:
    zext32 = D.zext32

    def mov_x(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> None:
        f = st.frames[-1]
        regs = f.regs
        s = regs[src]
        t = s.t
        if is64:
            # a pointer, a constant or an already linked scalar is copied as it is
            if t > D.SCALAR or (t == D.SCALAR and not s.id & D.ADD_CONST and (s.id or not s.tn[1])):
                regs[dst] = s
            else:  # an unset register, a scalar to link to its copy: do_alu
                general_alu(env, cfg, st, i, x)
                return
        elif t == D.SCALAR and s.umax > D.M32:
            regs[dst] = zext32(s)
        elif t == D.SCALAR and not s.id & D.ADD_CONST and (s.id or not s.tn[1]):
            regs[dst] = s  # as do_alu: a value that fits in 32 bits is copied whole
        else:  # a scalar to link to its copy, a pointer: do_alu
            general_alu(env, cfg, st, i, x)
            return
        if dst == 0:
            f.r0_at = i

    return mov_x


def _exit(env: Env, cfg: Cfg, st: State, i: int) -> list[tuple[int, State]] | None:
    if len(st.frames) > 1:  # back to the caller (checker.subprog)
        # kernel prepare_func_exit: a static function's r0 goes back as it is, unset too
        # (a caller that reads it is refused there); a callback's r0 must be set
        if is_callback_frame(cfg, st.frames[-1]):
            read_reg(st, 0)
        return leave(env, cfg, st, i)
    locked = exit_locked(env, st)  # kernel check_resource_leak: the lock first
    if locked is not None:
        raise locked
    leak = leak_fault(env, st, "BPF_EXIT instruction in main prog")
    if leak is not None:
        raise leak
    r0 = read_reg(st, 0)  # check_return_code: R0 !read_ok
    if env.entry:  # a global function verified on its own
        check_global_return(r0)
        return []
    _check_return(env, r0, st.cur.r0_at)
    return []


def _check_return(env: Env, r0: D.Reg, r0_at: int = -1) -> None:
    """Return value rules by program type; warnings name ``r0_at``, the insn that set r0
    on this path (its source line is where the verdict was chosen), when known."""
    pt = env.prog_type
    if pt == ProgramType.SOCK_OPS or pt in (ProgramType.CGROUP_SKB,):
        lo, hi = 0, 1
        if r0.t != D.SCALAR:
            raise Fault(
                "ret-type",
                f"At program exit the register R0 is not a known value ({D.TYPE_NAMES[r0.t]})",
                "return 0 or 1",
                (0,),
            )
        if r0.smin < lo or r0.smax > hi:
            raise Fault(
                "ret-range",
                f"At program exit the register R0 has smin={r0.smin} smax={r0.smax} "
                f"should have been in [{lo}, {hi}]",
                "sock_ops programs return 0 or 1",
                (0,),
            )
        return
    allowed = sorted(set(env.returns.values()))
    if not allowed:
        return
    if r0.t != D.SCALAR:
        env.warn(
            "ret-type",
            f"program returns a pointer ({D.TYPE_NAMES[r0.t]}) as its verdict",
            "return one of " + ", ".join(env.returns),
            (0,),
            at=r0_at,
        )
        return
    lo, hi = min(allowed), max(allowed)
    # warn only when no possible value is a valid verdict (helper results such as
    # bpf_redirect_map's are unknown numbers that are valid at run time)
    bad = r0.umin > hi or r0.smax < lo
    if r0.is_const and r0.value not in allowed:
        bad = True
    if bad:
        names = ", ".join(f"{k}={v}" for k, v in env.returns.items())
        shown = str(D.s64(r0.value)) if r0.is_const else f"{r0.smin}..{r0.smax}"
        env.warn(
            "ret-range",
            f"return value {shown} is not a valid verdict for this program kind",
            f"return one of {names}; the kernel accepts other values but treats them as "
            "an error at run time (XDP: aborted, with a warning)",
            (0,),
            at=r0_at,
        )
