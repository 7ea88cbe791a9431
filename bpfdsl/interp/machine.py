"""The userspace BPF machine: instruction semantics over checked (region, offset) memory.

Takes decoded instructions (:mod:`bpfdsl.abi.insn`, the one instruction table) with map
references already resolved (ld_imm64 carries the :class:`~bpfdsl.interp.maps.Map` or a
map-value pointer, see :mod:`bpfdsl.interp.program`) and runs them on a context.  Each
instruction is turned once into a Python closure returning the next index; a run is a
bounded loop over those closures.  Semantics follow the kernel's interpreter
(kernel/bpf/core.c ``___bpf_prog_run``): 32-bit ALU results are zero-extended, division
by zero gives 0 and modulo by zero keeps the dividend, shifts are masked, BPF-to-BPF
calls get a fresh 512-byte stack frame with r6-r9 and r10 preserved for the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from bpfdsl.abi.insn import Insn, InsnError, format_insn, slot_offsets, validate
from bpfdsl.abi.uapi import BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
from bpfdsl.diagnostics import DiagnosticError, Span, UsageError, error
from bpfdsl.interp import helpers, helpers_events, helpers_sock
from bpfdsl.interp.jit import FILENAME, jit
from bpfdsl.interp.maps import Map
from bpfdsl.interp.memory import Fault, NotModelled, Ptr, Region, StackRegion
from bpfdsl.interp.state import Env, RunState

MAX_CALL_FRAMES = 8  # kernel/bpf/verifier.c
DEFAULT_BUDGET = 1_000_000  # instructions per run (BPF_COMPLEXITY_LIMIT_INSNS)
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
        self._slots = slot_offsets(self.insns)
        try:
            validate(self.insns)  # what the kernel refuses at load, before any run
        except InsnError as e:
            i = self._slots.index(e.slot) if e.slot in self._slots else 0
            raise self._error(e.reason, i, code="bad-insn") from None
        self._jit = jit(self.insns, self.resolved, IMPLS)

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
        R[10] = Ptr(StackRegion(0), 512)
        blocks, sizes, budget = self._jit.blocks, self._jit.sizes, self.budget
        b, n = 0, 0
        try:
            while b >= 0:
                n += sizes[b]
                if n > budget:
                    raise Fault(f"instruction budget of {budget} exhausted (endless loop?)")
                b = blocks[b](R, self)
        except Fault as e:
            err = self._error(str(e), self._fault_insn(e, b), isinstance(e, NotModelled))
            raise err from None
        except (TypeError, AttributeError) as e:  # a pointer or map where a scalar belongs
            msg = f"invalid operand: a pointer or map where a scalar is expected ({e})"
            raise self._error(msg, self._fault_insn(e, b)) from None
        r0 = R[0]
        if type(r0) is not int:
            raise self._error("r0 at exit is not a scalar", len(self.insns) - 1)
        return r0

    def _fault_insn(self, e: BaseException, block: int) -> int:
        """Instruction index of a fault: the generated line in the traceback."""
        tb, line = e.__traceback__, None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == FILENAME:
                line = tb.tb_lineno
            tb = tb.tb_next
        if line is not None and line in self._jit.line_to_insn:
            return self._jit.line_to_insn[line]
        return min(block, len(self.insns) - 1)

    def _enter(self, ret: int, target: int) -> int:
        """BPF-to-BPF call: save r6-r9 and r10, give the callee a fresh stack frame."""
        if len(self.frames) + 1 >= MAX_CALL_FRAMES:
            raise Fault(f"call depth over {MAX_CALL_FRAMES} frames")
        R = self.R
        self.frames.append((ret, R[6:11]))
        R[10] = Ptr(StackRegion(len(self.frames)), 512)
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
        i = max(0, min(i, len(self.insns) - 1))
        span = self.where(i) if self.where else None
        text = format_insn(self.insns[i])
        return InterpError(msg, i, self._slots[i], text, span, not_modelled, code)
