"""The userspace BPF machine: instruction semantics over checked (region, offset) memory.

Takes decoded instructions (:mod:`bpfdsl.abi.insn`, the one instruction table) with map
references already resolved (ld_imm64 carries the :class:`~bpfdsl.interp.maps.Map` or a
map-value pointer, see :mod:`bpfdsl.interp.program`) and runs them on a context.  Each
instruction is turned once into a Python closure returning the next index; a run is a
bounded loop over those closures.  Semantics follow the kernel's interpreter
(kernel/bpf/core.c ``___bpf_prog_run``): 32-bit ALU results are zero-extended, division
by zero gives 0 and modulo by zero keeps the dividend, shifts are masked, BPF-to-BPF
calls get a fresh 512-byte stack frame with r6-r9 and r10 preserved for the caller.
A bpf_loop callback runs the same way, from the helper (:meth:`Machine.call_function`);
a tail call (kernel ``bpf_tail_call``) goes on with the target program's instructions from
its start, on the same context and run state, at most MAX_TAIL_CALL_CNT times a run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bpfdsl.abi.insn import Insn, InsnError, format_insn, index_by_slot, slot_offsets, validate
from bpfdsl.abi.limits import MAX_BPF_STACK, MAX_CALL_FRAMES
from bpfdsl.abi.opcodes import BPF_PSEUDO_FUNC, BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
from bpfdsl.diagnostics import DiagnosticError, Span, UsageError, error
from bpfdsl.interp import helpers, helpers_events, helpers_sock
from bpfdsl.interp.jit import FILENAME, jit
from bpfdsl.interp.maps import Map
from bpfdsl.interp.memory import Fault, NotModelled, Ptr, Region, StackRegion
from bpfdsl.interp.state import Env, FuncRef, RunState, TailCall

DEFAULT_BUDGET = 1_000_000  # instructions per run (BPF_COMPLEXITY_LIMIT_INSNS)
_CALLBACK_DONE = -3  # the block index a callback frame returns to (ends call_function)
# helper id -> implementation: the table of each helper module, joined here
IMPLS = {**helpers.IMPLS, **helpers_sock.IMPLS, **helpers_events.IMPLS}


class InterpError(DiagnosticError):
    """A run stopped: out-of-bounds or invalid access, unknown helper, budget exhausted.

    ``insn_index``: list index of the instruction; ``slot``: its slot number (as in the
    kernel's verifier log); the diagnostic's span is the source line when known.
    """

    def __init__(
        self,
        message: str,
        insn_index: int,
        slot: int,
        text: str,
        span: Span | None,
        not_modelled: bool = False,
        code: str | None = None,
    ):
        self.insn_index = insn_index
        self.slot = slot
        note = (
            "the kernel supports this; the interpreter does not model it (use --engine kernel)"
            if not_modelled
            else "the kernel verifier would have rejected this program or this access"
        )
        code = code or ("interp-not-modelled" if not_modelled else "interp-fault")
        super().__init__(error(code, f"{message} (insn {slot}: {text})", span, note=note))


def resolve_fds(insns: Sequence[Insn], maps: dict[int, Map]) -> dict[int, object]:
    """ld_imm64 index -> value for ``BPF_PSEUDO_MAP_FD`` (imm = fd) and
    ``BPF_PSEUDO_MAP_VALUE`` (low 32 bits fd, high 32 bits offset into value 0)."""
    out: dict[int, object] = {}
    for i, x in enumerate(insns):
        if not x.is_ld_imm64 or x.src not in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
            continue
        v = x.imm & 0xFFFF_FFFF_FFFF_FFFF
        m = maps.get(v & 0xFFFFFFFF)
        if m is None:
            continue  # the machine reports the unresolved ld_imm64 when it runs
        if x.src == BPF_PSEUDO_MAP_FD:
            out[i] = m
        else:
            region = m.lookup(bytes(m.key_size))
            if region is not None:
                out[i] = Ptr(region, v >> 32)
    return out


class Machine(RunState):
    """Runs one program.

    ``insns``: the program; ``resolved``: list index of each ld_imm64 with a pseudo source
    -> its value (a :class:`~bpfdsl.interp.maps.Map`, or a :class:`Ptr` into a map value
    such as .rodata); ``maps``: for hand-built programs, the map of each fd that
    ``BPF_PSEUDO_MAP_FD`` / ``BPF_PSEUDO_MAP_VALUE`` ld_imm64s name (as the kernel resolves
    them); ``where(i)``: source span of instruction ``i`` or None; ``budget``:
    instructions per run.  ``ctx``/``redirect``/``redirect_miss``/``trace`` are per-run
    state: ``redirect`` the target of the last successful XDP redirect, ``redirect_miss``
    ``(map name, key, flags, why)`` of the last ``redirect_map`` whose slot was empty
    (``why`` = "empty") or whose flags the kernel refuses ("flags").
    """

    def __init__(
        self,
        insns: Sequence[Insn],
        *,
        env: Env | None = None,
        resolved: dict[int, object] | None = None,
        maps: dict[int, Map] | None = None,
        where: Callable[[int], Span | None] | None = None,
        budget: int = DEFAULT_BUDGET,
    ) -> None:
        self.insns = list(insns)
        self.resolved = dict(resolved or {})
        if maps:
            self.resolved.update(resolve_fds(self.insns, maps))
        self.env = env or Env()
        self.where = where
        self.budget = budget
        self.R: list[object] = [None] * 11
        self.frames: list[tuple[int, list[object]]] = []
        self.ctx: Region | None = None
        self.redirect: tuple | None = None
        self.redirect_miss: tuple | None = None
        self.trace: list[str] = []
        self.executed = 0
        self.tail_calls = 0
        self._cur: Machine = self  # the program whose instructions run (tail calls)
        self._slots = slot_offsets(self.insns)
        try:
            validate(self.insns)  # what the kernel refuses at load, before any run
        except InsnError as e:
            i = self._slots.index(e.slot) if e.slot in self._slots else 0
            raise self._error(e.reason, i, code="bad-insn") from None
        by_slot = index_by_slot(self.insns)
        for i, x in enumerate(self.insns):  # function addresses (bpf_loop callbacks)
            if x.is_ld_imm64 and x.src == BPF_PSEUDO_FUNC and i not in self.resolved:
                t = by_slot.get(self._slots[i] + 1 + x.imm)
                if t is not None:
                    self.resolved[i] = FuncRef(t)
        self._jit = jit(self.insns, self.resolved, IMPLS)
        self._extra = 0  # instructions run by callbacks (call_function) in this run

    # ---- running ----
    def run(self, ctx: Region) -> int:
        """Run from instruction 0 with r1 = the context; returns r0 (u64).

        Raises :class:`InterpError` on a fault or when the budget is spent.
        """
        env = self.env
        if not 0 <= env.cpu < env.ncpus:
            raise UsageError(
                error("bad-cpu", f"CPU {env.cpu} does not exist (the machine has {env.ncpus})")
            )
        R = self.R
        R[:] = [None] * 11
        self.frames = []
        self.ctx = ctx
        self.redirect = None
        self.redirect_miss = None
        self.trace = []
        R[1] = Ptr(ctx, 0)
        R[10] = Ptr(StackRegion(0), MAX_BPF_STACK)
        self._cur, self._extra, self.tail_calls = self, 0, 0
        budget = self.budget
        b, n = 0, 0
        while True:
            cur = self._cur
            blocks, sizes = cur._jit.blocks, cur._jit.sizes
            try:
                while b >= 0:
                    n += sizes[b]
                    if n + self._extra > budget:
                        raise Fault(f"instruction budget of {budget} exhausted (endless loop?)")
                    b = blocks[b](R, self)
                break
            except TailCall as t:
                b = self._tail_call(t, ctx, b)
            except Fault as e:
                err = self._error(str(e), self._fault_insn(e, b), isinstance(e, NotModelled))
                raise err from None
            except (TypeError, AttributeError) as e:  # a pointer or map where a scalar belongs
                msg = f"invalid operand: a pointer or map where a scalar is expected ({e})"
                raise self._error(msg, self._fault_insn(e, b)) from None
        self.executed = n + self._extra
        r0 = R[0]
        if type(r0) is not int:
            raise self._error("r0 at exit is not a scalar", len(self._cur.insns) - 1)
        return r0

    def _tail_call(self, t: TailCall, ctx: Region, b: int) -> int:
        """Go on with the program of a tail call: its instructions from the start, r1 =
        the context, a fresh stack (the kernel reuses the caller's frame, which the
        verifier makes the target write before it reads)."""
        target = getattr(t.program, "machine", t.program)
        assert isinstance(target, Machine)
        if self.frames:
            raise self._error(
                "a tail call from a BPF-to-BPF subprogram is not modelled",
                self._fault_insn(t, b),
                True,
            )
        self._cur = target
        R = self.R
        R[:] = [None] * 11
        R[1] = Ptr(ctx, 0)
        R[10] = Ptr(StackRegion(0), MAX_BPF_STACK)
        return 0

    def call_function(self, target: int, *args: object) -> object:
        """Run the function at instruction ``target`` of the running program (a bpf_loop
        callback) in a frame of its own with r1.. = ``args``; returns its r0.  Its
        instructions count against the run's budget."""
        if len(self.frames) + 1 >= MAX_CALL_FRAMES:
            raise Fault(f"call depth over {MAX_CALL_FRAMES} frames")
        R = self.R
        self.frames.append((_CALLBACK_DONE, R[6:11]))
        R[10] = Ptr(StackRegion(len(self.frames)), MAX_BPF_STACK)
        R[1:6] = [*args, *([None] * (5 - len(args)))]
        jitted = self._cur._jit
        blocks, sizes, budget = jitted.blocks, jitted.sizes, self.budget
        b, n = target, 0
        try:
            while b >= 0:
                n += sizes[b]
                if n + self._extra > budget:
                    raise Fault(f"instruction budget of {budget} exhausted (endless loop?)")
                b = blocks[b](R, self)
        except TailCall:
            raise NotModelled("a tail call inside a bpf_loop callback is not modelled") from None
        finally:
            self._extra += n
        return R[0]

    def _fault_insn(self, e: BaseException, block: int) -> int:
        """Instruction index of a fault: the generated line in the traceback."""
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == FILENAME:
                line = tb.tb_lineno
            tb = tb.tb_next
        lines = self._cur._jit.line_to_insn
        if line is not None and line in lines:
            return lines[line]
        return min(block, len(self._cur.insns) - 1)

    def _enter(self, ret: int, target: int) -> int:
        """BPF-to-BPF call: save r6-r9 and r10, give the callee a fresh stack frame."""
        if len(self.frames) + 1 >= MAX_CALL_FRAMES:
            raise Fault(f"call depth over {MAX_CALL_FRAMES} frames")
        R = self.R
        self.frames.append((ret, R[6:11]))
        R[10] = Ptr(StackRegion(len(self.frames)), MAX_BPF_STACK)
        return target

    def _leave(self) -> int:
        """exit: return to the caller (r1-r5 become unreadable) or end the run (-1)."""
        if not self.frames:
            return -1
        ret, saved = self.frames.pop()
        R = self.R
        R[6:11] = saved
        R[1] = R[2] = R[3] = R[4] = R[5] = None
        return ret

    def _error(
        self, msg: str, i: int, not_modelled: bool = False, code: str | None = None
    ) -> InterpError:
        cur = self._cur  # the program running (another after a tail call)
        i = max(0, min(i, len(cur.insns) - 1))
        span = cur.where(i) if cur.where else None
        text = format_insn(cur.insns[i])
        return InterpError(msg, i, cur._slots[i], text, span, not_modelled, code)
