"""What one program's analysis knows besides the state: program kind, maps, options.

:class:`Fault` is raised by transfer functions for a rejected instruction (kernel
message + plain explanation + the registers involved); the analyzer turns it into a
report.CheckError with the source line and state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bpfdsl.abi.prog_types import AttachType, ProgramType


class Fault(Exception):
    """A rejection at the current instruction. ``regs``: register numbers to show; ``at``:
    the kernel insn numbers (slots) of other instructions ``explain`` names as
    "at insn N", which the report follows with their source lines."""

    def __init__(
        self,
        code: str,
        message: str,
        explain: str,
        regs: tuple[int, ...] = (),
        at: tuple[int, ...] = (),
    ):
        super().__init__(message)
        self.code = code
        self.message = message
        self.explain = explain
        self.regs = regs
        self.at = at


class MapLike(Protocol):
    """What the checker reads of a map: an obj.maps.MapSpec, or a checker.DataMap for a
    global-data section (sizes in bytes, ``map_type`` a BPF_MAP_TYPE_* number)."""

    @property
    def name(self) -> str: ...
    @property
    def map_type(self) -> int: ...
    @property
    def key_size(self) -> int: ...
    @property
    def value_size(self) -> int: ...
    @property
    def max_entries(self) -> int: ...


@dataclass(slots=True)
class MapRef:
    """An ld_imm64 operand resolved by relocation: ``map`` (obj.maps MapSpec-like: name,
    map_type, key_size, value_size, max_entries, map_flags, data), ``value_off`` is None for
    a map pointer (BPF_PSEUDO_MAP_FD) or the byte offset into value 0 (global data)."""

    map: MapLike
    value_off: int | None = None


@dataclass(slots=True)
class Env:
    """Per-program analysis context.  ``map_refs``: insn index -> MapRef.
    ``privileged``: model a loader with CAP_BPF+CAP_PERFMON (root), as the kernel does for
    pointer leaks, uninitialized stack reads and pointer comparisons.  ``stack_depth``:
    subprog start index -> bytes used; ``kernel``: declared target kernel (None: this 6.x
    model); ``nr_cpus``: possible CPUs of the host the program will load on (the kernel
    bounds bpf_get_smp_processor_id() by it), None when unknown (any u32).  Set by transfer functions during one insn, consumed by the analyzer:
    ``want_regs``/``want_slots``, registers / (frame, slot) the insn relied on exactly
    (to be marked precise, kernel mark_chain_precision); ``hist_slot``, the (frame, slot)
    a register was spilled to or filled from; ``hist_linked``, registers sharing a scalar
    id at a forking conditional jump (both for the jump history); ``stored_zero``, a
    store put zero bytes (not a spill) into the stack; ``live_reads``/``live_writes``,
    (frame, slot) read / written whole (for stack liveness, checker/liveness.py);
    ``inexact``: times the walk knowingly departed from the kernel's -- a branch no value
    can take that the kernel walks anyway (its is_branch_taken cannot tell) -- so the
    kernel's count may differ from the checker's."""

    prog_type: ProgramType
    attach_type: AttachType | None
    ctx: str | None
    returns: dict[str, int]
    map_refs: dict[int, MapRef]
    gpl: bool = True
    privileged: bool = True
    next_id: int = 0
    warnings: list = field(default_factory=list)
    warned: set = field(default_factory=set)
    cur_idx: int = 0
    stack_depth: dict = field(default_factory=dict)
    kernel: tuple[int, int] | None = None
    kfuncs: dict[int, str] = field(default_factory=dict)  # insn index -> kfunc name
    nr_cpus: int | None = None
    want_regs: list[int] = field(default_factory=list)
    want_slots: list[tuple[int, int]] = field(default_factory=list)
    hist_slot: tuple[int, int] | None = None
    hist_linked: tuple | None = None
    # registers live before each insn (Cfg.live_in; set by analyzer.analyze): a jump links
    # only live registers (branch.collect_linked)
    live_in: list[int] = field(default_factory=list)
    stored_zero: bool = False
    live_reads: list[tuple[int, int]] = field(default_factory=list)
    live_writes: list[tuple[int, int]] = field(default_factory=list)
    inexact: int = 0
    # BPF-to-BPF calls (checker.subprog): subprogram start index -> SubprogInfo (from BTF
    # func info: global or static, argument kinds); ld_imm64 BPF_PSEUDO_FUNC index -> the
    # start index it names; ``entry``: start of the function being verified (0: the
    # program; else a global function, verified on its own); ``called``: global functions
    # a walked call reached (kernel subprog_aux called); ``has_func_info``: the kernel needs
    # BTF func info for a function address ("missing btf func_info")
    subprogs: dict = field(default_factory=dict)
    func_refs: dict = field(default_factory=dict)
    entry: int = 0
    called: set = field(default_factory=set)
    has_func_info: bool | None = None  # the program comes with BTF func info (None: unknown)
    # subprogram start index -> why it changes packet data (subprog.changes_pkt_data): a
    # call of it invalidates the caller's packet pointers (kernel changes_pkt_data)
    pkt_changers: dict = field(default_factory=dict)
    # checker.refs: reference id -> (insn index, helper) that acquired it (kernel
    # refs[].insn_idx, the "alloc_insn" of a leak); insn index -> the pointer type its
    # load/store went through first (kernel insn_aux_data ptr_type, save_aux_ptr_type)
    ref_insn: dict[int, tuple[int, str]] = field(default_factory=dict)
    ptr_type_at: dict[int, int] = field(default_factory=dict)
    # for the kernel's rewrite after verification (checker.fixups): helper call insn index
    # -> the map its map argument was (fixups.POISON once two paths passed different maps:
    # kernel record_func_map, insn_aux_data map_ptr_state)
    call_maps: dict[int, object] = field(default_factory=dict)

    def precise(self, regno: int) -> None:
        """The current insn relies on the exact range of scalar ``regno``."""
        self.want_regs.append(regno)

    def need(self, version: tuple[int, int], what: str, regs: tuple[int, ...] = ()) -> None:
        """Fault when the declared target kernel is older than ``version``."""
        if self.kernel is not None and self.kernel < version:
            raise Fault(
                "kernel-version",
                f"{what} needs Linux {version[0]}.{version[1]} "
                f"(target kernel {self.kernel[0]}.{self.kernel[1]})",
                f"rewrite without it or target Linux {version[0]}.{version[1]} or newer",
                regs,
            )

    def new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def warn(
        self, code: str, message: str, explain: str, regs: tuple[int, ...] = (), at: int = -1
    ) -> None:
        """A finding the kernel accepts but bpfdsl reports (once per insn and code), at
        insn index ``at`` when given (>= 0), else at the current insn."""
        idx = at if at >= 0 else self.cur_idx
        key = (idx, code)
        if key not in self.warned:
            self.warned.add(key)
            self.warnings.append((idx, Fault(code, message, explain, regs)))
