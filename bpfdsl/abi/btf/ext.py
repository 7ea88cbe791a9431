"""``.BTF.ext``: per-ELF-section func_info, line_info and CO-RE relocation records.

Format (include/uapi/linux/btf.h, libbpf btf_ext): header ``{u16 magic 0xeB9F, u8 version,
u8 flags, u32 hdr_len, u32 func_info_off/len, line_info_off/len[, core_relo_off/len]}``
(offsets after the header); each sub-section is ``u32 rec_size`` then blocks
``{u32 sec_name_off, u32 num_info, records}``.  ``insn_off`` is a BYTE offset in the ELF
section here; the object reader turns it into instruction slots.  Names resolve through
the ``.BTF`` string section.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from bpfdsl.abi.btf.core import BTF_MAGIC, Btf, BtfFormatError, read_cstr


@dataclass(frozen=True, slots=True)
class FuncInfo:
    """``bpf_func_info``: ``insn_off`` in BYTES from the section start, FUNC ``type_id``."""

    insn_off: int
    type_id: int


@dataclass(frozen=True, slots=True)
class LineInfo:
    """``bpf_line_info``: ``insn_off`` in BYTES; file/line text resolved from .BTF strings
    (``file_name_off``/``line_off`` kept for the kernel record); ``line``/``col`` 1-based."""

    insn_off: int
    file_name_off: int
    line_off: int
    line: int
    col: int
    file: str
    text: str


@dataclass(frozen=True, slots=True)
class CoreRelo:
    """``bpf_core_relo``: ``insn_off`` in BYTES, root ``type_id``, access string, kind."""

    insn_off: int
    type_id: int
    access: str
    kind: int


@dataclass(slots=True)
class BtfExt:
    """Parsed ``.BTF.ext``: per ELF section name, the func/line/CO-RE records."""

    func_info: dict[str, list[FuncInfo]] = field(default_factory=dict)
    line_info: dict[str, list[LineInfo]] = field(default_factory=dict)
    core_relos: dict[str, list[CoreRelo]] = field(default_factory=dict)


def parse_btf_ext(data: bytes, btf: Btf) -> BtfExt:
    """Parse ``.BTF.ext`` (names resolve through ``btf``'s strings).  Raises BtfFormatError."""
    data = bytes(data)
    if len(data) < 24:
        raise BtfFormatError(f".BTF.ext is {len(data)} bytes, shorter than its header")
    magic, ver, _fl, hdr_len = struct.unpack_from("<HBBI", data)
    if magic != BTF_MAGIC or ver != 1 or hdr_len < 24 or hdr_len > len(data):
        raise BtfFormatError(f".BTF.ext: bad header (magic {magic:#x}, length {hdr_len})")
    fo, fl, lo, ll = struct.unpack_from("<IIII", data, 8)
    co = cl = 0
    if hdr_len >= 32:
        co, cl = struct.unpack_from("<II", data, 24)
    ext = BtfExt()
    strs = bytes(btf.strings)

    def blocks(off: int, length: int, min_rec: int, what: str) -> list[tuple[str, list[bytes]]]:
        if not length:
            return []
        start, end = hdr_len + off, hdr_len + off + length
        if end > len(data) or length < 4:
            raise BtfFormatError(f".BTF.ext: {what} section runs past the end")
        (rec,) = struct.unpack_from("<I", data, start)
        if rec < min_rec or rec % 4:
            raise BtfFormatError(f".BTF.ext: {what} record size {rec} is invalid")
        out, pos = [], start + 4
        while pos < end:
            if pos + 8 > end:
                raise BtfFormatError(f".BTF.ext: {what} block header truncated")
            sec_off, n = struct.unpack_from("<II", data, pos)
            pos += 8
            if pos + n * rec > end:
                raise BtfFormatError(f".BTF.ext: {what} records truncated")
            recs = [data[pos + i * rec : pos + (i + 1) * rec] for i in range(n)]
            out.append((read_cstr(strs, sec_off, f".BTF.ext {what} section name"), recs))
            pos += n * rec
        return out

    fblocks = blocks(fo, fl, 8, "func_info")
    for sec, recs in fblocks:
        ext.func_info[sec] = [FuncInfo(*struct.unpack_from("<II", r)) for r in recs]
    lblocks = blocks(lo, ll, 16, "line_info")
    texts: dict[int, str] = {}  # string offset -> text: file names and lines repeat

    def text(off: int, what: str) -> str:
        s = texts.get(off)
        if s is None:
            s = texts[off] = read_cstr(strs, off, what)
        return s

    for sec, recs in lblocks:
        items = []
        for r in recs:
            off, fn, ln, lc = struct.unpack_from("<IIII", r)
            items.append(
                LineInfo(
                    off,
                    fn,
                    ln,
                    lc >> 10,
                    lc & 0x3FF,
                    text(fn, "line_info file"),
                    text(ln, "line_info line"),
                )
            )
        ext.line_info[sec] = items
    cblocks = blocks(co, cl, 16, "core_relo")
    for sec, recs in cblocks:
        relos = []
        for r in recs:
            off, tid, acc, kind = struct.unpack_from("<IIII", r)
            relos.append(CoreRelo(off, tid, read_cstr(strs, acc, "core_relo access"), kind))
        ext.core_relos[sec] = relos
    return ext
