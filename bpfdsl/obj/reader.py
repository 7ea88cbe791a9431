"""Object level: the ELF view of one object being read (sections, symbols, relocations).

:class:`ObjectReader` wraps :class:`bpfdsl.obj.elf.ElfFile` (the ELF64 little-endian
reader; what it refuses becomes a ``bad-object`` error with its message and hint) and gives the map and program readers (:mod:`bpfdsl.obj.maps`,
:mod:`bpfdsl.obj.link`) section data checked against the file size, symbols by index and
REL entries; every failure is a UsageError naming the file.
"""

from __future__ import annotations

from bpfdsl.diagnostics import UsageError, error
from bpfdsl.obj.elf import ElfError, ElfFile, Section, Symbol


def fail(path: str, msg: str, hint: str | None = None) -> UsageError:
    """The UsageError (``bad-object``) for object ``path``: ``msg`` and what to do."""
    return UsageError(error("bad-object", f"{path}: {msg}", hint=hint))


class ObjectReader:
    """Sections (``sections``, ``by_name``) and, after :meth:`read_symbols`, the symbol
    table of the ELF bytes ``raw`` read from ``path`` (the name used in messages);
    ``elf``: the :class:`ElfFile` of ``raw`` when the caller has it."""

    def __init__(self, path: str, raw: bytes, elf: ElfFile | None = None) -> None:
        self.path, self.raw = path, raw
        try:  # ``elf``: ``raw`` already read by the caller (the compiler's emit)
            self.elf = elf if elf is not None else ElfFile(raw)
        except ElfError as e:
            raise self.fail(str(e), e.hint) from None
        self.sections = list(self.elf.iter_sections())
        self.by_name = {s.name: s for s in self.sections}
        self.symbols: list[Symbol] = []

    def fail(self, msg: str, hint: str | None = None) -> UsageError:
        return fail(self.path, msg, hint)

    def data(self, sec: Section) -> bytes:
        h = sec.header
        if h.sh_type == "SHT_NOBITS":
            return bytes(h.sh_size)
        if h.sh_offset + h.sh_size > len(self.raw):
            raise self.fail(f"section '{sec.name}' runs past the end of the file (truncated?)")
        return sec.data()

    def read_symbols(self) -> None:
        """Read the symbol table (``symbols``: index order, as relocations name them)."""
        for s in self.sections:
            if s.header.sh_type == "SHT_SYMTAB":
                self.symbols = list(s.iter_symbols())

    # ---- used by BTF fix-ups, maps and linking ----
    def section_size(self, name: str) -> int | None:
        s = self.by_name.get(name)
        return s.header.sh_size if s is not None else None

    def symbol_offset(self, sec_name: str, var: str) -> int | None:
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

    def symbol(self, idx: int) -> Symbol:
        if not 0 <= idx < len(self.symbols):
            raise self.fail(
                f"relocation names symbol {idx}, the symbol table has {len(self.symbols)}"
            )
        return self.symbols[idx]

    def sym_section(self, sym: Symbol) -> str | None:
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
