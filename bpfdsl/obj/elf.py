"""The ELF reader of bpfdsl: the subset of an eBPF object (ELF64, little endian) it reads.

The one reader of objects: :mod:`bpfdsl.obj.collection` (objects to specs, through
:mod:`bpfdsl.obj.reader`) and the back end (:func:`fixup_btf_datasecs` on the emitted
object, :meth:`ElfFile.functions` for stack depths and instruction counts) use it.

Why our own: an eBPF object needs section headers, one symbol table and REL entries, a few
struct unpacks; pyelftools (``elftools.elf.elffile`` pulls in its DWARF and construct
modules) stays off the load path (tests/runtime/test_load_fast.py) and is kept as the
independent reader the tests compare this one with (tests/obj/test_objfile.py).  The field
names follow pyelftools' (``section.name``, ``section.header.sh_*``, ``section.data()``,
``iter_symbols()`` with ``sym.name``, ``sym.entry.st_*``, ``sym["st_info"]["type"|"bind"]``,
``iter_relocations()`` with ``r["r_offset"|"r_info_sym"|"r_info_type"]``), with the same
string names for known constants (``SHT_PROGBITS``, ``STT_FUNC``, ``SHN_UNDEF``...).  A file
that is not ELF64 little endian, or whose header table is damaged, raises :class:`ElfError`
with the message and the hint a user sees (obj.reader turns it into a ``bad-object`` error).

Layouts: ``Elf64_Ehdr`` (64 bytes), ``Elf64_Shdr`` (64), ``Elf64_Sym`` (24), ``Elf64_Rel``
(16) from <elf.h> / the System V gABI; all little endian (bpfel).
"""

from __future__ import annotations

import copy
import struct
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from bpfdsl.abi.btf.core import BtfFormatError, parse_btf

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_SYM = struct.Struct("<IBBHQQ")
_REL = struct.Struct("<QQ")
SHN_XINDEX, SHN_LORESERVE = 0xFFFF, 0xFF00
EM_BPF = 247  # e_machine, include/uapi/linux/elf-em.h
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 0x1, 0x2, 0x4  # sh_flags, include/uapi/linux/elf.h

SHT_NAMES = {0: "SHT_NULL", 1: "SHT_PROGBITS", 2: "SHT_SYMTAB", 3: "SHT_STRTAB", 4: "SHT_RELA",
             5: "SHT_HASH", 6: "SHT_DYNAMIC", 7: "SHT_NOTE", 8: "SHT_NOBITS", 9: "SHT_REL",
             11: "SHT_DYNSYM", 0x6FFF4C03: "SHT_LLVM_ADDRSIG"}  # fmt: skip
STT_NAMES = {0: "STT_NOTYPE", 1: "STT_OBJECT", 2: "STT_FUNC", 3: "STT_SECTION", 4: "STT_FILE"}
STB_NAMES = {0: "STB_LOCAL", 1: "STB_GLOBAL", 2: "STB_WEAK"}
SHN_NAMES = {0: "SHN_UNDEF", 0xFFF1: "SHN_ABS", 0xFFF2: "SHN_COMMON"}


class ElfError(ValueError):
    """Not an ELF file, not ELF64 little endian (the only layout of an eBPF object, bpfel),
    or a damaged header table.  ``str()``: what is wrong, as a user reads it; ``hint``: what
    to do, or None."""

    def __init__(self, msg: str, hint: str | None = None) -> None:
        super().__init__(msg)
        self.hint = hint


_REBUILD = "rebuild it: `bpfdsl compile PROG.bpfd -o PROG.o` or `clang -target bpf -g -O2 -c`"


def _table_past_end() -> ElfError:
    return ElfError(
        "corrupt ELF object: the section header table runs past the end of the file "
        "(truncated?)", _REBUILD,
    )  # fmt: skip


def _cstr(blob: bytes, off: int) -> str:
    if not 0 <= off < len(blob):
        if off == 0:
            return ""
        raise ElfError(f"corrupt ELF object: string offset {off} outside the string table")
    end = blob.find(b"\0", off)
    return blob[off : end if end >= 0 else len(blob)].decode(errors="replace")


class Section:
    """One section: ``name``, ``header`` (``sh_type`` as a ``SHT_*`` name when known,
    ``sh_flags``, ``sh_offset``, ``sh_size`` in bytes, ``sh_link``, ``sh_info``...)."""

    def __init__(self, elf: ElfFile, index: int, name: str, header: SimpleNamespace) -> None:
        self.elf, self.index, self.name, self.header = elf, index, name, header

    def data(self) -> bytes:
        h = self.header
        return self.elf.raw[h.sh_offset : h.sh_offset + h.sh_size]

    def iter_symbols(self) -> Iterator[Symbol]:
        """Symbols of a SHT_SYMTAB section (names from its sh_link string table)."""
        strtab = self.elf.section(self.header.sh_link).data()
        data = self.data()
        for off in range(0, len(data) - _SYM.size + 1, _SYM.size):
            name, info, other, shndx, value, size = _SYM.unpack_from(data, off)
            entry = SimpleNamespace(
                st_name=name,
                st_info={"type": STT_NAMES.get(info & 0xF, info & 0xF),
                         "bind": STB_NAMES.get(info >> 4, info >> 4)},
                st_other=other,
                st_shndx=SHN_NAMES.get(shndx, shndx),
                st_value=value,
                st_size=size,
            )  # fmt: skip
            yield Symbol(_cstr(strtab, name), entry)

    def iter_relocations(self) -> Iterator[dict[str, int]]:
        """Entries of a SHT_REL section: r_offset (bytes), r_info_sym, r_info_type."""
        data = self.data()
        for off in range(0, len(data) - _REL.size + 1, _REL.size):
            r_offset, info = _REL.unpack_from(data, off)
            yield {"r_offset": r_offset, "r_info_sym": info >> 32, "r_info_type": info & 0xFFFFFFFF}


class Symbol:
    """One symbol table entry: ``name`` and ``entry`` (``st_name``, ``st_info`` as
    ``{"type": "STT_*", "bind": "STB_*"}``, ``st_other``, ``st_shndx`` (a section index, or
    ``SHN_*`` name), ``st_value`` (bytes into the section), ``st_size`` (bytes)), also read
    as ``sym["st_info"]`` (Elf64_Sym)."""

    __slots__ = ("name", "entry")

    def __init__(self, name: str, entry: SimpleNamespace) -> None:
        self.name, self.entry = name, entry

    def __getitem__(self, key: str) -> Any:
        return getattr(self.entry, key)


class ElfFile:
    """The section header table of an ELF64 LE object held in ``raw`` (bytes).

    ``header.e_machine`` (int, EM_BPF = 247), ``header.e_type`` (ET_REL = 1).
    Raises ElfError when the file is not ELF64 LE or the header table is damaged.
    """

    def __init__(self, raw: bytes) -> None:
        self.raw = raw
        if raw[:4] != b"\x7fELF":
            raise ElfError("not an ELF file (it does not start with \\x7fELF)", _REBUILD)
        if len(raw) < _EHDR.size:
            raise ElfError(
                f"corrupt ELF object: the ELF header is cut short ({len(raw)} of "
                f"{_EHDR.size} bytes; truncated?)", _REBUILD,
            )  # fmt: skip
        if raw[4] != 2 or raw[5] != 1:  # EI_CLASS ELFCLASS64, EI_DATA ELFDATA2LSB
            cls = {1: "32-bit", 2: "64-bit"}.get(raw[4], f"class {raw[4]}")
            order = {1: "little-endian", 2: "big-endian"}.get(raw[5], f"data encoding {raw[5]}")
            raise ElfError(
                f"not a 64-bit little-endian ELF: this is a {cls} {order} object (eBPF "
                "objects are ELF64 little endian, bpfel)",
                "compile with `clang -target bpf` (or -target bpfel), not for the host or bpfeb",
            )  # fmt: skip
        f = _EHDR.unpack_from(raw)
        # f: ident, type, machine, version, entry, phoff, shoff, flags, ehsize, phentsize,
        #    phnum, shentsize, shnum, shstrndx
        self.header = SimpleNamespace(e_type=f[1], e_machine=f[2], e_shoff=f[6], e_shnum=f[12])
        shoff, shentsize, shnum, shstrndx = f[6], f[11], f[12], f[13]
        if shoff == 0:
            self._headers: list[SimpleNamespace] = []
            self._sections: list[Section] = []
            return
        if shentsize != _SHDR.size:
            raise ElfError(f"corrupt ELF object: section header size {shentsize}, not 64")
        if shoff + _SHDR.size > len(raw):
            raise _table_past_end()
        first = self._shdr(shoff)
        if shnum == 0:
            shnum = first.sh_size  # extended numbering: the count lives in section 0
        if shstrndx == SHN_XINDEX:
            shstrndx = first.sh_link
        if shoff + shnum * _SHDR.size > len(raw) or shnum > 65536:
            raise _table_past_end()
        self._headers = [self._shdr(shoff + i * _SHDR.size) for i in range(shnum)]
        if not 0 <= shstrndx < shnum:
            raise ElfError(f"corrupt ELF object: section name table index {shstrndx} out of range")
        sh = self._headers[shstrndx]
        names = raw[sh.sh_offset : sh.sh_offset + sh.sh_size]
        self._sections = [
            Section(self, i, _cstr(names, h.sh_name), h) for i, h in enumerate(self._headers)
        ]

    def _shdr(self, off: int) -> SimpleNamespace:
        f = _SHDR.unpack_from(self.raw, off)
        return SimpleNamespace(
            sh_name=f[0], sh_type=SHT_NAMES.get(f[1], f[1]), sh_flags=f[2], sh_addr=f[3],
            sh_offset=f[4], sh_size=f[5], sh_link=f[6], sh_info=f[7], sh_addralign=f[8],
            sh_entsize=f[9],
        )  # fmt: skip

    def over(self, raw: bytes) -> ElfFile:
        """This file's section table over ``raw``, bytes of the same layout (sections
        rewritten in place at their length, as :func:`fixup_btf_datasecs` does), without
        reading the headers again.  Raises ElfError when the lengths differ."""
        if len(raw) != len(self.raw):
            raise ElfError(f"{len(raw)} bytes do not have the layout of {len(self.raw)}")
        new = copy.copy(self)
        new.raw = raw
        new._sections = [Section(new, s.index, s.name, s.header) for s in self._sections]
        return new

    def section(self, index: int) -> Section:
        if not 0 <= index < len(self._sections):
            raise ElfError(f"corrupt ELF object: section index {index} out of range")
        return self._sections[index]

    def iter_sections(self) -> Iterator[Section]:
        return iter(self._sections)

    def section_by_name(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        return next((s for s in self._sections if s.name == name), None)

    def symbols(self) -> list[Symbol]:
        """The symbols of the (first) SHT_SYMTAB section; empty when there is none."""
        symtab = next((s for s in self._sections if s.header.sh_type == "SHT_SYMTAB"), None)
        return [] if symtab is None else list(symtab.iter_symbols())

    def functions(self) -> list[tuple[str, Section, int, int]]:
        """``(name, section, start, size)`` of every STT_FUNC symbol defined in an executable
        (SHF_EXECINSTR) section; ``start``/``size`` in bytes within the section, ``size``
        the rest of the section when ``st_size`` is 0."""
        out = []
        for sym in self.symbols():
            shndx = sym.entry.st_shndx
            if sym["st_info"]["type"] != "STT_FUNC" or not isinstance(shndx, int):
                continue
            if not 0 < shndx < len(self._sections):
                continue
            sec = self._sections[shndx]
            if not sec.header.sh_flags & SHF_EXECINSTR:
                continue
            start = sym.entry.st_value
            out.append((sym.name, sec, start, sym.entry.st_size or sec.header.sh_size - start))
        return out


def fixup_btf_datasecs(raw: bytes, elf: ElfFile | None = None) -> bytes:
    """``raw`` (ELF object bytes) with its ``.BTF`` fixed up as libbpf's ``btf_fixup_datasec``
    does before loading (:meth:`bpfdsl.abi.btf.core.Btf.fixup_datasecs`: a DATASEC of size 0
    gets its ELF section's size and its VARs their symbols' values, entries sorted by offset;
    FIELD-BUGS B13), so loaders that upload ``.BTF`` as it is (iproute2) accept it.

    The section is rewritten in place (same length); other bytes stay.  Objects without
    ``.BTF`` are returned unchanged.  ``elf``: ``raw`` already read (not read again).
    Raises ElfError for an ELF this reader cannot read and BtfFormatError when a DATASEC
    names a section or variable the object lacks."""
    if elf is None:
        elf = ElfFile(raw)
    sec = elf.section_by_name(".BTF")
    if sec is None:
        return raw
    btf = parse_btf(sec.data())
    by_name = {s.name: s for s in elf.iter_sections()}
    symbols = elf.symbols()

    def section_size(name: str) -> int | None:
        s = by_name.get(name)
        return s.header.sh_size if s is not None else None

    def symbol_offset(sec_name: str, var: str) -> int | None:
        s = by_name.get(sec_name)
        if s is None:
            return None
        for sym in symbols:
            if sym.name == var and sym.entry.st_shndx == s.index:
                return sym.entry.st_value
        return None

    btf.fixup_datasecs(section_size, symbol_offset)
    fixed = btf.to_bytes()
    h = sec.header
    if len(fixed) != h.sh_size:
        raise BtfFormatError(f".BTF is {h.sh_size} bytes but rewrites to {len(fixed)}")
    return raw[: h.sh_offset] + fixed + raw[h.sh_offset + h.sh_size :]
