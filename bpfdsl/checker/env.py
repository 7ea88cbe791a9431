"""What one program's analysis knows besides the state: program kind, maps, options.

:class:`Fault` is raised by transfer functions for a rejected instruction (kernel
message + plain explanation + the registers involved); the analyzer turns it into a
report.CheckError with the source line and state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from bpfdsl.abi.uapi import AttachType, ProgramType


class Fault(Exception):
    """A rejection at the current instruction. ``regs``: register numbers to show."""

    def __init__(self, code: str, message: str, explain: str, regs: tuple[int, ...] = ()):
        super().__init__(message)
        self.code = code
        self.message = message
        self.explain = explain
        self.regs = regs


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
    model)."""

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
    # BPF-to-BPF calls (checker.subprog): subprogram start index -> SubprogInfo (from BTF
    # func info: global or static, argument kinds); ld_imm64 BPF_PSEUDO_FUNC index -> the
    # start index it names; ``entry``: start of the function being verified (0: the
    # program; else a global function, verified on its own); ``callbacks``: bpf_loop call
    # index -> the caller frames each callback visit there started from; ``has_func_info``:
    # the kernel needs BTF func info for a function address ("missing btf func_info")
    subprogs: dict = field(default_factory=dict)
    func_refs: dict = field(default_factory=dict)
    entry: int = 0
    callbacks: dict = field(default_factory=dict)
    has_func_info: bool | None = None  # the program comes with BTF func info (None: unknown)

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
