"""Path exploration with state pruning, modelled on the kernel's (kernel/bpf/verifier.c
6.x ``do_check``, ``is_state_visited``, ``states_equal``, ``mark_chain_precision``).

Depth-first like the kernel: the fall-through first, the other branch pushed on a stack
(at most 8192 pending, BPF_COMPLEXITY_LIMIT_JMP_SEQ).  Every instruction walked counts,
re-walks and the pruned one included (``processed``, limit BPF_COMPLEXITY_LIMIT_INSNS =
1,000,000).  At a prune point the current state is compared with the checkpoints kept
there: one whose paths are all explored and which covers the current state (scalars by
type unless precise, live registers only) ends the path; one still on the current path
that equals it exactly is an infinite loop.  A checkpoint is added only after 2 jumps and
8 instructions since the last one (inside a loop: 20 jumps or 100 instructions); one that
misses more than 3 + 3 x its hits is dropped.  Those are the kernel's heuristics; they
decide how many instructions it walks, so the count here follows the kernel's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from bpfdsl.abi.helpers import BPF_FUNC_LOOP, BPF_FUNC_TAIL_CALL
from bpfdsl.abi.insn import Insn, format_insn
from bpfdsl.abi.limits import BPF_COMPLEXITY_LIMIT_INSNS, BPF_COMPLEXITY_LIMIT_JMP_SEQ
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
from bpfdsl.checker.liveness import StackLiveness
from bpfdsl.checker.precision import Checkpoint, backtrack_table, mark_precise, wanted_from
from bpfdsl.checker.refs import calls_locked, exit_locked, global_call_locked, leak_fault
from bpfdsl.checker.report import fmt_state
from bpfdsl.checker.state import (
    EXACT,
    NOT_EXACT,
    RANGE_WITHIN,
    CoverPlan,
    Frame,
    FramesPlan,
    Hist,
    State,
    covers,
    covers_frames,
    states_equal,
    states_maybe_looping,
)
from bpfdsl.checker.subprog import (
    check_global_return,
    enter_call,
    is_callback_frame,
    leave,
    loop_call,
    tail_call_exit,
    widen,
)
from bpfdsl.checker.transfer import (
    do_alu,
    do_ld,
    do_ldx,
    do_store,
    fork_scalars,
    read_reg,
)

# the handler of one instruction ("one instruction" below): None = the next instruction,
# same state; else the successors [(index, state), ...] (empty: the path ended)
Handler = Callable[[Env, Cfg, State, int, Insn], list[tuple[int, State]] | None]

INSN_LIMIT: Final = BPF_COMPLEXITY_LIMIT_INSNS  # processed insns before the kernel refuses
HIST_FORCE: Final = 40  # kernel: a checkpoint is forced once a path's jump history is this long
TIME_CHECK_EVERY: Final = 4096  # processed insns between two looks at the clock


@dataclass(slots=True)
class Outcome:
    """Analysis result: the first fault (index, Fault, state text, regs) or None;
    ``processed``: instructions walked (the kernel's "processed N insns"); ``states``:
    checkpoints made (kernel total_states), ``peak_states``, ``max_states_per_insn``;
    ``path``: branch decisions to the fault, oldest first; ``visits``: times each insn was
    walked (for locating the loop or branch that costs the most); ``timed_out``: the
    analysis stopped at the time budget (no verdict)."""

    fault: tuple[int, Fault, str, dict[int, str]] | None
    processed: int
    states: int
    path: list[tuple[int, bool]] | None = None
    peak_states: int = 0
    max_states_per_insn: int = 0
    visits: list[int] = field(default_factory=list)
    timed_out: bool = False


def _trail(st: State) -> list[tuple[int, bool]]:
    out = []
    t = st.trail
    while t is not None:
        out.append((t[0], t[1]))
        t = t[2]
    return out[::-1]


def _live_masks(cfg: Cfg, st: State, i: int) -> list[int]:
    """Live registers per frame: the current frame's before insn ``i``, a caller's before
    its call (kernel live_regs_before at bpf_frame_insn_idx)."""
    live = cfg.live_in
    fs = st.frames
    if len(fs) == 1:
        return [live[i]]
    out = [live[fs[k + 1].callsite] for k in range(len(fs) - 1)]
    out.append(live[i])
    return out


def _same_callsites(a: list[Frame], b: list[Frame]) -> bool:
    """The two states' frames were made by the same calls (kernel: same callsite per
    frame, clean_live_states' condition)."""
    if len(a) != len(b):
        return False
    if len(a) == 1:
        return a[0].callsite == b[0].callsite
    for x, y in zip(a, b, strict=True):
        if x.callsite != y.callsite:
            return False
    return True


class _Explorer:
    """One analysis: the explored checkpoints and the kernel's counters."""

    def __init__(self, env: Env, cfg: Cfg, deadline: float | None, tables: Tables) -> None:
        self.env, self.cfg = env, cfg
        self.explored: dict[int, list[Checkpoint]] = {}
        self.processed = 0
        self.jmps = 0
        self.prev_jmps = 0
        self.prev_insns = 0
        self.total_states = 0
        self.cur_states = 0  # checkpoints still listed or referenced by a live path
        self.peak_states = 0
        self.max_per_insn = 0
        self.uninit_ok = env.privileged
        self.deadline = deadline
        self.live = StackLiveness(cfg.succ, cfg.subprog_of, cfg.call_target)
        # calls of global functions: not entered, r0 set (kernel backtrack_insn)
        self.global_calls = tables.global_calls
        # made when first needed (a small program may walk fewer insns than it has):
        # per insn the live registers in order, and precision's backtrack_table
        self.live_regs: list[tuple[int, ...] | None] = [None] * len(cfg.live_in)
        self.bt_table: list[tuple[int, int, int]] | None = None

    # ---- branch counts (kernel update_branch_counts) ----

    def finish(self, st: State) -> None:
        cp: Checkpoint | None = st.parent
        while cp is not None:
            cp.branches -= 1
            if cp.branches:
                break
            if not cp.listed:
                self.cur_states -= 1
            cp = cp.parent

    # ---- precision ----

    def precise(self, st: State, i: int, regs: list[int], slots: list[int]) -> None:
        cfg = self.cfg
        if self.bt_table is None:
            self.bt_table = backtrack_table(cfg.insns, self.global_calls)
        mark_precise(
            cfg.insns,
            cfg.call_target,
            st,
            i,
            regs,
            slots,
            self.bt_table,
            self.global_calls,
            cfg.callback_calls,
        )

    def callback_returned(self, st: State, callsite: int) -> None:
        """A callback's path is back at its bpf_loop call: widen the state against the
        checkpoint there on this path (kernel prepare_func_exit: find_prev_entry,
        widen_imprecise_scalars)."""
        sites = [f.callsite for f in st.frames]
        for cp in reversed(self.explored.get(callsite, ())):
            if cp.branches and [f.callsite for f in cp.state.frames] == sites:
                widen(cp.state, cp.prec, cp.sprec, st)
                return

    def _hit(self, cp: Checkpoint, st: State, i: int, prev: int, hist: Hist | None) -> bool:
        """``cp`` covers the current state: the path is pruned; what ``cp`` needed exact
        the current path needs exact too (kernel propagate_precision)."""
        cp.hit += 1
        if i in self.cfg.jmp_points:
            st.hist = Hist(i, prev, None, None, hist)
        if cp.branches:  # on the current path (a callback's way back): marks still grow
            wregs, wslots = wanted_from(cp)
        else:  # frozen: its marks are final
            w = cp.wanted
            if w is None:
                w = cp.wanted = wanted_from(cp)
            wregs, wslots = w
        if any(wregs) or any(wslots):
            self.precise(st, i, wregs, wslots)
        return True

    # ---- kernel is_state_visited: True when the path is pruned here ----

    def visited(self, st: State, i: int, prev: int) -> bool:
        hist = st.hist
        callback_call = i in self.cfg.callback_calls  # kernel calls_callback, a forced checkpoint
        force = callback_call or (hist is not None and hist.count > HIST_FORCE)
        djmps, dinsns = self.jmps - self.prev_jmps, self.processed - self.prev_insns
        add = force or (djmps >= 2 and dinsns >= 8)
        lst = self.explored.get(i)
        if lst is None:
            lst = self.explored[i] = []
        n = len(lst)
        if n > self.max_per_insn:
            self.max_per_insn = n
        uninit_ok = self.uninit_ok
        simple = len(st.frames) == 1 and not st.refs
        multi = not simple and not st.refs  # more frames, no references: FramesPlan
        sites: tuple[int, ...] | None = None  # the current state's callsites, once needed
        live: list[int] | None = None
        live_regs = self.live_regs[i]
        if live_regs is None:
            m = self.cfg.live_in[i]
            live_regs = self.live_regs[i] = tuple(r for r in range(11) if m >> r & 1)
        cur_types: tuple | None = None  # the live registers' types, once needed
        regs = st.frames[0].regs
        for k in range(n - 1, -1, -1):  # newest first (kernel: list_add at the head)
            cp = lst[k]
            plan = cp.plan  # set only once cp.branches is 0 (and that is for good)
            if plan is not None and simple:  # the common case first: a frozen, planned cp
                pr = plan.pre_reg
                if pr >= 0 and (
                    regs[pr].tn != plan.pre_tn
                    if plan.pre_tn is not None
                    else regs[pr].umin < plan.pre_umin or regs[pr].umax > plan.pre_umax
                ):
                    hit = False  # the plan's first check fails: covers() would say so
                else:
                    if cur_types is None:
                        cur_types = tuple([regs[r].t for r in live_regs])
                    hit = covers(plan, cp.state, cp.sprec[0], st, cur_types, uninit_ok)
            elif multi and cp.fplan is not None:  # frozen, planned, more frames
                if sites is None:
                    sites = tuple([f.callsite for f in st.frames])
                fplan = cp.fplan
                pr = fplan.pre_reg
                if fplan.sites != sites:
                    hit = False  # other calls: never covered
                else:
                    if pr >= 0:
                        pre = st.frames[fplan.pre_frame].regs[pr]
                        if (
                            pre.tn != fplan.pre_tn
                            if fplan.pre_tn is not None
                            else pre.umin < fplan.pre_umin or pre.umax > fplan.pre_umax
                        ):
                            pr = -2  # the plan's first check fails: covers_frames() would say so
                    hit = pr != -2 and covers_frames(fplan, cp.state, cp.sprec, st, uninit_ok)
            elif plan is None and cp.branches and callback_call:
                # the callback's way back to its call: covered by range on this path
                if live is None:
                    live = _live_masks(self.cfg, st, i)
                if states_equal(cp.state, cp.prec, cp.sprec, st, live, RANGE_WITHIN, uninit_ok):
                    return self._hit(cp, st, i, prev, hist)
                if not force and djmps < 20 and dinsns < 100:
                    add = False
                hit = False
            elif plan is None and cp.branches:
                # on the current path: an exact repeat is an infinite loop (not between
                # visits of a callback: kernel callback_unroll_depth)
                if cp.state.cb_unroll == st.cb_unroll and states_maybe_looping(cp.state, st, 0x7FF):
                    if live is None:
                        live = _live_masks(self.cfg, st, i)
                    if states_equal(cp.state, cp.prec, cp.sprec, st, live, EXACT, uninit_ok):
                        raise _InfiniteLoop(i)
                if not force and djmps < 20 and dinsns < 100:
                    add = False
                hit = False
            else:
                if plan is None and not cp.cleaned:
                    # kernel clean_live_states: once all its paths are done, a state's
                    # dead stack slots are dropped (with the liveness known now)
                    if _same_callsites(cp.state.frames, st.frames):
                        cp.cleaned = True
                        self.live.clean(cp.state.frames, i)
                        if simple and not cp.state.refs:
                            plan = cp.plan = CoverPlan(cp.state, cp.prec[0], live_regs, uninit_ok)
                        elif multi and not cp.state.refs:
                            if live is None:
                                live = _live_masks(self.cfg, st, i)
                            cp.fplan = FramesPlan(cp.state, cp.prec, live, uninit_ok)
                if plan is not None and simple:
                    if cur_types is None:
                        cur_types = tuple([regs[r].t for r in live_regs])
                    hit = covers(plan, cp.state, cp.sprec[0], st, cur_types, uninit_ok)
                elif multi and cp.fplan is not None:  # just made: the callsites are the same
                    hit = covers_frames(cp.fplan, cp.state, cp.sprec, st, uninit_ok)
                else:
                    if live is None:
                        live = _live_masks(self.cfg, st, i)
                    hit = states_equal(cp.state, cp.prec, cp.sprec, st, live, NOT_EXACT, uninit_ok)
            if hit:
                return self._hit(cp, st, i, prev, hist)
            if add:  # (a miss count only grows here, so only here can it pass the limit)
                cp.miss += 1
                if cp.miss > cp.hit * 3 + 3:
                    del lst[k]
                    cp.listed = False
                    if cp.branches == 0:
                        self.cur_states -= 1
        if not add:
            return False
        if live is None:
            live = _live_masks(self.cfg, st, i)
        cp = Checkpoint(st.copy(), i, prev, live)
        cp.state.parent = None
        cp.state.hist = None
        lst.append(cp)
        self.total_states += 1
        self.cur_states += 1
        if self.cur_states > self.peak_states:
            self.peak_states = self.cur_states
        self.prev_jmps, self.prev_insns = self.jmps, self.processed
        st.parent = cp
        st.first_idx = i
        st.hist = None
        return False


class _InfiniteLoop(Exception):
    def __init__(self, idx: int) -> None:
        self.idx = idx


_PRUNE: Final = 1  # per-insn flags of analyze()
_JMP_POINT: Final = 2
_EXIT: Final = 4
_STORE: Final = 8
_JMP: Final = 16
_OPCODE_FLAGS: dict[int, int] = {}  # opcode byte -> its _EXIT, _STORE, _JMP flags


def _opcode_flags(x: Insn) -> int:
    """The flags of analyze() that depend on the opcode only (exit, store, jump)."""
    return (
        (_EXIT if x.is_exit else 0)
        | (_STORE if x.cls in (BPF_ST, BPF_STX) else 0)
        | (_JMP if x.is_jmp_class else 0)
    )


class Tables:
    """Per-insn tables of one program, made once and shared by the walks of the program
    and of each of its global functions (a walk of a global function touches only its
    own insns; remaking whole-program tables for each of 200 functions made that cost
    quadratic): ``flags`` (prune point, jump point, exit, store, jump), ``handlers`` (the
    insn's handler, specialised on its second walk) and ``visits`` (walks of each insn,
    summed over all the walks); ``global_calls``, the calls of global functions (not
    entered, r0 set: kernel backtrack_insn)."""

    __slots__ = ("flags", "handlers", "visits", "global_calls", "counters")

    def __init__(self, env: Env, cfg: Cfg) -> None:
        dec = cfg.insns
        by_op = _OPCODE_FLAGS
        flags = [by_op.get(x.opcode, -1) for x in dec]
        if -1 in flags:  # an opcode not seen before: its flags, once
            for k, x in enumerate(dec):
                if flags[k] < 0:
                    flags[k] = by_op[x.opcode] = _opcode_flags(x)
        for k in cfg.prune:
            flags[k] |= _PRUNE
        for k in cfg.jmp_points:
            flags[k] |= _JMP_POINT
        self.flags = flags
        self.handlers: list[Handler] = []  # filled by analyze(), which owns the first-visit handler
        self.visits = [0] * len(dec)
        # (jumps processed, and the jumps / insns processed at the last checkpoint added)
        # where the previous walk of the program ended: the kernel's env counters run on
        # from the program into its global functions
        self.counters = (0, 0, 0)
        self.global_calls = frozenset(
            i for i, t in cfg.call_target.items() if getattr(env.subprogs.get(t), "is_global", 0)
        )


def analyze(
    env: Env,
    cfg: Cfg,
    deadline: float | None = None,
    entry: int = 0,
    regs: list[D.Reg] | None = None,
    base: int = 0,
    tables: Tables | None = None,
) -> Outcome:
    """Walk all paths of the program described by ``cfg``; stop at the first fault, at
    the kernel's limits, or at ``deadline`` (a time.perf_counter() value).

    ``entry``/``regs``: the function to verify and its registers at the start (a global
    function verified on its own, see checker.subprog); default the program, r1 = ctx.
    ``base``: instructions already processed for this program (the kernel's limit counts
    the program and its global functions together); ``processed`` includes it.  The
    call graph's stack and frame limits are checked by the caller, once every function's
    stack depth is known (subprog.check_call_graph).  ``tables``: the program's
    :class:`Tables` when several walks share them (``visits`` then adds up)."""
    if tables is None:
        tables = Tables(env, cfg)
    env.live_in = cfg.live_in
    ex = _Explorer(env, cfg, deadline, tables)
    dec = cfg.insns

    def first_visit(
        env: Env, cfg: Cfg, st: State, i: int, x: Insn
    ) -> list[tuple[int, State]] | None:
        """The first walk of an insn: its general handler (what most insns of a small
        program get, making one for it would cost more than it saves)."""
        handlers[i] = again
        h = general.get(x.opcode)
        if h is None:  # the general handler depends on the opcode only
            h = general[x.opcode] = _handler(x, cfg.succ[i], made=False)
        return h(env, cfg, st, i, x)

    def again(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
        """The second: the insn's handler for good, made for it where _handler can."""
        h = handlers[i] = _handler(x, cfg.succ[i])
        return h(env, cfg, st, i, x)

    general = _GENERAL
    handlers = tables.handlers
    if not handlers:
        handlers.extend([first_visit] * len(dec))
    flags, visits = tables.flags, tables.visits
    if regs is None:
        regs = list(_ENTRY_REGS)
    start = State([Frame(regs, {}, -1, 0, entry)])
    stack: list[tuple[int, State, int]] = [(entry, start, -1)]
    next_clock = min(base + TIME_CHECK_EVERY, INSN_LIMIT + 1)
    # kept in locals; ex.processed / ex.jmps synced for visited()
    processed = base
    jmps, prev_jmps, prev_insns = tables.counters
    ex.prev_jmps, ex.prev_insns = prev_jmps, prev_insns
    ex.processed = base
    want_regs, want_slots, live_reads = env.want_regs, env.want_slots, env.live_reads

    def out(
        fault: tuple[int, Fault, str, dict[int, str]] | None = None,
        path: list[tuple[int, bool]] | None = None,
        timed_out: bool = False,
    ) -> Outcome:
        tables.counters = (jmps, ex.prev_jmps, ex.prev_insns)
        return Outcome(
            fault,
            processed,
            ex.total_states,
            path,
            ex.peak_states,
            ex.max_per_insn,
            visits,
            timed_out,
        )

    while stack:
        i, st, prev = stack.pop()
        while True:
            env.cur_idx = i
            processed += 1
            visits[i] += 1
            fl = flags[i]
            if processed >= next_clock:  # the clock's turn, or the insn limit's
                if processed > INSN_LIMIT:
                    limit = Fault(
                        "too-complex",
                        f"BPF program is too large. Processed {processed} insn",
                        "too many paths or loop iterations to verify; bound loops by small "
                        "constants and reduce branching",
                    )
                    return out((i, limit, fmt_state(st.regs), {}))
                next_clock = min(next_clock + TIME_CHECK_EVERY, INSN_LIMIT + 1)
                if deadline is not None and time.perf_counter() > deadline:
                    return out(timed_out=True)
            if fl & _PRUNE:
                ex.processed, ex.jmps = processed, jmps
                try:
                    if ex.visited(st, i, prev):
                        ex.live.update(st.frames)
                        ex.finish(st)
                        break
                except _InfiniteLoop as e:
                    msg = f"infinite loop detected at insn {cfg.slots[e.idx]}"
                    loop = Fault(
                        "infinite-loop",
                        msg,
                        "the loop makes no progress: nothing that decides its exit changes "
                        "between iterations",
                    )
                    # reported at the jump closing the loop: the loop's own line
                    return out((closing_jump(cfg, i), loop, fmt_state(st.regs), {}))
            pushed = fl & _JMP_POINT
            if pushed:
                st.hist = Hist(i, prev, None, None, st.hist)
            frame = len(st.frames) - 1
            callback_exit = -1
            if frame and fl & _EXIT:
                ex.live.update(st.frames)  # kernel: at a function's exit, callee first
                callsite = st.frames[-1].callsite
                if callsite in cfg.callback_calls and st.regs[0].t == D.SCALAR:
                    # kernel prepare_func_exit: the callback's r0 is relied on exactly
                    callback_exit = callsite
                    ex.processed, ex.jmps = processed, jmps
                    ex.precise(st, i, [0] * frame + [1], [0] * (frame + 1))
            try:
                succ: list[tuple[int, State]] | None = handlers[i](env, cfg, st, i, dec[i])
            except Fault as f:
                before = fmt_state(st.regs)
                shown = {r: D.fmt_reg(st.regs[r]) for r in f.regs if r <= 10}
                return out((i, f, before, shown), _trail(st))
            if fl & _JMP:
                jmps += 1
            if live_reads or fl & _STORE:
                _stack_marks(ex, env, st, i)
            if want_regs or want_slots:
                _precision_requests(ex, env, st, i, frame)
            if env.hist_slot is not None or env.hist_linked is not None:
                # kernel: pushed before the other branch is made, so both branches share
                # the record (a jump's linked registers)
                slot, linked = env.hist_slot, env.hist_linked
                _record(st, i, prev, env, bool(pushed))
                for _j, other in succ or ():
                    if other is not st:
                        env.hist_slot, env.hist_linked = slot, linked
                        _record(other, i, prev, env, bool(pushed))
            if callback_exit >= 0:
                ex.callback_returned(st, callback_exit)
            prev = i
            if succ is None:  # fall through with the same state
                i += 1
                continue
            if not succ:
                ex.live.update(st.frames)
                ex.finish(st)
                break
            if len(succ) == 2:
                (i, st), (j, other) = succ
                st.trail = (prev, False, st.trail)
                other.trail = (prev, True, other.trail)
                if other.parent is not None:
                    other.parent.branches += 1
                stack.append((j, other, prev))
                if len(stack) > BPF_COMPLEXITY_LIMIT_JMP_SEQ:
                    seq = Fault(
                        "too-complex",
                        f"The sequence of {len(stack)} jumps is too complex.",
                        "too many pending branches; simplify the control flow",
                    )
                    return out((i, seq, fmt_state(st.regs), {}))
            else:
                i, st = succ[0]
    return out()


def _stack_marks(ex: _Explorer, env: Env, st: State, i: int) -> None:
    """The insn's stack reads and whole-slot writes, for stack liveness (kernel
    bpf_mark_stack_read / bpf_commit_stack_write_marks)."""
    live = ex.live
    fs = st.frames
    inst = live.instance(() if len(fs) == 1 else tuple(f.callsite for f in fs[1:]))
    for fr, k in env.live_reads:
        live.read(inst, fr, i, 1 << k)
    env.live_reads.clear()
    if ex.cfg.insns[i].cls in (BPF_ST, BPF_STX):
        masks = [0] * (inst.depth + 1)
        for fr, k in env.live_writes:
            if fr <= inst.depth:
                masks[fr] |= 1 << k
        live.commit_writes(inst, i, masks)
    env.live_writes.clear()


@dataclass(slots=True)
class Loop:
    """A natural loop of the control flow: ``head`` (its entry insn), ``latches`` (the
    jumps back to the head), ``body`` (insn indexes, head included)."""

    head: int
    latches: list[int]
    body: frozenset[int]

    @property
    def closing(self) -> int:
        """The last jump back to the head: where the loop's own source line is."""
        return max(self.latches)


def loops(cfg: Cfg) -> list[Loop]:
    """The program's loops: edges to an insn on the depth-first path (retreating edges),
    each head's body the insns that reach a latch without passing the head."""
    succ = cfg.succ
    latches: dict[int, list[int]] = {}
    state = [0] * len(succ)  # 0 new, 1 on the path, 2 done
    for start in cfg.subprogs:
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, iter(succ[start]))]
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state[nxt] == 1:
                latches.setdefault(nxt, []).append(node)
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(succ[nxt])))
    preds: list[list[int]] = [[] for _ in succ]
    for a, ss in enumerate(succ):
        for b in ss:
            preds[b].append(a)
    out = []
    for head, ls in sorted(latches.items()):
        body = {head}
        todo = [x for x in ls if x != head]
        body.update(todo)
        while todo:
            for p in preds[todo.pop()]:
                if p not in body:
                    body.add(p)
                    todo.append(p)
        out.append(Loop(head, sorted(ls), frozenset(body)))
    return out


def closing_jump(cfg: Cfg, i: int) -> int:
    """The jump that closes the innermost loop around insn ``i`` (``i`` if none)."""
    inner = [(len(lp.body), lp.closing) for lp in loops(cfg) if i in lp.body]
    return min(inner)[1] if inner else i


@dataclass(slots=True)
class HotSpot:
    """Where a walk spent its instructions: ``idx`` (insn to report at: the jump closing
    the loop, or the branch), ``kind`` ("loop" or "branch"), ``visits`` (times that loop's
    head or that branch was walked), ``share`` (fraction of all walked instructions in
    that loop's body, or 0 for a branch), ``outer``: jumps closing the loops around it,
    innermost first."""

    idx: int
    kind: str
    visits: int
    share: float
    outer: list[int]


def hot_spot(cfg: Cfg, visits: list[int]) -> HotSpot | None:
    """The loop whose head was walked most often, else the conditional jump walked most
    often: what makes the verifier's walk long (None for a program without either)."""
    total = sum(visits) or 1
    lps = loops(cfg)
    if lps:
        lp = max(lps, key=lambda x: (visits[x.head], -len(x.body)))
        work = sum(visits[k] for k in lp.body)
        outer = sorted((len(o.body), o.closing) for o in lps if o is not lp and lp.body < o.body)
        return HotSpot(lp.closing, "loop", visits[lp.head], work / total, [c for _, c in outer])
    branches = [k for k, x in enumerate(cfg.insns) if x.is_cond_jump]
    if not branches:
        return None
    k = max(branches, key=lambda b: (visits[b], -b))
    return HotSpot(k, "branch", visits[k], 0.0, [])


def _precision_requests(ex: _Explorer, env: Env, st: State, i: int, frame: int) -> None:
    """Registers/slots the insn relied on exactly (env.want_*), marked precise behind
    the path (kernel mark_chain_precision at insn ``i`` in frame ``frame``)."""
    if not frame and not env.want_slots:  # the common case: registers of one frame
        m = 0
        for r in env.want_regs:
            m |= 1 << r
        env.want_regs.clear()
        ex.precise(st, i, [m], [0])
        return
    regs = [0] * (frame + 1)
    slots = [0] * (frame + 1)
    for r in env.want_regs:
        regs[frame] |= 1 << r
    for fr, k in env.want_slots:
        if fr <= frame:
            slots[fr] |= 1 << k
    env.want_regs.clear()
    env.want_slots.clear()
    ex.precise(st, i, regs, slots)


def _record(st: State, i: int, prev: int, env: Env, pushed: bool) -> None:
    """The insn's stack access / linked registers in the path's jump history, in the
    record ``pushed`` for this visit of insn ``i`` if there is one (kernel
    push_jmp_history with cur_hist_ent)."""
    h = st.hist
    slot, linked = env.hist_slot, env.hist_linked
    env.hist_slot = env.hist_linked = None
    if pushed and h is not None and h.idx == i:
        st.hist = Hist(i, prev, slot, linked, h.next)
    else:
        st.hist = Hist(i, prev, slot, linked, st.hist)


# ---- one instruction: a handler per instruction, chosen once (no per-step if-chain) ----
# A handler returns None for "next instruction, same state", else the successor list
# [(index, state), ...] (empty: the path ended).  The general handler serves an insn's
# first walk; from its second on, the commonest well-formed kinds get one made for that
# insn (_fast_alu, _cond_k: the checks and the immediate's register decided once), which
# hands every case it does not cover to the general one
# (tests/checker/test_checker_insn_handlers.py holds them to the same outcomes).


def _alu(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
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
    BPF_ALU: _alu,
    BPF_ALU64: _alu,
    BPF_LDX: _ldx,
    BPF_ST: _store,
    BPF_STX: _store,
    BPF_LD: _ld,
}
_BY_JMP_OP: Final[dict[int, Handler]] = {BPF_JA: _ja, BPF_EXIT: _exit_insn, BPF_CALL: _call}


def _handler(x: Insn, succ: list[int], made: bool = True) -> Handler:
    """The handler of one decoded instruction (abi.insn.Insn) whose successors are
    ``succ``, by class and jump operation; with ``made``, the commonest well-formed ALU
    instructions and conditional jumps on an immediate get one made for them
    (:func:`_fast_alu`, :func:`_cond_k`)."""
    h = _BY_CLASS.get(x.cls)
    if h is _alu:
        return (made and _fast_alu(x)) or h
    if h is not None:
        return h
    h = _BY_JMP_OP.get(x.op, _cond)
    if made and h is _cond and x.source == BPF_K and not x.src and x.dst <= 10 and x.op in _JMP_OPS:
        return _cond_k(x, succ[-1] if len(succ) == 2 else succ[0])
    return h


# a program's registers at its start: r1 the context, r10 frame 0's stack (registers are
# values, never changed in place: one set serves every walk)
_ENTRY_REGS = tuple(
    D.ptr(D.CTX) if r == 1 else D.ptr(D.STACK, map=0) if r == 10 else D.NOT_INIT_REG
    for r in range(11)
)
# opcode byte -> _handler(made=False) of its insns, for first walks
_GENERAL: dict[int, Handler] = {}

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
    immediate's register), else through _alu: ``dst op= imm`` on a scalar, ``dst = imm``,
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
            return _alu(env, cfg, st, i, x)
        if link and d.id and env.privileged:
            return _alu(env, cfg, st, i, x)
        if fork and ((d.smin == -1 and d.smax == 0) or (d.s32min == -1 and d.s32max == 0)):
            return _alu(env, cfg, st, i, x)  # maybe_fork_scalars: two states
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
                _alu(env, cfg, st, i, x)
                return
        elif t == D.SCALAR and s.umax > D.M32:
            regs[dst] = zext32(s)
        elif t == D.SCALAR and not s.id & D.ADD_CONST and (s.id or not s.tn[1]):
            regs[dst] = s  # as do_alu: a value that fits in 32 bits is copied whole
        else:  # a scalar to link to its copy, a pointer: do_alu
            _alu(env, cfg, st, i, x)
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


def insn_text(x: Insn) -> str:
    return format_insn(x)
