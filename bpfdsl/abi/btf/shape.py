"""Structural identity of BTF types across two BTF objects: what a reused map must share.

Two maps of equal key and value *sizes* can still hold different things: a value that was
``struct { hits: u32, last_len: u32 }`` and is now ``struct { total_bytes: u64 }`` is 8
bytes in both, and a program reading the old bytes as the new type computes wrong values.
Before a live map (a pin, or the map of the program an update replaces) is reused, the
loader compares the key and value types of the map as the kernel holds them
(``bpf_map_info.btf_id``/``btf_key_type_id``/``btf_value_type_id``) with the object's, by
:func:`type_shape`.

The shape keeps what decides how bytes are read: kinds, sizes, names of structs, unions,
enums, typedefs and members (a renamed member is a changed meaning), member bit offsets and
bitfield sizes, integer encodings, array lengths, enum values, and the typedef chain
(``be16`` and ``u16`` are the same bits in another byte order).  It drops what does not:
``const``/``volatile``/``restrict``/type tags and type ids.  libbpf's own reuse check
(``map_is_reuse_compat()`` in libbpf.c) compares type, sizes, max_entries and flags only;
this is stricter on purpose.
"""

from __future__ import annotations

from bpfdsl.abi.btf.core import BTF_INT_SIGNED, Btf, BtfFormatError, Kind
from bpfdsl.abi.btf.values import type_label

_QUALIFIERS = (Kind.CONST, Kind.VOLATILE, Kind.RESTRICT, Kind.TYPE_TAG)
_MAX_DEPTH = 32  # nesting of types in a map key/value (the kernel allows 32 levels too)

Shape = tuple[object, ...]


def type_shape(btf: Btf, tid: int) -> Shape:
    """A hashable description of type ``tid`` of ``btf`` that is equal for two types (in
    any two BTF objects) exactly when they lay out and name their bytes the same way.
    Raises BtfFormatError on a malformed type graph (a cycle through non-pointer types)."""
    return _shape(btf, tid, 0)


def _shape(btf: Btf, tid: int, depth: int) -> Shape:
    if depth > _MAX_DEPTH:
        raise BtfFormatError(f"BTF type {tid}: nested more than {_MAX_DEPTH} levels")
    t = btf[tid]
    while t.kind in _QUALIFIERS:
        t = btf[t.type]
    k = t.kind
    if tid == 0 or k == Kind.UNKN:
        return ("void",)
    if k == Kind.INT:
        return ("int", t.name, t.size, t.encoding, t.bits, t.int_offset)
    if k == Kind.FLOAT:
        return ("float", t.name, t.size)
    if k == Kind.TYPEDEF:
        return ("typedef", t.name, _shape(btf, t.type, depth + 1))
    if k == Kind.PTR:  # what it points at does not change the 8 bytes' layout
        return ("ptr",)
    if k == Kind.ARRAY:
        return ("array", t.nelems, _shape(btf, t.type, depth + 1))
    if k in (Kind.STRUCT, Kind.UNION):
        members = tuple(
            (m.name, m.bit_offset, m.bitfield_size, _shape(btf, m.type, depth + 1))
            for m in t.members
        )
        return (k.name.lower(), t.name, t.size, members)
    if k in (Kind.ENUM, Kind.ENUM64):
        return ("enum", t.name, t.size, t.kflag, tuple((m.name, m.value) for m in t.members))
    if k == Kind.FWD:
        return ("fwd", t.name, t.kflag)
    return (k.name.lower(), t.name)


def type_decl(btf: Btf, tid: int, *, depth: int = 0) -> str:
    """Type ``tid`` written out in bpfdsl's spelling, members included, for messages:
    ``struct stats { hits: u32, last_len: u32 }``, ``[u8; 16]``, ``be32``."""
    t = btf[tid]
    while t.kind in _QUALIFIERS:
        t = btf[t.type]
    if t.kind in (Kind.STRUCT, Kind.UNION) and depth < 3:
        kw = t.kind.name.lower()
        inner = ", ".join(
            f"{m.name or '(anon)'}: {type_decl(btf, m.type, depth=depth + 1)}"
            + (f" : {m.bitfield_size}" if m.bitfield_size else "")
            for m in t.members
        )
        return f"{kw}{' ' + t.name if t.name else ''} {{ {inner} }}"
    if t.kind == Kind.ARRAY:
        return f"[{type_decl(btf, t.type, depth=depth + 1)}; {t.nelems}]"
    if t.kind == Kind.INT and not t.name:
        return f"{'i' if t.encoding & BTF_INT_SIGNED else 'u'}{t.size * 8}"
    if t.kind == Kind.PTR:
        return "pointer"
    return type_label(btf, t.id)
