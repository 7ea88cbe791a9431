"""Object level: an eBPF ELF object -> :class:`CollectionSpec` (pure, deterministic, no kernel).

Follows libbpf's reading of an object (bpf_object__open): programs are the functions of
executable sections (split by FUNC symbols), each linked with the ``.text`` subprograms it
calls (BPF-to-BPF calls re-pointed, func/line info moved along); maps come from the BTF
``.maps`` DATASEC (``__uint``/``__type``/``__array`` members); ``.rodata``/``.data``/
``.bss`` become :class:`DataSection` s whose VARs are the configs; ``license`` is read.
The legacy ``maps`` section is refused (B12).  Unusable input raises UsageError (exit 2).
Map specs and linking live in :mod:`bpfdsl.obj.maps` and :mod:`bpfdsl.obj.link`.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.core import Btf, BtfFormatError, parse_btf
from bpfdsl.abi.btf.ext import BtfExt, LineInfo, parse_btf_ext
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.uapi import AttachType, ProgramKind, ProgramType
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.obj.elf import ElfError, ElfFile
from bpfdsl.obj.maps import MapSpec, read_maps

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

EM_BPF = 247
SHF_EXECINSTR, SHF_WRITE = 0x4, 0x1
LEGACY_MAPS_MSG = (
    "object uses legacy 'maps' section (unsupported); declare maps in '.maps' with BTF"
)


@dataclass(frozen=True, slots=True)
class Relocation:
    """A reference the loader must resolve.  ``insn_idx``: index into ``ProgramSpec.insns``.
    ``kind``: ``"map"`` (ld_imm64 of a ``.maps`` map, ``symbol`` = map name), ``"data"``
    (ld_imm64 of an address in a data section: ``symbol`` = section name, ``offset`` = byte
    offset in it).  Calls are resolved by linking and not listed."""

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
    ``kind`` from uapi.PROGRAM_KINDS (None: section is not a program type bpfdsl knows)."""

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

    @property
    def configs(self) -> dict[str, Var]:
        """Load-time settings: the global (non-static) VARs of ``.rodata``."""
        if self.rodata is None:
            return {}
        return {n: v for n, v in self.rodata.vars.items() if not v.static}


def _fail(path: str, msg: str, hint: str | None = None) -> UsageError:
    return UsageError(error("bad-object", f"{path}: {msg}", hint=hint))


def read_object(data: bytes | str | Path, *, name: str | None = None) -> CollectionSpec:
    """Read an eBPF ELF object (bytes or a path; ``name`` labels bytes in messages).
    Raises UsageError on anything unusable: missing file, not ELF, not EM_BPF/64-bit/
    little-endian, truncated or corrupt sections, legacy ``maps``, malformed ``.maps``
    definitions or relocations."""
    path = name or "<object>"
    if not isinstance(data, bytes | bytearray | memoryview):
        path = str(data)
        try:
            with open(data, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(error("no-file", f"{path}: cannot read: {e.strerror}")) from None
    raw = bytes(data)
    if raw[:4] != b"\x7fELF":
        raise _fail(
            path,
            "not an ELF file",
            hint="pass an object built by `bpfdsl compile` or `clang -target bpf -c`",
        )
    try:
        return _Reader(path, raw).read()
    except UsageError:
        raise
    except BtfFormatError as e:
        raise _fail(path, f"BTF: {e}") from None
    except Exception as e:  # noqa: BLE001 - pyelftools raises many kinds on corrupt input
        raise _fail(path, f"corrupt ELF object ({type(e).__name__}: {e})") from None


class _Reader:
    def __init__(self, path: str, raw: bytes):
        self.path, self.raw = path, raw
        try:
            self.elf = ElfFile(raw)  # fast path: section headers read directly (objfile_elf)
        except ElfError:
            from elftools.elf.elffile import ELFFile  # noqa: PLC0415 (slow import)

            self.elf = ELFFile(io.BytesIO(raw))  # the general reader: 32-bit/BE/damaged files
        self.sections = list(self.elf.iter_sections())
        self.by_name = {s.name: s for s in self.sections}
        self.symbols: list = []

    def fail(self, msg: str, hint: str | None = None) -> UsageError:
        return _fail(self.path, msg, hint)

    def data(self, sec) -> bytes:
        h = sec.header
        if h.sh_type == "SHT_NOBITS":
            return bytes(h.sh_size)
        if h.sh_offset + h.sh_size > len(self.raw):
            raise self.fail(f"section '{sec.name}' runs past the end of the file (truncated?)")
        return sec.data()

    def read(self) -> CollectionSpec:
        e = self.elf
        if e.elfclass != 64 or not e.little_endian:
            raise self.fail("not a 64-bit little-endian ELF (eBPF objects are bpfel)")
        if e.header.e_machine not in ("EM_BPF", EM_BPF):
            raise self.fail(
                f"wrong machine {e.header.e_machine} (expected EM_BPF)",
                hint="compile with -target bpf",
            )
        if "maps" in self.by_name:
            raise self.fail(LEGACY_MAPS_MSG)
        for s in self.sections:
            if s.header.sh_type == "SHT_SYMTAB":
                self.symbols = list(s.iter_symbols())
        btf = btf_ext = None
        fixups, btf_error = [], None
        if ".BTF" in self.by_name:
            btf = parse_btf(self.data(self.by_name[".BTF"]))
            try:
                fixups = btf.fixup_datasecs(self._section_size, self._symbol_offset)
                fixups += btf.sanitize()
            except BtfFormatError as err:
                btf_error = str(err)
            if ".BTF.ext" in self.by_name:
                btf_ext = parse_btf_ext(self.data(self.by_name[".BTF.ext"]), btf)
        lic = None
        if "license" in self.by_name:
            lic = self.data(self.by_name["license"]).split(b"\0", 1)[0].decode(errors="replace")
        datasecs = self._data_sections(btf)
        maps = read_maps(self, btf) if ".maps" in self.by_name else {}
        from bpfdsl.obj.link import link_programs  # here: it imports our dataclasses

        programs = link_programs(self, btf, btf_ext, set(maps), set(datasecs))
        return CollectionSpec(
            self.path, programs, maps, lic, btf, btf_ext, datasecs, fixups, btf_error
        )

    # ---- helpers used by fix-ups, maps and linking ----
    def _section_size(self, name: str) -> int | None:
        s = self.by_name.get(name)
        return s.header.sh_size if s is not None else None

    def _symbol_offset(self, sec_name: str, var: str) -> int | None:
        s = self.by_name.get(sec_name)
        if s is None:
            return None
        idx = self.sections.index(s)
        for sym in self.symbols:
            if sym.name == var and sym.entry.st_shndx == idx:
                return sym.entry.st_value
        return None

    def section_index(self, name: str) -> int | None:
        s = self.by_name.get(name)
        return self.sections.index(s) if s is not None else None

    def symbol(self, idx: int):
        if not 0 <= idx < len(self.symbols):
            raise self.fail(
                f"relocation names symbol {idx}, the symbol table has {len(self.symbols)}"
            )
        return self.symbols[idx]

    def sym_section(self, sym) -> str | None:
        shndx = sym.entry.st_shndx
        if not isinstance(shndx, int) or not 0 < shndx < len(self.sections):
            return None
        return self.sections[shndx].name

    def relocations_for(self, sec_name: str) -> list[tuple[int, int, int]]:
        """(r_offset, symbol index, r_type) of the REL section applying to ``sec_name``."""
        target = self.section_index(sec_name)
        out = []
        for s in self.sections:
            if s.header.sh_type in ("SHT_REL", "SHT_RELA") and s.header.sh_info == target:
                if s.header.sh_type != "SHT_REL":
                    raise self.fail(f"section '{s.name}': RELA relocations are not used by BPF")
                self.data(s)
                for r in s.iter_relocations():
                    out.append((r["r_offset"], r["r_info_sym"], r["r_info_type"]))
        return out

    def _data_sections(self, btf: Btf | None) -> dict[str, DataSection]:
        out = {}
        for s in self.sections:
            n = s.name
            if not (
                n in (".rodata", ".data", ".bss") or n.startswith((".rodata.", ".data.", ".bss."))
            ):
                continue
            if s.header.sh_size == 0 or not s.header.sh_flags & 0x2:  # SHF_ALLOC
                continue
            idx = self.sections.index(s)
            vars_: dict[str, Var] = {}
            dsec = btf.find(n) if btf is not None else None
            if dsec is not None and dsec.kind.name == "DATASEC":
                for m in dsec.members:
                    v = btf[m.type]
                    vars_[v.name] = Var(v.name, m.offset, m.size, v.type, v.linkage == 0)
            else:
                for sym in self.symbols:
                    if sym.entry.st_shndx == idx and sym["st_info"]["type"] == "STT_OBJECT":
                        local = sym["st_info"]["bind"] == "STB_LOCAL"
                        vars_[sym.name] = Var(
                            sym.name, sym.entry.st_value, sym.entry.st_size, static=local
                        )
            ro = n.startswith(".rodata") or not s.header.sh_flags & SHF_WRITE
            out[n] = DataSection(n, self.data(s), vars_, ro, dsec.id if dsec else 0)
        return out
