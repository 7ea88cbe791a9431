"""Path exploration with state pruning (kernel do_check + is_state_visited).

Walks every path of a program depth-first like the kernel (the fall-through first, the
taken branch pushed), checking each instruction with transfer.step.  At prune points a
state already proven safe that covers the current one ends the path; a state equal to one
still being explored on the same path is an infinite loop.  Limits are the kernel's:
1,000,000 processed instructions, 8192 pending branches, 8 call frames, 512-byte stack.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.abi import uapi as U
from bpfdsl.abi.insn import Insn, format_insn
from bpfdsl.checker import domain as D
from bpfdsl.checker.branch import do_cond_jump
from bpfdsl.checker.calls import check_helper_call
from bpfdsl.checker.cfg import Cfg
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.report import fmt_state
from bpfdsl.checker.state import Frame, State, state_key, subsumes
from bpfdsl.checker.subprog import (
    BPF_FUNC_LOOP,
    check_global_return,
    enter_call,
    leave,
    loop_call,
)
from bpfdsl.checker.transfer import _read, do_alu, do_ld, do_ldx, do_store

INSN_LIMIT = 1_000_000
JMP_SEQ_LIMIT = 8192
MAX_STATES_PER_INSN = 64


class _Entry:
    """An explored state at a prune point; ``branches`` = paths below it still running."""

    __slots__ = ("state", "branches", "parent")

    def __init__(self, state: State, branches: int, parent: _Entry | None):
        self.state = state
        self.branches = branches
        self.parent = parent


@dataclass(slots=True)
class Outcome:
    """Analysis result: the first fault (index, Fault, state text, regs) or None;
    ``path``: branch decisions to the fault, oldest first."""

    fault: tuple[int, Fault, str, dict[int, str]] | None
    processed: int
    states: int
    path: list[tuple[int, bool]] | None = None


def _trail(st: State) -> list[tuple[int, bool]]:
    out = []
    t = st.trail
    while t is not None:
        out.append((t[0], t[1]))
        t = t[2]
    return out[::-1]


def _finish_path(st: State) -> None:
    e = st.parent
    while e is not None:
        e.branches -= 1
        if e.branches:
            break
        e = e.parent


def _live_sets(cfg: Cfg, st: State, i: int) -> list[frozenset[int]]:
    out = []
    for fi in range(len(st.frames)):
        if fi == len(st.frames) - 1:
            out.append(cfg.live_in[i])
        else:
            ret = st.frames[fi + 1].callsite + 1
            out.append(cfg.live_in[ret] - {0} if ret < len(cfg.live_in) else frozenset())
    return out


def analyze(env: Env, cfg: Cfg, entry: int = 0, regs: list[D.Reg] | None = None) -> Outcome:
    """Walk all paths of the program described by ``cfg``; stop at the first fault.

    ``entry``/``regs``: the function to verify and its registers at the start (a global
    function verified on its own, see checker.subprog); default the program, r1 = ctx.
    The call graph's stack and frame limits are checked by the caller, once every
    function's stack depth is known (subprog.check_call_graph)."""
    dec = cfg.insns
    handlers = [_handler(x) for x in dec]
    live_in = cfg.live_in
    if regs is None:
        regs = [D.NOT_INIT_REG] * 11
        regs[1] = D.ptr(D.CTX)
        regs[10] = D.ptr(D.STACK, map=0)
    stack: list[tuple[int, State, int]] = [(entry, State([Frame(regs, {}, -1, 0, entry)]), -1)]
    explored: dict[int, list[_Entry]] = {}
    looping: dict[int, dict[tuple, _Entry]] = {}
    processed = 0
    nstates = 0
    prune = cfg.prune
    heads = cfg.heads  # loop heads
    while stack:
        i, st, prev = stack.pop()
        while True:
            env.cur_idx = i
            if i in prune:
                live = [live_in[i]] if len(st.frames) == 1 else _live_sets(cfg, st, i)
                lst = explored.get(i)
                if lst is None:
                    lst = explored[i] = []
                e = None
                if i in heads:
                    key = state_key(st, live)
                    active = looping.get(i)
                    if active is None:
                        active = looping[i] = {}
                    e = active.get(key)
                    if e is not None and e.branches > 0:
                        msg = f"infinite loop detected at insn {cfg.slots[i]}"
                        # reported at the jump closing the loop: the loop's own line
                        f = Fault(
                            "infinite-loop",
                            msg,
                            "the loop makes no progress: nothing that decides its exit changes "
                            "between iterations",
                        )
                        return Outcome(
                            (prev if prev > i else i, f, fmt_state(st.regs), {}),
                            processed,
                            nstates,
                        )
                else:
                    active = None  # not a loop head: no loop key either
                pruned = e is not None  # an equal, fully explored state
                if not pruned:
                    for e in lst:
                        if e.branches == 0 and subsumes(e.state, st, live):
                            pruned = True
                            break
                if pruned:
                    _finish_path(st)
                    break
                new = _Entry(st.copy(), 1, st.parent)
                new.state.parent = None
                if active is not None:
                    active[key] = new
                if len(lst) >= MAX_STATES_PER_INSN:
                    # drop the oldest finished state (less pruning, never unsound)
                    for k, e in enumerate(lst):
                        if e.branches == 0:
                            del lst[k]
                            break
                if len(lst) < MAX_STATES_PER_INSN:
                    lst.append(new)
                nstates += 1
                st.parent = new
            processed += 1
            if processed > INSN_LIMIT:
                f = Fault(
                    "too-complex",
                    f"BPF program is too large. Processed {processed} insn",
                    "too many paths or loop iterations to verify; bound loops by small "
                    "constants and reduce branching",
                )
                return Outcome((i, f, fmt_state(st.regs), {}), processed, nstates)
            try:
                succ = handlers[i](env, cfg, st, i, dec[i])
            except Fault as f:
                before = fmt_state(st.regs)
                shown = {r: D.fmt_reg(st.regs[r]) for r in f.regs if r <= 10}
                return Outcome((i, f, before, shown), processed, nstates, _trail(st))
            prev = i
            if succ is None:  # fall through with the same state
                i += 1
                continue
            if not succ:
                _finish_path(st)
                break
            if len(succ) == 2:
                succ[0][1].trail = (i, False, succ[0][1].trail)
                succ[1][1].trail = (i, True, succ[1][1].trail)
                (i, st), pushed = succ[0], succ[1]
                if pushed[1].parent is not None:
                    pushed[1].parent.branches += 1
                stack.append((pushed[0], pushed[1], prev))
                if len(stack) > JMP_SEQ_LIMIT:
                    jumps = Fault(
                        "too-complex",
                        f"The sequence of {len(stack)} jumps is too complex.",
                        "too many pending branches; simplify the control flow",
                    )
                    return Outcome((i, jumps, fmt_state(st.regs), {}), processed, nstates)
            else:
                i, st = succ[0]
    return Outcome(None, processed, nstates)


# ---- one instruction: a handler per instruction, chosen once (no per-step if-chain) ----
# A handler returns None for "next instruction, same state", else the successor list
# [(index, state), ...] (empty: the path ended).


def _alu(env: Env, cfg: Cfg, st: State, i: int, x) -> None:
    do_alu(env, st, x)
    if x.dst == 0:
        st.frames[-1].r0_at = i


def _ldx(env: Env, cfg: Cfg, st: State, i: int, x) -> None:
    do_ldx(env, st, x)
    if x.dst == 0:
        st.frames[-1].r0_at = i


def _store(env: Env, cfg: Cfg, st: State, i: int, x) -> None:
    do_store(env, st, x)
    if x.cls == U.BPF_STX and x.mode == U.BPF_ATOMIC and x.imm == U.BPF_CMPXCHG:
        st.frames[-1].r0_at = i


def _ld(env: Env, cfg: Cfg, st: State, i: int, x) -> None:
    do_ld(env, st, i, x)
    if x.dst == 0 or x.mode in (U.BPF_ABS, U.BPF_IND):  # LD_ABS/IND write r0
        st.frames[-1].r0_at = i


def _ja(env: Env, cfg: Cfg, st: State, i: int, x):
    c = x.cls
    if x.source or x.src or x.dst or (c == U.BPF_JMP and x.imm) or (c == U.BPF_JMP32 and x.off):
        raise Fault("reserved-fields", "BPF_JA uses reserved fields", "bad jump encoding")
    return [(cfg.succ[i][0], st)]


def _exit_insn(env: Env, cfg: Cfg, st: State, i: int, x):
    if x.source or x.imm or x.src or x.dst or x.cls == U.BPF_JMP32:
        raise Fault("reserved-fields", "BPF_EXIT uses reserved fields", "bad exit encoding")
    return _exit(env, cfg, st, i)


def _call(env: Env, cfg: Cfg, st: State, i: int, x):
    if x.source or x.off or x.src not in (0, U.BPF_PSEUDO_CALL) or x.dst or x.cls == U.BPF_JMP32:
        if x.src == U.BPF_PSEUDO_KFUNC_CALL:
            raise Fault("kfunc", "kernel function calls are not supported by the checker", "")
        raise Fault("reserved-fields", "BPF_CALL uses reserved fields", "bad call encoding")
    if x.src == U.BPF_PSEUDO_CALL:
        return enter_call(env, cfg, st, i)
    if x.imm == BPF_FUNC_LOOP:
        return loop_call(env, cfg, st, i)
    check_helper_call(env, st, x.imm, cfg.slots[i])
    st.frames[-1].r0_at = i
    return None


def _cond(env: Env, cfg: Cfg, st: State, i: int, x):
    succ = cfg.succ[i]
    target = succ[-1] if len(succ) == 2 else succ[0]
    return do_cond_jump(env, st, i, x, target)


_BY_CLASS = {
    U.BPF_ALU: _alu,
    U.BPF_ALU64: _alu,
    U.BPF_LDX: _ldx,
    U.BPF_ST: _store,
    U.BPF_STX: _store,
    U.BPF_LD: _ld,
}
_BY_JMP_OP = {U.BPF_JA: _ja, U.BPF_EXIT: _exit_insn, U.BPF_CALL: _call}


def _handler(x):
    """The handler of one decoded instruction (abi.insn.Insn), by class and jump operation."""
    h = _BY_CLASS.get(x.cls)
    return h if h is not None else _BY_JMP_OP.get(x.op, _cond)


def _exit(env: Env, cfg: Cfg, st: State, i: int):
    r0 = _read(st, 0)
    if len(st.frames) > 1:  # back to the caller (checker.subprog)
        return leave(env, cfg, st, i)
    if st.refs:
        raise Fault(
            "unreleased-ref",
            f"Unreleased reference id={st.refs[0]}",
            "end every ring buffer reservation (bpf_ringbuf_submit or bpf_ringbuf_discard) "
            "and release every acquired socket (bpf_sk_release) on every path",
        )
    if env.entry:  # a global function verified on its own
        check_global_return(r0)
        return []
    _check_return(env, r0, st.cur.r0_at)
    return []


def _check_return(env: Env, r0: D.Reg, r0_at: int = -1) -> None:
    """Return value rules by program type; warnings name ``r0_at``, the insn that set r0
    on this path (its source line is where the verdict was chosen), when known."""
    pt = env.prog_type
    if pt == U.ProgramType.SOCK_OPS or pt in (U.ProgramType.CGROUP_SKB,):
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


def insn_text(x: Insn) -> str:
    return format_insn(x)
