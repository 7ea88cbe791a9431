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
decide how many instructions it walks, so the count here follows the kernel's.  What one
instruction does to a state is its handler's (checker/handlers.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Final

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.limits import BPF_COMPLEXITY_LIMIT_INSNS, BPF_COMPLEXITY_LIMIT_JMP_SEQ
from bpfdsl.abi.opcodes import (
    BPF_ST,
    BPF_STX,
)
from bpfdsl.checker import domain as D
from bpfdsl.checker.cfg import Cfg, closing_jump
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.handlers import Handler, general_handler, handler
from bpfdsl.checker.liveness import StackLiveness
from bpfdsl.checker.precision import Checkpoint, backtrack_table, mark_precise, wanted_from
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
    widen,
)

INSN_LIMIT: Final = BPF_COMPLEXITY_LIMIT_INSNS  # processed insns before the kernel refuses
HIST_FORCE: Final = 40  # kernel: a checkpoint is forced once a path's jump history is this long
TIME_CHECK_EVERY: Final = 4096  # processed insns between two looks at the clock
# a program's registers at its start: r1 the context, r10 frame 0's stack (registers are
# values, never changed in place: one set serves every walk)
_ENTRY_REGS = tuple(
    D.ptr(D.CTX) if r == 1 else D.ptr(D.STACK, map=0) if r == 10 else D.NOT_INIT_REG
    for r in range(11)
)


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
        return general_handler(x)(env, cfg, st, i, x)

    def again(env: Env, cfg: Cfg, st: State, i: int, x: Insn) -> list[tuple[int, State]] | None:
        """The second: the insn's handler for good, made for it where handlers.handler can."""
        h = handlers[i] = handler(x, cfg.succ[i])
        return h(env, cfg, st, i, x)

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
