"""BTF and BTF.ext: read, query, fix up and write back (pure, no kernel).

Formats from include/uapi/linux/btf.h and the kernel's Documentation/bpf/btf.rst:
``.BTF`` = header (magic 0xeB9F, little endian) + type section + string section;
``.BTF.ext`` = header + func_info / line_info / core_relo sub-sections, each a record
size followed by per-ELF-section blocks ``{sec_name_off, num_info, records...}`` whose
``insn_off`` is a BYTE offset into that section (the loader divides by 8).
:meth:`Btf.fixup_datasecs` applies libbpf's ``btf_fixup_datasec`` (B13) and
:meth:`Btf.sanitize` rewrites what the kernel refuses; :meth:`Btf.to_bytes` serializes.
Value formatting/parsing by type lives in :mod:`bpfdsl.abi.btf.values`, ``.BTF.ext`` in
:mod:`bpfdsl.abi.btf.ext` (which imports this module).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum

BTF_MAGIC = 0xEB9F


class BtfFormatError(ValueError):
    """Malformed BTF / BTF.ext bytes (message says where)."""


def read_cstr(data: bytes, off: int, what: str) -> str:
    """The NUL-terminated string at byte ``off`` of the string section ``data``;
    BtfFormatError naming ``what`` (``BTF``, ``BTF.ext``) when it is out of range."""
    if not 0 <= off < max(len(data), 1):
        raise BtfFormatError(f"{what} string offset {off} outside the string section")
    end = data.find(b"\0", off)
    if end < 0:
        raise BtfFormatError(f"{what} string at {off} is not NUL-terminated")
    return data[off:end].decode(errors="replace")


BTF_VAR_STATIC, BTF_VAR_GLOBAL_ALLOCATED, BTF_VAR_GLOBAL_EXTERN = 0, 1, 2
BTF_FUNC_STATIC, BTF_FUNC_GLOBAL, BTF_FUNC_EXTERN = 0, 1, 2
BTF_INT_SIGNED, BTF_INT_CHAR, BTF_INT_BOOL = 1, 2, 4
_HDR = struct.Struct("<HBBIIIII")  # magic version flags hdr_len type_off type_len str_off str_len
_TYPE = struct.Struct("<III")


class Kind(IntEnum):
    """``BTF_KIND_*`` (linux/btf.h)."""

    UNKN = 0
    INT = 1
    PTR = 2
    ARRAY = 3
    STRUCT = 4
    UNION = 5
    ENUM = 6
    FWD = 7
    TYPEDEF = 8
    VOLATILE = 9
    CONST = 10
    RESTRICT = 11
    FUNC = 12
    FUNC_PROTO = 13
    VAR = 14
    DATASEC = 15
    FLOAT = 16
    DECL_TAG = 17
    TYPE_TAG = 18
    ENUM64 = 19


_MODIFIERS = (Kind.TYPEDEF, Kind.VOLATILE, Kind.CONST, Kind.RESTRICT, Kind.TYPE_TAG)
_SIZED = (Kind.INT, Kind.STRUCT, Kind.UNION, Kind.ENUM, Kind.DATASEC, Kind.FLOAT, Kind.ENUM64)


@dataclass(slots=True)
class Member:
    """A struct/union member (``bit_offset`` from the start, ``bitfield_size`` 0 = plain),
    an enum value (``value``), a func_proto param, or a DATASEC entry (``offset``/``size``
    in bytes).  Unused fields stay 0; ``name_off`` indexes the string section."""

    name: str = ""
    name_off: int = 0
    type: int = 0
    bit_offset: int = 0
    bitfield_size: int = 0
    value: int = 0
    offset: int = 0
    size: int = 0


@dataclass(slots=True)
class BtfType:
    """One BTF type.  ``size`` for sized kinds, ``type`` for reference kinds (PTR, TYPEDEF,
    VAR, FUNC...).  INT: ``encoding``/``bits``/``int_offset``.  ARRAY: ``type`` (element),
    ``index_type``, ``nelems``.  VAR/FUNC: ``linkage``.  DECL_TAG: ``component_idx``.
    ``members`` holds the vlen records of STRUCT/UNION/ENUM/ENUM64/FUNC_PROTO/DATASEC."""

    id: int
    kind: Kind
    name: str = ""
    name_off: int = 0
    kflag: bool = False
    size: int = 0
    type: int = 0
    encoding: int = 0
    bits: int = 0
    int_offset: int = 0
    index_type: int = 0
    nelems: int = 0
    linkage: int = 0
    component_idx: int = 0
    members: list[Member] = field(default_factory=list)

    @property
    def vlen(self) -> int:
        if self.kind in (Kind.FUNC, Kind.VAR):
            return self.linkage if self.kind == Kind.FUNC else 0
        return len(self.members)


class Btf:
    """Parsed ``.BTF``: ``types[id]`` (id 0 is void), ``strings`` (raw string section)."""

    def __init__(self, types: list[BtfType], strings: bytes):
        self.types = types
        self.strings = bytearray(strings)

    # ---- queries ----
    def __getitem__(self, type_id: int) -> BtfType:
        if not 0 <= type_id < len(self.types):
            raise BtfFormatError(f"BTF type id {type_id} out of range (0..{len(self.types) - 1})")
        return self.types[type_id]

    def find(self, name: str, kind: Kind | None = None) -> BtfType | None:
        """First type named ``name`` (of ``kind`` if given)."""
        for t in self.types:
            if t.name == name and (kind is None or t.kind == kind):
                return t
        return None

    def datasecs(self) -> list[BtfType]:
        return [t for t in self.types if t.kind == Kind.DATASEC]

    def resolve(self, type_id: int) -> BtfType:
        """The type behind typedef/const/volatile/restrict/type_tag chains (cycle-safe)."""
        t = self[type_id]
        for _ in range(64):
            if t.kind not in _MODIFIERS:
                return t
            t = self[t.type]
        raise BtfFormatError(f"BTF type {type_id}: modifier chain too long (cycle?)")

    def size_of(self, type_id: int) -> int:
        """Size in bytes of a type (pointers are 8 bytes on BPF)."""
        for _ in range(64):
            t = self[type_id]
            if t.kind in _SIZED:
                return t.size
            if t.kind == Kind.PTR:
                return 8
            if t.kind == Kind.ARRAY:
                return t.nelems * self.size_of(t.type)
            if t.kind in _MODIFIERS or t.kind == Kind.VAR:
                type_id = t.type
                continue
            raise BtfFormatError(f"BTF type {type_id} ({t.kind.name}) has no size")
        raise BtfFormatError(f"BTF type {type_id}: reference chain too long (cycle?)")

    def name_chain(self, type_id: int) -> list[str]:
        """Names along a typedef/modifier chain, outermost first (``['__be16', '__u16']``)."""
        out, t = [], self[type_id]
        for _ in range(64):
            if t.name:
                out.append(t.name)
            if t.kind not in _MODIFIERS:
                break
            t = self[t.type]
        return out

    # ---- fix-ups (libbpf btf_fixup_datasec / bpf_object__sanitize_btf) ----
    def fixup_datasecs(
        self,
        section_size: Callable[[str], int | None],
        symbol_offset: Callable[[str, str], int | None],
    ) -> list[str]:
        """Fill zero DATASEC sizes from ELF section sizes and VAR offsets from symbol values,
        then sort entries by offset (what the kernel checks).  Returns what was changed;
        raises BtfFormatError naming the DATASEC/VAR when the ELF does not tell."""
        changes = []
        for t in self.datasecs():
            if t.name == ".ksyms" and all(self[m.type].kind == Kind.FUNC for m in t.members):
                continue  # kfunc declarations: sanitize() rewrites them as libbpf does
            if t.name in (".kconfig", ".ksyms"):
                raise BtfFormatError(f"DATASEC '{t.name}': extern variables are not supported")
            fix_offsets = t.size == 0
            if fix_offsets:
                size = section_size(t.name)
                if not size:
                    raise BtfFormatError(
                        f"DATASEC '{t.name}' has size 0 and the object has no such ELF section"
                    )
                if size > 0xFFFFFFFF:  # btf_type.size is a __u32 (include/uapi/linux/btf.h)
                    raise BtfFormatError(
                        f"DATASEC '{t.name}': its ELF section is {size} bytes, more than BTF "
                        "can describe (4 GiB)"
                    )
                t.size = size
                changes.append(f"DATASEC '{t.name}' size 0 -> {size}")
            for m in t.members:
                var = self[m.type]
                if var.kind != Kind.VAR:
                    raise BtfFormatError(f"DATASEC '{t.name}': entry {m.type} is not a VAR")
                if var.linkage != BTF_VAR_GLOBAL_ALLOCATED or not fix_offsets:
                    continue
                off = symbol_offset(t.name, var.name)
                if off is None:
                    raise BtfFormatError(f"DATASEC '{t.name}': VAR '{var.name}' has no ELF symbol")
                if off > 0xFFFFFFFF:  # btf_var_secinfo.offset is a __u32
                    raise BtfFormatError(
                        f"DATASEC '{t.name}': VAR '{var.name}' is at offset {off} (symbol value), "
                        "more than BTF can describe"
                    )
                if m.offset != off:
                    changes.append(f"VAR '{var.name}' offset {m.offset} -> {off}")
                    m.offset = off
            t.members.sort(key=lambda m: m.offset)
            for m in t.members:
                if m.offset + m.size > t.size:
                    raise BtfFormatError(
                        f"DATASEC '{t.name}': VAR {self[m.type].name!r} at {m.offset}+{m.size} "
                        f"is outside the section ({t.size} bytes)"
                    )
        return changes

    def sanitize(self) -> list[str]:
        """Rewrite what a 6.x kernel refuses: extern FUNCs (kfunc declarations) become
        static, extern VARs become static (they are never referenced once externs are
        refused).  Returns what was changed."""
        changes = self._sanitize_ksyms()
        for t in self.types:
            if t.kind == Kind.FUNC and t.linkage not in (BTF_FUNC_STATIC, BTF_FUNC_GLOBAL):
                t.linkage = BTF_FUNC_STATIC
                changes.append(f"FUNC '{t.name}' extern -> static")
            elif t.kind == Kind.VAR and t.linkage == BTF_VAR_GLOBAL_EXTERN:
                t.linkage = BTF_VAR_STATIC
                changes.append(f"VAR '{t.name}' extern -> static")
        return changes

    def _sanitize_ksyms(self) -> list[str]:
        """The DATASEC ``.ksyms`` of kfunc declarations as libbpf rewrites it before
        BPF_BTF_LOAD (bpf_object__collect_externs): the kernel wants VARs in a DATASEC, so
        each entry becomes a 4-byte static VAR ``dummy_ksym`` of a 4-byte int, one after
        the other, and the kfuncs' unnamed FUNC_PROTO parameters get that name (the kernel
        refuses a FUNC whose parameters have no names)."""
        sec = next((t for t in self.datasecs() if t.name == ".ksyms"), None)
        if sec is None or not sec.members:
            return []
        name = "dummy_ksym"
        name_off = self.add_string(name)
        int_id = next(
            (t.id for t in self.types if t.kind == Kind.INT and t.size == 4 and t.bits == 32), 0
        )
        if not int_id:
            int_id = len(self.types)
            self.types.append(
                BtfType(
                    int_id, Kind.INT, "int", self.add_string("int"), size=4, encoding=1, bits=32
                )
            )
        var_id = len(self.types)
        self.types.append(
            BtfType(var_id, Kind.VAR, name, name_off, type=int_id, linkage=BTF_VAR_STATIC)
        )
        for i, m in enumerate(sec.members):
            fn = self[m.type]
            proto = self[fn.type] if fn.kind == Kind.FUNC else None
            for p in proto.members if proto is not None else ():
                if not p.name_off:
                    p.name, p.name_off = name, name_off
            m.type, m.offset, m.size = var_id, 4 * i, 4
        sec.size = 4 * len(sec.members)
        return [f"DATASEC '.ksyms': {len(sec.members)} kfunc(s) -> VAR '{name}'"]

    def add_string(self, text: str) -> int:
        """Offset of ``text`` in the string section, appended if it is not there."""
        raw = text.encode() + b"\0"
        at = bytes(self.strings).find(b"\0" + raw)
        if at >= 0:
            return at + 1
        off = len(self.strings)
        self.strings += raw
        return off

    # ---- writing ----
    def to_bytes(self) -> bytes:
        """Serialize (header + types + strings), little endian, as the kernel reads it."""
        body = bytearray()
        for t in self.types[1:]:
            body += _encode_type(t)
        return raw_btf(bytes(body), bytes(self.strings))


def raw_btf(types: bytes, strings: bytes) -> bytes:
    """A ``.BTF`` blob: struct btf_header (version 1, 24 bytes, include/uapi/linux/btf.h),
    the encoded ``types``, then the string section ``strings`` (starting with a NUL)."""
    hdr = _HDR.pack(BTF_MAGIC, 1, 0, _HDR.size, 0, len(types), len(types), len(strings))
    return hdr + types + strings


def info_word(kind: Kind, vlen: int = 0, kflag: bool = False) -> int:
    """``btf_type.info``: BTF_INFO_ENC(kind, kflag, vlen) of include/uapi/linux/btf.h."""
    return (vlen & 0xFFFF) | (int(kind) << 24) | (int(kflag) << 31)


def _encode_type(t: BtfType) -> bytes:
    info = info_word(t.kind, t.vlen, t.kflag)
    st = t.size if t.kind in _SIZED else 0 if t.kind == Kind.ARRAY else t.type
    out = bytearray(_TYPE.pack(t.name_off, info, st))
    k = t.kind
    if k == Kind.INT:
        out += struct.pack("<I", (t.encoding << 24) | (t.int_offset << 16) | t.bits)
    elif k == Kind.ARRAY:
        out += struct.pack("<III", t.type, t.index_type, t.nelems)
    elif k in (Kind.STRUCT, Kind.UNION):
        for m in t.members:
            off = (m.bitfield_size << 24 | m.bit_offset) if t.kflag else m.bit_offset
            out += struct.pack("<III", m.name_off, m.type, off)
    elif k == Kind.ENUM:
        for m in t.members:
            out += struct.pack("<II", m.name_off, m.value & 0xFFFFFFFF)
    elif k == Kind.ENUM64:
        for m in t.members:
            v = m.value & 0xFFFFFFFFFFFFFFFF
            out += struct.pack("<III", m.name_off, v & 0xFFFFFFFF, v >> 32)
    elif k == Kind.FUNC_PROTO:
        for m in t.members:
            out += struct.pack("<II", m.name_off, m.type)
    elif k == Kind.VAR:
        out += struct.pack("<I", t.linkage)
    elif k == Kind.DATASEC:
        for m in t.members:
            out += struct.pack("<III", m.type, m.offset, m.size)
    elif k == Kind.DECL_TAG:
        out += struct.pack("<i", t.component_idx)
    return bytes(out)


def parse_btf(data: bytes) -> Btf:
    """Parse a ``.BTF`` section.  Raises BtfFormatError (truncation, bad magic/kind/offsets)."""
    data = bytes(data)
    if len(data) < _HDR.size:
        raise BtfFormatError(f".BTF is {len(data)} bytes, shorter than its header")
    magic, ver, _flags, hdr_len, type_off, type_len, str_off, str_len = _HDR.unpack_from(data)
    if magic == 0x9FEB:
        raise BtfFormatError(".BTF is big-endian; only little-endian (bpfel) is supported")
    if magic != BTF_MAGIC or ver != 1:
        raise BtfFormatError(f".BTF: bad magic {magic:#x} / version {ver}")
    if hdr_len < _HDR.size or hdr_len > len(data):
        raise BtfFormatError(f".BTF: bad header length {hdr_len}")
    ts, ss = hdr_len + type_off, hdr_len + str_off
    if ts + type_len > len(data) or ss + str_len > len(data):
        raise BtfFormatError(".BTF: type or string section runs past the end of the data")
    strings = data[ss : ss + str_len]
    if strings and strings[0] != 0:
        raise BtfFormatError(".BTF: string section does not start with an empty string")
    types = [BtfType(0, Kind.UNKN)]
    pos, end = ts, ts + type_len
    names = _Names(strings)
    while pos < end:
        t, pos = _decode_type(data, pos, end, len(types), names)
        types.append(t)
    return Btf(types, strings)


_U32 = struct.Struct("<I")
# kind -> (fixed extra bytes, bytes per vlen record, record format)
_EXTRA = {
    Kind.INT: (4, 0, None), Kind.ARRAY: (12, 0, None), Kind.VAR: (4, 0, None),
    Kind.DECL_TAG: (4, 0, None), Kind.STRUCT: (0, 12, "<III"), Kind.UNION: (0, 12, "<III"),
    Kind.ENUM: (0, 8, "<II"), Kind.ENUM64: (0, 12, "<III"), Kind.FUNC_PROTO: (0, 8, "<II"),
    Kind.DATASEC: (0, 12, "<III"),
}  # fmt: skip


class _Names:
    """String-section lookups with a cache (vmlinux BTF repeats names a lot)."""

    def __init__(self, strs: bytes):
        self.strs, self.cache = strs, {0: ""}

    def get(self, off: int, tid: int) -> str:
        s = self.cache.get(off)
        if s is None:
            s = self.cache[off] = read_cstr(self.strs, off, f"type {tid} name")
        return s


def _decode_type(data: bytes, pos: int, end: int, tid: int, names: _Names) -> tuple[BtfType, int]:
    if pos + 12 > end:
        raise BtfFormatError(f".BTF: type {tid} is truncated")
    name_off, info, st = _TYPE.unpack_from(data, pos)
    pos += 12
    try:
        kind = Kind((info >> 24) & 0x1F)
    except ValueError:
        raise BtfFormatError(f".BTF: type {tid} has unknown kind {(info >> 24) & 0x1F}") from None
    vlen, kflag = info & 0xFFFF, bool(info >> 31)
    t = BtfType(tid, kind, names.get(name_off, tid), name_off, kflag)
    if kind in _SIZED:
        t.size = st
    else:
        t.type = st
    fixed, rec, fmt = _EXTRA.get(kind, (0, 0, None))
    n = fixed + rec * vlen
    if pos + n > end:
        raise BtfFormatError(f".BTF: type {tid} is truncated")
    if kind == Kind.INT:
        (v,) = _U32.unpack_from(data, pos)
        t.encoding, t.int_offset, t.bits = (v >> 24) & 0xF, (v >> 16) & 0xFF, v & 0xFF
    elif kind == Kind.ARRAY:
        t.type, t.index_type, t.nelems = _TYPE.unpack_from(data, pos)
    elif kind == Kind.VAR:
        (t.linkage,) = _U32.unpack_from(data, pos)
    elif kind == Kind.DECL_TAG:
        (t.component_idx,) = struct.unpack_from("<i", data, pos)
    elif kind == Kind.FUNC:
        t.linkage = vlen
    elif rec and fmt is not None:
        recs = struct.iter_unpack(fmt, data[pos : pos + n])
        ms = t.members
        if kind in (Kind.STRUCT, Kind.UNION):
            for mo, mt, off in recs:
                bo, bs = (off & 0xFFFFFF, off >> 24) if kflag else (off, 0)
                ms.append(Member(names.get(mo, tid), mo, mt, bo, bs))
        elif kind == Kind.ENUM:
            for mo, v in recs:
                val = v - (1 << 32) if kflag and v & 0x80000000 else v
                ms.append(Member(names.get(mo, tid), mo, value=val))
        elif kind == Kind.ENUM64:
            for mo, lo, hi in recs:
                val = lo | hi << 32
                ms.append(
                    Member(
                        names.get(mo, tid),
                        mo,
                        value=val - (1 << 64) if kflag and val >> 63 else val,
                    )
                )
        elif kind == Kind.FUNC_PROTO:
            for mo, mt in recs:
                ms.append(Member(names.get(mo, tid), mo, mt))
        else:  # DATASEC
            for mt, off, sz in recs:
                ms.append(Member(type=mt, offset=off, size=sz))
    return t, pos + n


# bytes after the 12-byte btf_type of each kind, from vlen (include/uapi/linux/btf.h)
_SKIP = {
    Kind.INT: (4, 0), Kind.ARRAY: (12, 0), Kind.STRUCT: (0, 12), Kind.UNION: (0, 12),
    Kind.ENUM: (0, 8), Kind.FUNC_PROTO: (0, 8), Kind.VAR: (4, 0), Kind.DATASEC: (0, 12),
    Kind.DECL_TAG: (4, 0), Kind.ENUM64: (0, 12),
}  # fmt: skip


def find_func_id(data: bytes, name: str) -> int | None:
    """The type id of the FUNC named ``name`` in raw BTF ``data`` (the kernel's
    /sys/kernel/btf/vmlinux: one pass over the type headers, without decoding the ~150k
    types the way :func:`parse_btf` does), or None."""
    magic, _ver, _flags, hdr_len, type_off, type_len, str_off, _str_len = _HDR.unpack_from(data)
    if magic != BTF_MAGIC:
        raise BtfFormatError("not BTF (bad magic)")
    strs = hdr_len + str_off
    want = name.encode() + b"\0"
    offs, at = set(), data.find(b"\0" + want, strs)
    while at >= 0:
        offs.add(at + 1 - strs)
        at = data.find(b"\0" + want, at + 1)
    if not offs:
        return None
    pos, end, tid = hdr_len + type_off, hdr_len + type_off + type_len, 1
    unpack = struct.Struct("<III").unpack_from
    while pos < end:
        name_off, info, _size = unpack(data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        if kind == Kind.FUNC and name_off in offs:
            return tid
        fixed, per = _SKIP.get(Kind(kind), (0, 0)) if kind <= 19 else (0, 0)
        pos += 12 + fixed + per * vlen
        tid += 1
    return None
