"""Stack slot liveness, path-insensitive (kernel/bpf/liveness.c, Linux 6.18).

While paths are walked, each instruction's stack reads ("may read": the union over its
visits) and full 8-byte slot writes ("must write": the intersection) are collected per
call chain; when a path ends, a backward data flow over the function's instructions
turns them into the slots that may still be read before each instruction
(``live_before``).  An explored state whose paths are all done is cleaned once, when it
is next compared: its dead slots become never-written (kernel clean_live_states), so
they do not keep it from covering a later state.

The kernel recomputes a function's whole data flow, round-robin in post-order until nothing
changes, at every path end whose marks changed (update_instance).  In a function without a
cycle the equations have one solution, whatever the starting values: there only the
instructions whose marks changed since the last update (``dirty``) and the predecessors
whose values change in turn are recomputed, successors first, which gives that solution
at a cost in the changed part, not in the function's length (a 2,000-rule program ends
a path 2,000 times).  A function with a loop is computed the kernel's way.
"""

from __future__ import annotations

import heapq

from bpfdsl.checker.state import Frame, Slot


class _Instance:
    """One call chain's marks (kernel func_instance): per frame of the chain, per insn."""

    __slots__ = (
        "depth", "may_read", "must_write", "seen", "live", "acc", "updated", "dropped",
        "dirty",
    )  # fmt: skip

    def __init__(self, depth: int, n: int):
        self.depth = depth
        self.may_read = [[0] * n for _ in range(depth + 1)]
        self.must_write = [[0] * n for _ in range(depth + 1)]
        self.seen = [False] * n  # kernel must_write_set
        self.live = [[0] * n for _ in range(depth + 1)]
        self.acc = [[0] * n for _ in range(depth + 1)]  # must_write_acc
        self.updated = False
        self.dropped = False
        # per frame: insns whose may_read / must_write changed since the last update
        self.dirty: list[set[int]] = [set() for _ in range(depth + 1)]


class _Order:
    """A function's insns in post-order (``order``), each one's position in it (``pos``),
    its predecessors inside the function (``preds``), and whether the function has a
    cycle (an edge to an insn not earlier in the post-order: a back edge)."""

    __slots__ = ("order", "pos", "preds", "cyclic")

    def __init__(self, order: list[int], succ: list[list[int]]):
        self.order = order
        self.pos: dict[int, int] = {i: p for p, i in enumerate(order)}
        self.preds: dict[int, list[int]] = {i: [] for i in order}
        cyclic = False
        for p, i in enumerate(order):
            for s in succ[i]:
                q = self.pos.get(s)
                if q is not None:
                    self.preds[s].append(i)
                    if q >= p:
                        cyclic = True
        self.cyclic = cyclic


class StackLiveness:
    """The analysis for one program: ``succ`` successors per insn (a call's successor is
    its return site), ``order``: insns of each function in post-order, by function
    start; ``subprog_of``: function start per insn."""

    def __init__(self, succ: list[list[int]], subprog_of: list[int], calls: dict[int, int]):
        self.n = len(succ)
        self.succ = succ
        self.subprog_of = subprog_of
        self.calls = calls
        self.instances: dict[tuple[int, ...], _Instance] = {}
        self._orders: dict[int, list[int]] = {}
        self._shapes: dict[int, _Order] = {}

    def instance(self, chain: tuple[int, ...]) -> _Instance:
        """The instance of call chain ``chain`` (call sites, outermost first)."""
        inst = self.instances.get(chain)
        if inst is None:
            inst = self.instances[chain] = _Instance(len(chain), self.n)
        return inst

    # ---- marks (kernel bpf_mark_stack_read, bpf_commit_stack_write_marks) ----

    def read(self, inst: _Instance, frame: int, idx: int, mask: int) -> None:
        mr = inst.may_read[frame]
        new = mr[idx] | mask
        if new != mr[idx]:
            if new | inst.live[frame][idx] != inst.live[frame][idx]:
                inst.updated = True
            mr[idx] = new
            inst.dirty[frame].add(idx)

    def commit_writes(self, inst: _Instance, idx: int, masks: list[int]) -> None:
        """The full-slot writes of one visit of insn ``idx`` (``masks`` per frame; 0 when
        the visit wrote none): must_write becomes the intersection over visits."""
        seen = inst.seen[idx]
        for fr in range(inst.depth + 1):
            mask = masks[fr] if fr < len(masks) else 0
            if mask == 0 and not seen:
                continue
            old = inst.must_write[fr][idx]
            if seen:
                mask &= old
            if old != mask:
                inst.must_write[fr][idx] = mask
                inst.updated = True
                inst.dirty[fr].add(idx)
            if old & ~mask:
                inst.dropped = True
        inst.seen[idx] = True

    # ---- propagation (kernel bpf_update_live_stack / update_instance) ----

    def _postorder(self, start: int) -> list[int]:
        order = self._orders.get(start)
        if order is not None:
            return order
        # depth-first from ``start`` inside its function, successors in order, as the
        # recursion would: a node is done when its successors are
        succ, sub = self.succ, self.subprog_of
        home = sub[start]
        order = []
        seen = [False] * self.n
        seen[start] = True
        nodes, its = [start], [iter(succ[start])]
        while nodes:
            for nxt in its[-1]:
                if not seen[nxt] and sub[nxt] == home:
                    seen[nxt] = True
                    nodes.append(nxt)
                    its.append(iter(succ[nxt]))
                    break
            else:
                its.pop()
                order.append(nodes.pop())
        self._orders[start] = order
        return order

    def update(self, frames: list[Frame]) -> None:
        """Before queries: bring the instances of the current path's call chains up to
        date, callee first (kernel: at every exit and path end)."""
        if len(frames) == 1:  # the main program's instance only
            inst = self.instances.get(())
            if inst is not None and inst.updated:
                self._update(inst, (), frames[0].subprog)
                inst.updated = inst.dropped = False
            return
        chain = tuple(f.callsite for f in frames[1:])
        for depth in range(len(frames) - 1, -1, -1):
            inst = self.instances.get(chain[:depth])
            if inst is not None and inst.updated:
                self._update(inst, chain[:depth], frames[depth].subprog)
                inst.updated = inst.dropped = False

    def _shape(self, start: int) -> _Order:
        shape = self._shapes.get(start)
        if shape is None:
            shape = self._shapes[start] = _Order(self._postorder(start), self.succ)
        return shape

    def _update(self, inst: _Instance, chain: tuple[int, ...], start: int) -> None:
        shape = self._shape(start)
        if shape.cyclic:
            self._update_rounds(inst, shape.order)
        else:
            self._update_acyclic(inst, shape)
        for dirty in inst.dirty:
            dirty.clear()
        if chain:
            # the callee's entry: what it may read and surely writes of the callers'
            # stacks counts at the call (kernel propagate_to_outer_instance)
            outer = self.instance(chain[:-1])
            site = chain[-1]
            masks = []
            for fr in range(inst.depth):
                self.read(outer, fr, site, inst.live[fr][start])
                masks.append(inst.acc[fr][start])
            self.commit_writes(outer, site, masks)

    def _update_acyclic(self, inst: _Instance, shape: _Order) -> None:
        """The one solution of the equations of a function without a cycle: the dirty
        insns, then each predecessor of an insn whose values changed, in post-order
        (successors first).  After dropped must_write marks every ``acc`` is recomputed
        from 0, in one pass over the post-order."""
        succ, pos, preds, order = self.succ, shape.pos, shape.preds, shape.order
        full = (1 << 64) - 1
        for fr in range(inst.depth + 1):
            live, acc = inst.live[fr], inst.acc[fr]
            mr, mw = inst.may_read[fr], inst.must_write[fr]
            if inst.dropped:
                for i in order:
                    acc[i] = 0
                for i in order:
                    ss = succ[i]
                    if not ss:
                        continue
                    after, a = 0, -1
                    for s in ss:
                        after |= live[s]
                        a &= acc[s]
                    live[i] = (after & ~mw[i]) | mr[i]
                    acc[i] = (a | mw[i]) & full
                continue
            heap = [pos[i] for i in inst.dirty[fr] if i in pos]
            if not heap:
                continue
            heapq.heapify(heap)
            queued = set(heap)
            while heap:
                p = heapq.heappop(heap)
                i = order[p]
                ss = succ[i]
                if not ss:
                    continue
                after, a = 0, -1
                for s in ss:
                    after |= live[s]
                    a &= acc[s]
                before = (after & ~mw[i]) | mr[i]
                a = (a | mw[i]) & full
                if before != live[i] or a != acc[i]:
                    live[i], acc[i] = before, a
                    for q in preds[i]:
                        qp = pos[q]
                        if qp not in queued:
                            queued.add(qp)
                            heapq.heappush(heap, qp)

    def _update_rounds(self, inst: _Instance, order: list[int]) -> None:
        """Round-robin over the post-order until nothing changes (kernel update_instance)."""
        succ = self.succ
        for fr in range(inst.depth + 1):
            live, acc = inst.live[fr], inst.acc[fr]
            mr, mw = inst.may_read[fr], inst.must_write[fr]
            if inst.dropped:
                for i in order:
                    acc[i] = 0
            changed = True
            while changed:
                changed = False
                for i in order:
                    ss = succ[i]
                    if not ss:
                        continue
                    after, a = 0, -1
                    for s in ss:
                        after |= live[s]
                        a &= acc[s]
                    before = (after & ~mw[i]) | mr[i]
                    a = (a | mw[i]) & ((1 << 64) - 1)
                    if before != live[i] or a != acc[i]:
                        live[i], acc[i] = before, a
                        changed = True

    # ---- queries (kernel bpf_stack_slot_alive) ----

    def alive(self, frames: list[Frame], idx: int, frame: int) -> int:
        """Bitmask of the live slots of frame ``frame`` of a state at insn ``idx``."""
        if len(frames) == 1:
            inst = self.instances.get(())
            return inst.live[frame][idx] if inst is not None else 0
        chain = tuple(f.callsite for f in frames[1:])
        top = len(frames) - 1
        inst = self.instances.get(chain)
        m = inst.live[frame][idx] if inst is not None else 0
        for i in range(frame, top):
            outer = self.instances.get(chain[:i])
            if outer is not None:
                m |= outer.live[frame][chain[i] + 1]
        return m

    def clean(self, frames: list[Frame], idx: int) -> None:
        """Dead slots of every frame become never written (kernel clean_func_state)."""
        for fi, f in enumerate(frames):
            if not f.stack:
                continue
            m = self.alive(frames, idx, fi)
            dead = [k for k in f.stack if not m >> k & 1]
            if dead:
                stack = dict(f.stack)
                for k in dead:
                    del stack[k]
                f.stack = stack


_ = Slot  # slots removed from a frame read back as never written (Slot())
