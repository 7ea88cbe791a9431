"""Control-flow structure of one program (kernel check_subprogs + check_cfg).

Input: the decoded instruction list (ld_imm64 = one entry).  Output: :class:`Cfg` with
successors per instruction, subprogram starts (targets of BPF-to-BPF calls), the kernel's
prune points and jump-history points (``visit_insn``/``push_insn``: conditional jumps and
their targets, ``goto`` targets, the insn after every call, BPF-to-BPF calls and their
targets) and static register liveness (``compute_live_registers``) used when comparing
states.  Structural faults raise :class:`CfgError` with the kernel's message:
jumps out of range, a last insn that is not exit/jump, unreachable instructions.
:func:`loops` finds the natural loops (for saying where a walk went: checker/hotspot.py,
and at which jump an infinite loop is reported: :func:`closing_jump`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bpfdsl.abi.helpers import BPF_FUNC_LOOP, HELPERS_BY_ID
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.opcodes import (
    BPF_ALU,
    BPF_ALU64,
    BPF_ATOMIC,
    BPF_CMPXCHG,
    BPF_END,
    BPF_FETCH,
    BPF_IND,
    BPF_JMP,
    BPF_JMP32,
    BPF_K,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_NEG,
    BPF_PSEUDO_FUNC,
    BPF_ST,
    BPF_STX,
    BPF_X,
)


class CfgError(Exception):
    """A structural fault: ``idx`` = list index of the insn, message in kernel wording."""

    def __init__(self, idx: int, message: str, explain: str):
        super().__init__(message)
        self.idx = idx
        self.message = message
        self.explain = explain


class Cfg:
    """``insns``: the instructions as given (decoded :class:`~bpfdsl.abi.insn.Insn`);
    ``slots``: slot number per insn; ``succ``: successor indexes per insn; ``subprogs``:
    list indexes where subprograms start (0 first); ``subprog_of``: insn index -> subprog
    start index; ``prune``: prune points (kernel ``is_prune_point``); ``jmp_points``: insns
    reached other than by falling through, recorded in the jump history (kernel
    ``is_jmp_point``); ``live_in``: bitmask of the registers live before each insn
    (kernel ``live_regs_before``); ``call_target``: insn index of
    a BPF-to-BPF call -> index of the called function; ``func_refs``: ld_imm64 of a
    function address (a callback) -> index of the function; ``callback_calls``: helper
    calls that call a callback (bpf_loop: kernel ``calls_callback``, also forced
    checkpoints); ``heads``: loop heads (targets of back-edges)."""

    __slots__ = (
        "insns",
        "slots",
        "succ",
        "subprogs",
        "subprog_of",
        "prune",
        "jmp_points",
        "live_in",
        "call_target",
        "func_refs",
        "callback_calls",
        "heads",
    )

    def __init__(
        self,
        insns: Sequence[Insn],
        slots: list[int],
        succ: list[list[int]],
        subprogs: list[int],
        subprog_of: list[int],
        prune: set[int] | None = None,
    ):
        self.insns = insns
        self.slots = slots
        self.succ = succ
        self.subprogs = subprogs
        self.subprog_of = subprog_of
        self.prune = set() if prune is None else prune
        self.jmp_points: set[int] = set()
        self.live_in: list[int] = []
        self.call_target: dict[int, int] = {}
        self.func_refs: dict[int, int] = {}  # ld_imm64 BPF_PSEUDO_FUNC -> function start
        self.callback_calls: set[int] = set()
        self.heads: set[int] = set()


def build_cfg(insns: Sequence[Insn]) -> Cfg:
    """Check the program's shape and compute its successors, subprograms and liveness."""
    n = len(insns)
    if n == 0:
        raise CfgError(0, "program has no instructions", "the section is empty")
    # one pass for the slot numbers and the insns the next one looks at (a function
    # address is an ld_imm64, two slots wide; BPF-to-BPF calls are calls)
    slots: list[int] = []
    wide_or_call: list[int] = []
    s = 0
    for i, x in enumerate(insns):
        slots.append(s)
        w = x.width
        if w != 1 or x.is_call:
            wide_or_call.append(i)
        s += w
    total_slots = s
    by_slot = dict(zip(slots, range(n), strict=True))
    subprogs = {0}
    call_target: dict[int, int] = {}
    func_refs: dict[int, int] = {}
    for i in wide_or_call:
        x = insns[i]
        if x.is_ld_imm64 and x.src == BPF_PSEUDO_FUNC:  # a callback (kernel add_subprog)
            t = by_slot.get(slots[i] + 1 + x.imm)
            if t is None or x.off:
                raise CfgError(
                    i,
                    f"invalid bpf_ld_imm64 function reference to insn {slots[i] + 1 + x.imm}",
                    "the function address does not name an instruction of the program",
                )
            subprogs.add(t)
            func_refs[i] = t
        if x.is_pseudo_call:
            t = by_slot.get(slots[i] + 1 + x.imm)
            if t is None:
                dest = slots[i] + 1 + x.imm
                msg = (
                    f"function call to insn {dest} in the middle of ldimm64"
                    if 0 <= dest < total_slots
                    else f"call to invalid destination {dest}"
                )
                raise CfgError(i, msg, "the BPF-to-BPF call target is not an instruction")
            subprogs.add(t)
            call_target[i] = t
    starts = sorted(subprogs)
    if len(starts) == 1:
        subprog_of = [0] * n
    else:
        subprog_of = []
        for k, s in enumerate(starts):
            end = starts[k + 1] if k + 1 < len(starts) else n
            subprog_of += [s] * (end - s)
    for k in range(len(starts)):
        end = starts[k + 1] if k + 1 < len(starts) else n
        last = insns[end - 1]
        if not (last.is_exit or last.is_ja):
            raise CfgError(
                end - 1,
                "last insn is not an exit or jmp",
                "every function must end with `exit` or an unconditional jump",
            )
    succ: list[list[int]] = []
    prune: set[int] = set()
    jmp_points: set[int] = set()
    callback_calls: set[int] = set()
    heads: set[int] = set()  # targets of back-edges (t <= i)
    # reachability (kernel check_cfg: "unreachable insn") marked on the way: exact while
    # every edge goes forward (each insn's predecessors come before it), else redone below
    seen = [False] * n
    for s in starts:
        seen[s] = True
    dead = -1  # the first insn no forward edge reaches
    jmp, jmp32 = BPF_JMP, BPF_JMP32
    for i, x in enumerate(insns):
        if not seen[i] and dead < 0:
            dead = i
        c = x.cls
        if c != jmp and c != jmp32:
            if i in func_refs:
                # kernel visit_insn: bpf_pseudo_func is visit_func_call_insn(visit_callee):
                # the ld_imm64 itself, the insn after it and the function's start
                prune.update((i, i + 1, func_refs[i]))
                jmp_points.update((i + 1, func_refs[i]))
            if i + 1 >= n:
                raise CfgError(i, f"jump out of range from insn {slots[i]} to {slots[i] + 1}", "")
            succ.append([i + 1])
            if seen[i]:
                seen[i + 1] = True
            continue
        if x.is_exit:
            succ.append([])
            continue
        if not x.is_call:  # a jump (kernel: any JMP/JMP32 opcode but call and exit)
            dest = slots[i] + 1 + (x.imm if c == jmp32 and x.is_ja else x.off)
            t = by_slot.get(dest)
            if t is None:
                if 0 <= dest < total_slots:
                    raise CfgError(
                        i,
                        f"jump into the middle of ldimm64 insn {dest - 1}",
                        "the jump lands on the second half of a 64-bit load",
                    )
                raise CfgError(
                    i,
                    f"jump out of range from insn {slots[i]} to {dest}",
                    "the jump target is outside the program",
                )
            if subprog_of[t] != subprog_of[i]:
                raise CfgError(
                    i,
                    f"jump out of range from insn {slots[i]} to {dest}",
                    "a jump may not leave its function",
                )
            prune.add(t)
            jmp_points.add(t)
            if t <= i:
                heads.add(t)
            if x.is_ja:
                succ.append([t])
            else:
                prune.add(i)
                succ.append([i + 1, t] if t != i + 1 else [t])
                if seen[i]:
                    seen[i + 1] = True
            if seen[i]:
                seen[t] = True
            continue
        # kernel visit_func_call_insn: the return site of every call; a BPF-to-BPF
        # call itself and the called function's first insn too
        prune.add(i + 1)
        jmp_points.add(i + 1)
        if x.is_pseudo_call and i in call_target:
            prune.add(i)
            prune.add(call_target[i])
            jmp_points.add(call_target[i])
        if x.is_helper_call and x.imm == BPF_FUNC_LOOP:
            # kernel visit_insn, is_sync_callback_calling_insn: mark_calls_callback,
            # mark_force_checkpoint, a prune and a jump point
            callback_calls.add(i)
            prune.add(i)
            jmp_points.add(i)
        if i + 1 >= n:
            raise CfgError(i, f"jump out of range from insn {slots[i]} to {slots[i] + 1}", "")
        succ.append([i + 1])
        if seen[i]:
            seen[i + 1] = True
    if heads:  # a back-edge: reachability by a walk from each function's start
        seen = [False] * n
        for s in starts:
            todo = [s]
            seen[s] = True
            while todo:
                i = todo.pop()
                for t in succ[i]:
                    if not seen[t]:
                        seen[t] = True
                        todo.append(t)
        dead = seen.index(False) if not all(seen) else -1
    if dead >= 0:
        raise CfgError(
            dead,
            f"unreachable insn {slots[dead]}",
            "no path reaches this instruction; remove it (the kernel refuses dead code)",
        )
    # every prune and jump point is an insn here: one past the last insn raised above
    cfg = Cfg(insns, slots, succ, starts, subprog_of, prune)
    cfg.jmp_points = jmp_points
    cfg.call_target = call_target
    cfg.func_refs = func_refs
    cfg.callback_calls = callback_calls
    cfg.heads = heads
    cfg.live_in = _liveness(insns, succ, bool(heads))
    return cfg


def uses_defs(x: Insn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Registers an instruction reads and writes (r10 excluded)."""
    c = x.cls
    if c in (BPF_ALU, BPF_ALU64):
        if x.op == BPF_MOV:
            return ((x.src,) if x.source == BPF_X else ()), (x.dst,)
        if x.op in (BPF_END, BPF_NEG) or x.source == BPF_K:
            return (x.dst,), (x.dst,)
        return (x.dst, x.src), (x.dst,)
    if c == BPF_LDX:
        return (x.src,), (x.dst,)
    if c == BPF_ST:
        return (x.dst,), ()
    if c == BPF_STX:
        if x.mode == BPF_ATOMIC:
            if x.imm == BPF_CMPXCHG:
                return (x.dst, x.src, 0), (0,)
            if x.imm & BPF_FETCH:
                return (x.dst, x.src), (x.src,)
        return (x.dst, x.src), ()
    if c == BPF_LD:
        if x.is_ld_imm64:
            return (), (x.dst,)
        return ((6, x.src) if x.mode == BPF_IND else (6,)), (0, 1, 2, 3, 4, 5)
    if x.is_exit:
        return (0,), ()
    if x.is_call:
        if x.is_helper_call and x.imm in HELPERS_BY_ID:
            n = len(HELPERS_BY_ID[x.imm].args or ())  # modelled: args is set
            return tuple(range(1, n + 1)), (0, 1, 2, 3, 4, 5)
        return (1, 2, 3, 4, 5), (0, 1, 2, 3, 4, 5)
    if x.is_ja:
        return (), ()
    if x.is_cond_jump:
        return ((x.dst, x.src) if x.source == BPF_X else (x.dst,)), ()
    return (), ()


_R10 = 1 << 10
_R0_R5 = 0x3F  # r0-r5: what a call clobbers
_R1_R5 = 0x3E


def _use_def(x: Insn) -> tuple[int, int]:
    """:func:`uses_defs` as bitmasks (registers read, registers written), r10 included
    where it is named (the caller drops it)."""
    c = x.cls
    if c == BPF_ALU or c == BPF_ALU64:
        d = 1 << x.dst
        op = x.op
        if op == BPF_MOV:
            return ((1 << x.src) if x.source == BPF_X else 0), d
        if op == BPF_END or op == BPF_NEG or x.source == BPF_K:
            return d, d
        return d | 1 << x.src, d
    if c == BPF_LDX:
        return 1 << x.src, 1 << x.dst
    if c == BPF_ST:
        return 1 << x.dst, 0
    if c == BPF_STX:
        if x.mode == BPF_ATOMIC:
            if x.imm == BPF_CMPXCHG:
                return 1 << x.dst | 1 << x.src | 1, 1
            if x.imm & BPF_FETCH:
                return 1 << x.dst | 1 << x.src, 1 << x.src
        return 1 << x.dst | 1 << x.src, 0
    if c == BPF_LD:
        if x.is_ld_imm64:
            return 0, 1 << x.dst
        return ((1 << 6 | 1 << x.src) if x.mode == BPF_IND else 1 << 6), _R0_R5
    if x.is_exit:
        return 1, 0
    if x.is_call:
        if x.is_helper_call and x.imm in HELPERS_BY_ID:
            n = len(HELPERS_BY_ID[x.imm].args or ())  # modelled: args is set
            return ((1 << (n + 1)) - 2), _R0_R5
        return _R1_R5, _R0_R5
    if x.is_ja:
        return 0, 0
    if x.is_cond_jump:
        return ((1 << x.dst | 1 << x.src) if x.source == BPF_X else 1 << x.dst), 0
    return 0, 0


def _liveness(insns: Sequence[Insn], succ: list[list[int]], loops: bool = True) -> list[int]:
    """Bitmask of the registers live at the entry of each insn (kernel
    compute_live_registers); ``loops``: some edge goes backward."""
    n = len(insns)
    # least fixpoint of live[i] = (union of live[succ] & ~defs[i]) | uses[i] (r10 never
    # live): one backward pass when no edge goes backward, else a worklist
    live = [0] * n  # bitmasks
    if not loops:
        for i in range(n - 1, -1, -1):
            out = 0
            for t in succ[i]:
                out |= live[t]
            u, d = _use_def(insns[i])
            live[i] = (out & ~(d | _R10)) | (u & ~_R10)
        return live
    # the same backward pass first, keeping per insn the mask of registers not written
    # and of registers read; then only the equations a back-edge left stale (at the
    # jumps back, whose target was computed after them) and what they change, by a
    # worklist (the least fixpoint does not depend on the order)
    keep, use = [0] * n, [0] * n
    work: list[int] = []
    for i in range(n - 1, -1, -1):
        out = 0
        for t in succ[i]:
            out |= live[t]
            if t <= i:
                work.append(i)
        u, d = _use_def(insns[i])
        k = keep[i] = ~(d | _R10)
        u = use[i] = u & ~_R10
        live[i] = (out & k) | u
    preds: list[list[int]] = [[] for _ in range(n)]
    for i, ss in enumerate(succ):
        for t in ss:
            preds[t].append(i)
    inq = [False] * n
    for i in work:
        inq[i] = True
    while work:
        i = work.pop()
        inq[i] = False
        out = 0
        for t in succ[i]:
            out |= live[t]
        out = (out & keep[i]) | use[i]
        if out != live[i]:
            live[i] = out
            for p in preds[i]:
                if not inq[p]:
                    inq[p] = True
                    work.append(p)
    return live


# ---- natural loops ------------------------------------------------------------------------


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
