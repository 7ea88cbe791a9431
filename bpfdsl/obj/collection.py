"""Object level: an eBPF ELF object -> :class:`~bpfdsl.obj.spec.CollectionSpec` (pure,
deterministic, no kernel).

Follows libbpf's reading of an object (bpf_object__open): programs are the functions of
executable sections (split by FUNC symbols), each linked with the ``.text`` subprograms it
calls (BPF-to-BPF calls re-pointed, func/line info moved along); maps come from the BTF
``.maps`` DATASEC (``__uint``/``__type``/``__array`` members); ``.rodata``/``.data``/
``.bss`` become :class:`DataSection` s whose VARs are the configs; ``license`` is read.
The legacy ``maps`` section is refused (B12).  Unusable input raises UsageError (exit 2).
:func:`read_object` is the pipeline, one visible list of steps; the ELF view is
:mod:`bpfdsl.obj.reader`, map specs :mod:`bpfdsl.obj.maps`, linking :mod:`bpfdsl.obj.link`,
the records :mod:`bpfdsl.obj.spec`.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.core import Btf, BtfFormatError, parse_btf
from bpfdsl.abi.btf.ext import parse_btf_ext
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.obj.elf import EM_BPF, SHF_ALLOC, SHF_WRITE, ElfError, ElfFile
from bpfdsl.obj.link import link_programs
from bpfdsl.obj.maps import read_maps
from bpfdsl.obj.reader import ObjectReader, fail
from bpfdsl.obj.spec import CollectionSpec, DataSection, Var

if TYPE_CHECKING:  # pragma: no cover
    from pathlib import Path

LEGACY_MAPS_MSG = (
    "object uses legacy 'maps' section (unsupported); declare maps in '.maps' with BTF"
)


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
        raise fail(
            path,
            "not an ELF file",
            hint="pass an object built by `bpfdsl compile` or `clang -target bpf -c`",
        )
    return _read_guarded(path, raw, None)


def read_elf(elf: ElfFile, *, name: str | None = None) -> CollectionSpec:
    """:func:`read_object` of an object already read into an :class:`ElfFile` (the
    compiler's, which reads what it emitted once: its section table is not read again).
    Raises UsageError as :func:`read_object` does."""
    return _read_guarded(name or "<object>", elf.raw, elf)


def _read_guarded(path: str, raw: bytes, elf: ElfFile | None) -> CollectionSpec:
    try:
        return _read(ObjectReader(path, raw, elf))
    except UsageError:
        raise
    except BtfFormatError as e:
        raise fail(path, f"BTF: {e}") from None
    except ElfError as e:  # a damaged table found while reading it (a bad sh_link...)
        raise fail(path, str(e), e.hint) from None
    except struct.error as e:  # an entry cut short by a damaged size
        raise fail(path, f"corrupt ELF object ({e})") from None


def _read(r: ObjectReader) -> CollectionSpec:
    """The steps of reading an object, in order (libbpf bpf_object__open)."""
    e = r.elf
    if e.header.e_machine != EM_BPF:
        raise r.fail(
            f"wrong machine {e.header.e_machine} (expected EM_BPF)",
            hint="compile with -target bpf",
        )
    if "maps" in r.by_name:
        raise r.fail(LEGACY_MAPS_MSG)
    r.read_symbols()
    btf = btf_ext = None
    fixups, btf_error = [], None
    if ".BTF" in r.by_name:
        btf = parse_btf(r.data(r.by_name[".BTF"]))
        try:
            fixups = btf.fixup_datasecs(r.section_size, r.symbol_offset)
            fixups += btf.sanitize()
        except BtfFormatError as err:
            btf_error = str(err)
        if ".BTF.ext" in r.by_name:
            btf_ext = parse_btf_ext(r.data(r.by_name[".BTF.ext"]), btf)
    lic = None
    if "license" in r.by_name:
        lic = r.data(r.by_name["license"]).split(b"\0", 1)[0].decode(errors="replace")
    datasecs = _data_sections(r, btf)
    maps = read_maps(r, btf) if ".maps" in r.by_name else {}
    programs = link_programs(r, btf, btf_ext, set(maps), set(datasecs))
    return CollectionSpec(r.path, programs, maps, lic, btf, btf_ext, datasecs, fixups, btf_error)


def _data_sections(r: ObjectReader, btf: Btf | None) -> dict[str, DataSection]:
    out = {}
    for s in r.sections:
        n = s.name
        if not (n in (".rodata", ".data", ".bss") or n.startswith((".rodata.", ".data.", ".bss."))):
            continue
        if s.header.sh_size == 0 or not s.header.sh_flags & SHF_ALLOC:
            continue
        idx = r.sections.index(s)
        vars_: dict[str, Var] = {}
        dsec = btf.find(n) if btf is not None else None
        if btf is not None and dsec is not None and dsec.kind.name == "DATASEC":
            for m in dsec.members:
                v = btf[m.type]
                vars_[v.name] = Var(v.name, m.offset, m.size, v.type, v.linkage == 0)
        else:
            for sym in r.symbols:
                if sym.entry.st_shndx == idx and sym["st_info"]["type"] == "STT_OBJECT":
                    local = sym["st_info"]["bind"] == "STB_LOCAL"
                    vars_[sym.name] = Var(
                        sym.name, sym.entry.st_value, sym.entry.st_size, static=local
                    )
        ro = n.startswith(".rodata") or not s.header.sh_flags & SHF_WRITE
        out[n] = DataSection(n, r.data(s), vars_, ro, dsec.id if dsec else 0)
    return out
