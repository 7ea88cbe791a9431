"""The userspace BPF machine: instruction semantics over checked (region, offset) memory.

Takes decoded instructions (:mod:`bpfdsl.insn`, the one instruction table) with map
references already resolved (ld_imm64 carries the :class:`~bpfdsl.interp.maps.Map` or a
map-value pointer, see :mod:`bpfdsl.interp.program`) and runs them on a context.  Each
instruction is turned once into a Python closure returning the next index; a run is a
bounded loop over those closures.  Semantics follow the kernel's interpreter
(kernel/bpf/core.c ``___bpf_prog_run``): 32-bit ALU results are zero-extended, division
by zero gives 0 and modulo by zero keeps the dividend, shifts are masked, BPF-to-BPF
calls get a fresh 512-byte stack frame with r6-r9 and r10 preserved for the caller.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bpfdsl import uapi as U
from bpfdsl.diagnostics import DiagnosticError, Span, error
from bpfdsl.insn import Insn, format_insn, index_by_slot, jump_target, slot_offsets

from . import helpers_sock  # noqa: F401 (registers the socket helpers)
from .alu import alu_op, jmp_op
from .helpers import IMPLS
from .memory import M64, Fault, Ptr, Region, StackRegion

MAX_CALL_FRAMES = 8  # kernel/bpf/verifier.c
DEFAULT_BUDGET = 1_000_000  # instructions per run (BPF_COMPLEXITY_LIMIT_INSNS)


class InterpError(DiagnosticError):
    """A run stopped: out-of-bounds or invalid access, unknown helper, budget exhausted.

    ``insn_index``: list index of the instruction; ``slot``: its slot number (as in the
    kernel's verifier log); the diagnostic's span is the source line when known.
    """

    def __init__(self, message: str, insn_index: int, slot: int, text: str, span: Span | None):
        self.insn_index = insn_index
        self.slot = slot
        super().__init__(
            error(
                "interp-fault",
                f"{message} (insn {slot}: {text})",
                span,
                note="the kernel verifier would have rejected this program or this access",
            )
        )


@dataclass
class Env:
    """Settable machine state: clock (ns), CPU number and count, random seed."""

    clock_ns: int = 1_000_000_000
    clock_step_ns: int = 0  # added after every ktime read (0: a frozen clock)
    cpu: int = 0
    ncpus: int = 1
    seed: int = 0
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now_ns(self) -> int:
        t = self.clock_ns
        self.clock_ns += self.clock_step_ns
        return t


class _Exit(Exception):
    pass


class Machine:
    """Runs one program.

    ``insns``: the program; ``resolved``: list index of each ld_imm64 with a pseudo source
    -> its value (a :class:`~bpfdsl.interp.maps.Map`, or a :class:`Ptr` into a map value
    such as .rodata); ``where(i)``: source span of instruction ``i`` or None;
    ``budget``: instructions per run.  ``ctx``/``redirect``/``trace`` are per-run state.
    """

    def __init__(
        self,
        insns: Sequence[Insn],
        *,
        env: Env | None = None,
        resolved: dict[int, object] | None = None,
        where: Callable[[int], Span | None] | None = None,
        budget: int = DEFAULT_BUDGET,
    ) -> None:
        self.insns = list(insns)
        self.resolved = resolved or {}
        self.env = env or Env()
        self.where = where
        self.budget = budget
        self.R: list[object] = [None] * 11
        self.frames: list[tuple[int, list[object]]] = []
        self.ctx: Region | None = None
        self.redirect: tuple | None = None
        self.trace: list[str] = []
        self.executed = 0
        self._slots = slot_offsets(self.insns)
        self._ops = [self._compile(i, x) for i, x in enumerate(self.insns)]

    # ---- running ----
    def run(self, ctx: Region) -> int:
        """Run from instruction 0 with r1 = the context; returns r0 (u64).

        Raises :class:`InterpError` on a fault or when the budget is spent.
        """
        R = self.R
        for i in range(11):
            R[i] = None
        self.frames = []
        self.ctx = ctx
        self.redirect = None
        self.trace = []
        R[1] = Ptr(ctx, 0)
        R[10] = Ptr(StackRegion(0), 512)
        ops = self._ops
        pc = 0
        try:
            for _ in range(self.budget):
                pc = ops[pc]()
            raise Fault(f"instruction budget of {self.budget} exhausted (endless loop?)")
        except _Exit:
            pass
        except Fault as e:
            raise self._error(str(e), pc) from None
        except IndexError:
            raise self._error("fell off the end of the program", pc) from None
        r0 = R[0]
        if type(r0) is not int:
            raise self._error("r0 at exit is not a scalar", pc)
        return r0

    def _error(self, msg: str, i: int) -> InterpError:
        i = min(i, len(self.insns) - 1)
        span = self.where(i) if self.where else None
        return InterpError(msg, i, self._slots[i], format_insn(self.insns[i]), span)

    # ---- compile one instruction into a closure ----
    def _compile(self, i: int, x: Insn) -> Callable[[], int]:
        R = self.R
        nxt = i + 1
        c = x.cls
        if c in (U.BPF_ALU, U.BPF_ALU64):
            return alu_op(R, x, nxt)
        if x.is_exit:
            return self._op_exit()
        if x.is_call:
            return self._op_call(i, x, nxt)
        if c in (U.BPF_JMP, U.BPF_JMP32):
            tgt = jump_target(self.insns, i, self._slots, index_by_slot(self.insns))
            if tgt is None:
                return _bad(f"jump out of the program or into an ld_imm64 at {i}")
            return jmp_op(R, x, nxt, tgt)
        if x.is_ld_imm64:
            return self._op_ld_imm64(i, x, nxt)
        if c == U.BPF_LDX and x.mode in (U.BPF_MEM, U.BPF_MEMSX):
            return _op_load(R, x, nxt)
        if c in (U.BPF_ST, U.BPF_STX) and x.mode == U.BPF_MEM:
            return _op_store(R, x, nxt)
        if x.is_atomic:
            return _op_atomic(R, x, nxt)
        return _bad(f"unsupported instruction {format_insn(x)}")

    def _op_ld_imm64(self, i: int, x: Insn, nxt: int) -> Callable[[], int]:
        R, d = self.R, x.dst
        v: object = x.imm & M64
        if i in self.resolved:
            v = self.resolved[i]
        elif x.src != 0:
            return _bad(f"ld_imm64 with pseudo source {x.src} that names no known map")

        def op() -> int:
            R[d] = v
            return nxt

        return op

    def _op_exit(self) -> Callable[[], int]:
        R, frames = self.R, self.frames

        def op() -> int:
            if not self.frames:
                raise _Exit
            ret, saved = self.frames.pop()
            R[6:11] = saved
            for r in (1, 2, 3, 4, 5):
                R[r] = None
            return ret

        del frames
        return op

    def _op_call(self, i: int, x: Insn, nxt: int) -> Callable[[], int]:
        R = self.R
        if x.is_pseudo_call:
            tgt = jump_target(self.insns, i, self._slots, index_by_slot(self.insns))
            if tgt is None:
                return _bad(f"call to a bad target from {i}")

            def call_pc() -> int:
                if len(self.frames) + 1 >= MAX_CALL_FRAMES:
                    raise Fault(f"call depth over {MAX_CALL_FRAMES} frames")
                self.frames.append((nxt, R[6:11]))
                R[10] = Ptr(StackRegion(len(self.frames)), 512)
                return tgt

            return call_pc
        if not x.is_helper_call:
            return _bad("kfunc calls are not supported by the interpreter")
        impl = IMPLS.get(x.imm)
        if impl is None:
            return _bad(f"helper #{x.imm} is not implemented by the interpreter")

        def call() -> int:
            args = R[1:6]
            for k, a in enumerate(args):
                if a is None:
                    args[k] = 0
            v = impl(self, *args)
            R[0] = v if type(v) is Ptr else int(v) & M64
            for r in (1, 2, 3, 4, 5):
                R[r] = None
            return nxt

        return call


def _bad(msg: str) -> Callable[[], int]:
    def op() -> int:
        raise Fault(msg)

    return op


def _ptr(v: object, what: str) -> Ptr:
    if type(v) is not Ptr:
        raise Fault(f"{what} through a {'uninitialized register' if v is None else 'scalar'}")
    return v


def _op_load(R: list, x: Insn, nxt: int) -> Callable[[], int]:
    d, s, off, size = x.dst, x.src, x.off, x.size
    signed = x.mode == U.BPF_MEMSX

    def op() -> int:
        p = R[s]
        if type(p) is not Ptr:
            _ptr(p, "load")
        R[d] = p.region.load(p, off, size, signed)
        return nxt

    return op


def _op_store(R: list, x: Insn, nxt: int) -> Callable[[], int]:
    d, s, off, size = x.dst, x.src, x.off, x.size
    if x.cls == U.BPF_ST:
        imm = x.imm & M64

        def op_imm() -> int:
            p = R[d]
            if type(p) is not Ptr:
                _ptr(p, "store")
            p.region.store(p, off, size, imm)
            return nxt

        return op_imm

    def op() -> int:
        p, v = R[d], R[s]
        if type(p) is not Ptr:
            _ptr(p, "store")
        if v is None:
            raise Fault(f"store of uninitialized r{s}")
        if type(v) is not int and size != 8:
            raise Fault("partial store of a pointer")
        p.region.store(p, off, size, v)
        return nxt

    return op


def _op_atomic(R: list, x: Insn, nxt: int) -> Callable[[], int]:
    d, s, off, size, code = x.dst, x.src, x.off, x.size, x.imm
    if size not in (4, 8):
        return _bad("atomic operations take 4 or 8 bytes")
    mask = (1 << (size * 8)) - 1
    base = code & ~U.BPF_FETCH
    fns = {
        U.BPF_ADD: lambda a, b: a + b,
        U.BPF_AND: lambda a, b: a & b,
        U.BPF_OR: lambda a, b: a | b,
        U.BPF_XOR: lambda a, b: a ^ b,
    }
    if code not in (U.BPF_XCHG, U.BPF_CMPXCHG) and base not in fns:
        return _bad(f"unknown atomic operation {code:#x}")

    def op() -> int:
        p, v = R[d], R[s]
        p = _ptr(p, "atomic")
        if p.region.kind not in ("stack", "map_value"):
            raise Fault(f"atomic operation on {p.region.name} (only stack and map values)")
        if type(v) is not int:
            raise Fault(f"atomic operand r{s} is not a scalar")
        old = p.region.load(p, off, size)
        if code == U.BPF_CMPXCHG:
            r0 = R[0]
            if type(r0) is not int:
                raise Fault("cmpxchg: r0 is not a scalar")
            if (r0 & mask) == old:
                p.region.store(p, off, size, v & mask)
            R[0] = old
            return nxt
        if code == U.BPF_XCHG:
            p.region.store(p, off, size, v & mask)
        else:
            p.region.store(p, off, size, fns[base](old, v) & mask)
        if code & U.BPF_FETCH:
            R[s] = old
        return nxt

    return op
