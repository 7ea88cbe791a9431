"""Object level: the spec records of an eBPF object (pure data, no kernel, no ELF).

:class:`CollectionSpec` holds everything an object declares before any kernel object
exists: :class:`ProgramSpec` s (instructions, :class:`Relocation` s, func/line info),
map specs (:class:`bpfdsl.obj.maps.MapSpec`), :class:`DataSection` s whose
:class:`Var` s are the configs, BTF and the license.  :func:`bpfdsl.obj.collection.read_object`
makes one from ELF bytes; the loader, checker and interpreter read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.abi.btf.core import Btf
from bpfdsl.abi.btf.ext import BtfExt, LineInfo
from bpfdsl.abi.btf.run_config import RunConfig, read_run_config
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.prog_types import AttachType, ProgramKind, ProgramType
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.obj.maps import MapSpec


@dataclass(frozen=True, slots=True)
class Relocation:
    """A reference the loader must resolve.  ``insn_idx``: index into ``ProgramSpec.insns``.
    ``kind``: ``"map"`` (ld_imm64 of a ``.maps`` map, ``symbol`` = map name), ``"data"``
    (ld_imm64 of an address in a data section: ``symbol`` = section name, ``offset`` = byte
    offset in it), ``"kfunc"`` (a call of the kernel function ``symbol``: the loader puts its
    BTF id in imm, abi.kfuncs).  Calls of functions in the object are resolved by linking and
    not listed."""

    insn_idx: int
    kind: str
    symbol: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class FuncRecord:
    """``bpf_func_info`` for the kernel: ``insn_off`` in instruction SLOTS, FUNC type id."""

    insn_off: int
    type_id: int
    name: str = ""


@dataclass(slots=True)
class ProgramSpec:
    """One loadable program: ``insns`` (ld_imm64 counts once; subprograms appended),
    ``relocations``, ``func_info``/``line_info`` with ``insn_off`` in SLOTS (kernel form),
    ``kind`` from prog_types.PROGRAM_KINDS (None: section is not a program type bpfdsl knows)."""

    name: str
    section: str
    kind: ProgramKind | None
    insns: list[Insn]
    relocations: list[Relocation] = field(default_factory=list)
    func_info: list[FuncRecord] = field(default_factory=list)
    line_info: list[LineInfo] = field(default_factory=list)
    subprograms: list[str] = field(default_factory=list)
    section_offset: int = 0  # bytes: where the main function starts in its section

    @property
    def program_type(self) -> ProgramType | None:
        return self.kind.program_type if self.kind else None

    @property
    def attach_type(self) -> AttachType | None:
        return self.kind.attach_type if self.kind else None

    @property
    def prog_flags(self) -> int:
        return self.kind.prog_flags if self.kind else 0

    def line_at_index(self, i: int) -> LineInfo | None:
        """The line-info record of ``insns[i]`` (list index; ld_imm64 counts once)."""
        return self.line_at(sum(x.width for x in self.insns[:i]))

    def line_at(self, slot: int) -> LineInfo | None:
        """The line-info record covering instruction ``slot`` (the last one at or before)."""
        best = None
        for li in self.line_info:
            if li.insn_off <= slot and (best is None or li.insn_off >= best.insn_off):
                best = li
        return best


@dataclass(frozen=True, slots=True)
class Var:
    """A variable in a data section: ``offset``/``size`` in bytes, BTF ``type_id`` (0 if
    the object has no BTF for it)."""

    name: str
    offset: int
    size: int
    type_id: int = 0
    static: bool = False  # BTF_VAR_STATIC / STB_LOCAL: not settable from outside


@dataclass(slots=True)
class DataSection:
    """``.rodata``/``.data``/``.bss`` (and ``.rodata.*`` ...): initial bytes (zeros for
    .bss), ``vars`` by name, ``readonly`` (.rodata: BPF_F_RDONLY_PROG + frozen), BTF
    DATASEC type id (0 if none)."""

    name: str
    data: bytes
    vars: dict[str, Var]
    readonly: bool
    btf_id: int = 0


@dataclass(slots=True)
class CollectionSpec:
    """Everything in an object, before any kernel object exists.

    ``btf`` has DATASEC sizes and VAR offsets already fixed from the ELF (B13),
    ``btf_fixups`` says what changed and ``btf_error`` why BTF cannot be used (or None).
    """

    path: str
    programs: dict[str, ProgramSpec]
    maps: dict[str, MapSpec]
    license: str | None
    btf: Btf | None
    btf_ext: BtfExt | None
    data_sections: dict[str, DataSection]
    btf_fixups: list[str] = field(default_factory=list)
    btf_error: str | None = None

    @property
    def rodata(self) -> DataSection | None:
        return self.data_sections.get(".rodata")

    def run_config(self, prog: str) -> RunConfig | None:
        """libxdp's run config of program ``prog`` (priority, chain-call actions) from the
        object's BTF, or None when it declares none (libxdp then uses priority 50 and
        XDP_PASS) or has no BTF (bpfdsl.abi.btf.run_config)."""
        if self.btf is None or self.btf_error is not None:
            return None
        return read_run_config(self.btf, prog)

    @property
    def configs(self) -> dict[str, Var]:
        """Load-time settings: the global (non-static) VARs of ``.rodata``."""
        if self.rodata is None:
            return {}
        return {n: v for n, v in self.rodata.vars.items() if not v.static}


def choose_program(spec: CollectionSpec, name: str | None) -> tuple[str, ProgramKind]:
    """The program a user means: ``name`` (a program or section name) or the only one in
    ``spec``; with its kind (prog_types.PROGRAM_KINDS).

    Raises UsageError when the name is unknown or the choice is ambiguous.
    """
    progs = spec.programs
    if not progs:
        raise UsageError(error("unknown-program", "the object holds no program"))
    if name is None:
        if len(progs) > 1:
            raise UsageError(
                error(
                    "unknown-program",
                    f"the object holds {len(progs)} programs",
                    hint=f"pick one with --prog: {', '.join(sorted(progs))}",
                )
            )
        name = next(iter(progs))
    if name not in progs:
        by_section = [p for p in progs.values() if p.section == name]
        if len(by_section) != 1:
            raise UsageError(
                error(
                    "unknown-program",
                    f"no program named {name!r}",
                    hint=f"programs: {', '.join(sorted(progs))}",
                )
            )
        name = by_section[0].name
    kind = progs[name].kind
    if kind is None:
        raise UsageError(
            error(
                "unknown-program",
                f"program {name!r} is in section "
                f"{progs[name].section!r}, which is no known program kind",
            )
        )
    return name, kind
