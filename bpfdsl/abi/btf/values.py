"""Values by BTF type: bytes -> Python (for printing/JSON) and text/Python -> bytes.

Used by the map CLI and the loader (``--set name=value`` for .rodata configs).  What a
value means comes from its BTF type alone (the names along its typedef chain), never from
the name of the struct member or map holding it:

- ``__be32`` (bpfdsl's ``be32``: IPv4 literals are be32 in the language) and the IPv4
  names of :data:`IPV4_NAMES` (``struct in_addr``...): ``a.b.c.d``; they also take an
  integer (network order).
- :data:`IPV6_NAMES` (bpfdsl's ``typedef __u8 ipv6_addr[16]``, ``struct in6_addr``): IPv6
  text; :data:`MAC_NAMES` (``typedef __u8 mac_addr[6]``): ``aa:bb:cc:dd:ee:ff``.
- ``__be16``/``__be64``: network order, shown in host order; other integers little endian
  (bpfel).
- An LPM trie key, a struct ``{prefixlen, <address>}`` (include/uapi/linux/bpf.h ``struct
  bpf_lpm_trie_key_hdr``; bpfdsl's ``ipv4_prefix``/``ipv6_prefix``): ``10.0.0.0/8``.

Parsing is strict by type: an IPv6 type refuses IPv4 text and the other way round, a
prefix with host bits is refused, no integer wraps.  Structs become dicts, arrays lists,
char arrays str.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import struct
from typing import TYPE_CHECKING, Literal, cast

from bpfdsl.abi.btf.core import BTF_INT_BOOL, BTF_INT_CHAR, BTF_INT_SIGNED, Btf, BtfType, Kind

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable
    from typing import Any

BE_NAMES = {"__be16": 2, "__be32": 4, "__be64": 8, "be16": 2, "be32": 4, "be64": 8}
# Type names (typedefs, struct tags) that make a value an address; bpfdsl emits __be32,
# ipv6_addr and mac_addr (bpfdsl.backend.codegen.debug), the rest are the usual C spellings.
IPV4_NAMES = {"__be32", "be32", "ipv4", "ipv4_addr", "ip4_addr", "in_addr", "in_addr_t"}
IPV6_NAMES = {"ipv6", "ipv6_addr", "ip6_addr", "in6_addr"}
MAC_NAMES = {"mac_addr", "ether_addr"}
# LPM trie keys: the kernel's key structs and bpfdsl's prefix types by name; any other
# struct whose first member is the kernel's `prefixlen` (struct bpf_lpm_trie_key_hdr)
_PREFIX_NAMES = {"ipv4_prefix", "ipv6_prefix", "bpf_lpm_trie_key", "bpf_lpm_trie_key_u8"}
_ADDR_BYTES = {"ipv4": 4, "ipv6": 16, "mac": 6}
_MAX_DEPTH = 32
_ALIASES = {"__u": "u", "__s": "i", "__be": "be"}  # kernel typedefs -> bpfdsl type names


def value_kind(btf: Btf, tid: int) -> str | None:
    """What type ``tid`` holds, from the names along its typedef chain (outermost first):
    ``'ipv4'``, ``'ipv6'``, ``'mac'`` (addresses, when the type is big enough for one),
    ``'be'`` (a network-order integer) or None (by its BTF kind)."""
    size = btf.size_of(tid)
    for name in btf.name_chain(tid):
        for kind, names in (("ipv4", IPV4_NAMES), ("ipv6", IPV6_NAMES), ("mac", MAC_NAMES)):
            if name in names:
                return kind if size >= _ADDR_BYTES[kind] else None
        if name in BE_NAMES:
            return "be"
    return None


def _prefix_struct(btf: Btf, t: BtfType) -> str | None:
    """'ipv4'/'ipv6' when ``t`` is an LPM trie key: a struct of a 4-byte prefix length and
    an address (by its type: ``__be32``, ``ipv6_addr``, ``struct in6_addr``...)."""
    if t.kind != Kind.STRUCT or len(t.members) != 2 or btf.size_of(t.members[0].type) != 4:
        return None
    if t.name not in _PREFIX_NAMES and t.members[0].name != "prefixlen":
        return None
    kind = value_kind(btf, t.members[1].type)
    return kind if kind in ("ipv4", "ipv6") else None


def format_value(btf: Btf, tid: int, data: bytes, _depth: int = 0) -> Any:
    """Decode ``data`` (bytes of the type's size) to int/str/bool/float/list/dict."""
    if _depth > _MAX_DEPTH:
        return data.hex()
    sp = value_kind(btf, tid)
    t = btf.resolve(tid)
    if sp == "ipv4" and len(data) >= 4:
        return str(ipaddress.IPv4Address(data[:4]))
    if sp == "ipv6" and len(data) >= 16:
        return str(ipaddress.IPv6Address(data[:16]))
    if sp == "mac" and len(data) >= 6:
        return ":".join(f"{b:02x}" for b in data[:6])
    if sp == "be" and t.kind == Kind.INT:
        return int.from_bytes(data[: t.size], "big")
    k = t.kind
    if k == Kind.INT:
        if t.encoding & BTF_INT_BOOL:
            return bool(int.from_bytes(data[: t.size], "little"))
        signed = bool(t.encoding & BTF_INT_SIGNED)
        v = int.from_bytes(data[: t.size], "little", signed=signed)
        if t.int_offset or t.bits != t.size * 8:
            v = (v >> t.int_offset) & ((1 << t.bits) - 1)
        return v
    if k in (Kind.ENUM, Kind.ENUM64):
        v = int.from_bytes(data[: t.size], "little", signed=t.kflag)
        return next((m.name for m in t.members if m.value == v), v)
    if k == Kind.PTR:
        return hex(int.from_bytes(data[:8], "little"))
    if k == Kind.FLOAT:
        return struct.unpack("<d" if t.size == 8 else "<f", data[: t.size])[0]
    if k == Kind.ARRAY:
        esz = btf.size_of(t.type)
        et = btf.resolve(t.type)
        is_char = et.kind == Kind.INT and et.size == 1
        if is_char and (et.encoding & BTF_INT_CHAR or et.name == "char"):
            raw = data[: t.nelems].split(b"\0", 1)[0]
            if all(32 <= c < 127 for c in raw):
                return raw.decode()
        return [
            format_value(btf, t.type, data[i * esz : (i + 1) * esz], _depth + 1)
            for i in range(t.nelems)
        ]
    if k in (Kind.STRUCT, Kind.UNION):
        pk = _prefix_struct(btf, t)
        if pk:
            plen = int.from_bytes(data[:4], "little")
            m = t.members[1]
            off = m.bit_offset // 8
            addr = data[off : off + (4 if pk == "ipv4" else 16)]
            ip = ipaddress.IPv4Address(addr) if pk == "ipv4" else ipaddress.IPv6Address(addr)
            return f"{ip}/{plen}"
        out: dict[str, Any] = {}
        for m in t.members:
            if m.bitfield_size:
                word = int.from_bytes(data, "little")
                out[m.name] = (word >> m.bit_offset) & ((1 << m.bitfield_size) - 1)
                continue
            off = m.bit_offset // 8
            sub = data[off : off + btf.size_of(m.type)]
            v = format_value(btf, m.type, sub, _depth + 1)
            if not m.name and isinstance(v, dict):
                out.update(v)
            else:
                out[m.name or f"_{off}"] = v
        return out
    if k == Kind.DATASEC:
        return {
            btf[m.type].name: format_value(
                btf, m.type, data[m.offset : m.offset + m.size], _depth + 1
            )
            for m in t.members
        }
    if k == Kind.VAR:
        return format_value(btf, t.type, data, _depth + 1)
    return data.hex()


def _little_int(signed: bool) -> Callable[[bytes], Any]:
    return lambda b: int.from_bytes(b, "little", signed=signed)


def _member_format(btf: Btf, tid: int) -> Callable[[bytes], Any]:
    return lambda b: format_value(btf, tid, b, 1)


def decoder(btf: Btf, tid: int) -> Callable[[bytes], Any]:
    """A function decoding bytes of type ``tid`` exactly as :func:`format_value` does,
    with the walk over the type done once: for streams of records of one struct type
    (``bpfdsl events``, ``bpfdsl map dump``), where format_value's per-call walk would
    dominate.  Structs of plain members (:func:`row_layout`) are read by one
    ``struct.Struct`` unpack (:func:`row_struct`); anything else falls back to
    format_value."""
    layout = row_layout(btf, tid)
    if not layout:
        return _member_decoder(btf, tid)
    try:
        st, convert = row_struct(layout)
    except ValueError:  # overlapping members
        return _member_decoder(btf, tid)
    conv = dict(convert)
    ns: dict[str, Any] = {"unpack": st.unpack_from, "format_value": format_value, "btf": btf,
                          **{f"c{i}": fn for i, fn in convert}}  # fmt: skip
    args = [f"a{i}" for i in range(len(layout))]
    fields = ", ".join(
        f"{name!r}: " + (f"c{i}(a{i})" if i in conv else f"a{i}")
        for i, (name, *_) in enumerate(layout)
    )
    src = (
        "def decode(data):\n"
        f"    if len(data) < {st.size}:  # short bytes: format_value reads what is there\n"
        f"        return format_value(btf, {tid}, data)\n"
        f"    {', '.join(args)}, = unpack(data)\n"
        f"    return {{{fields}}}\n"
    )
    exec(compile(src, "<decoder>", "exec"), ns)
    return cast("Callable[[bytes], Any]", ns["decode"])


def _member_decoder(btf: Btf, tid: int) -> Callable[[bytes], Any]:
    """:func:`decoder` for structs that are not a :func:`row_layout`: a member table."""
    t = btf.resolve(tid)
    if t.kind != Kind.STRUCT or _prefix_struct(btf, t) or value_kind(btf, tid):
        return lambda data: format_value(btf, tid, data)
    plan: list[tuple[str, int, int, Callable[[bytes], Any]]] = []
    for m in t.members:
        if m.bitfield_size or not m.name:
            return lambda data: format_value(btf, tid, data)
        off, size = m.bit_offset // 8, btf.size_of(m.type)
        mt, sp = btf.resolve(m.type), value_kind(btf, m.type)
        if sp in ("ipv4", "ipv6", "mac"):
            plan.append((m.name, off, _ADDR_BYTES[sp], _ROW_CONVERT[sp]))
        elif sp == "be" and mt.kind == Kind.INT:
            plan.append((m.name, off, mt.size, _ROW_CONVERT["be"]))
        elif (
            mt.kind == Kind.INT
            and sp is None
            and not mt.int_offset
            and mt.bits == mt.size * 8
            and not mt.encoding & BTF_INT_BOOL
        ):
            signed = bool(mt.encoding & BTF_INT_SIGNED)
            plan.append((m.name, off, mt.size,
                         _little_int(signed)))  # fmt: skip
        else:
            plan.append((m.name, off, size, _member_format(btf, m.type)))

    def decode(data: bytes) -> dict[str, Any]:
        return {name: fn(data[off : off + size]) for name, off, size, fn in plan}

    return decode


def row_struct(
    layout: list[tuple[str, int, int, str]],
) -> tuple[struct.Struct, list[tuple[int, Callable[[Any], Any]]]]:
    """The ``struct.Struct`` reading the members of a :func:`row_layout` in order
    (little-endian integers as themselves, other members as ``bytes``), and the
    conversions ``(member index, function)`` that give the values :func:`format_value`
    gives for the others (network-order integer -> host int, addresses -> text).  Raises
    ValueError for overlapping members."""
    fmt, pos = "<", 0
    convert: list[tuple[int, Callable[[Any], Any]]] = []
    for i, (_name, off, n, form) in enumerate(layout):
        if off < pos:
            raise ValueError("overlapping members")  # a union-like struct
        fmt += f"{off - pos}x" if off > pos else ""
        if form in ("int", "uint"):
            fmt += INT_CODES[(n, form == "int")]
        else:
            fmt += f"{n}s"
            convert.append((i, _ROW_CONVERT[form]))
        pos = off + n
    return struct.Struct(fmt), convert


def _big_int(b: bytes) -> int:
    return int.from_bytes(b, "big")


_ADDR_TEXT: dict[bytes, str] = {}  # addresses repeat across records: each formatted once


def _ipv4_text(b: bytes) -> str:
    t = _ADDR_TEXT.get(b)
    if t is None:
        if len(_ADDR_TEXT) > 65536:
            _ADDR_TEXT.clear()
        t = _ADDR_TEXT[b] = socket.inet_ntop(socket.AF_INET, b)
    return t


def _ipv6_text(b: bytes) -> str:
    t = _ADDR_TEXT.get(b)
    if t is None:
        if len(_ADDR_TEXT) > 65536:
            _ADDR_TEXT.clear()
        t = _ADDR_TEXT[b] = str(ipaddress.IPv6Address(b))  # as format_value writes it
    return t


def _mac_text(b: bytes) -> str:
    return b.hex(":")


_ROW_CONVERT: dict[str, Callable[[Any], Any]] = {
    "be": _big_int, "ipv4": _ipv4_text, "ipv6": _ipv6_text, "mac": _mac_text,
}  # fmt: skip


def row_layout(btf: Btf, tid: int) -> list[tuple[str, int, int, str]] | None:
    """The members of struct ``tid`` as ``(name, byte offset, size, form)`` when each is a
    plain member :func:`decoder` reads without format_value: ``form`` ``'int'``/``'uint'``
    (little endian, 1/2/4/8 bytes), ``'be'`` (network order integer), ``'ipv4'``,
    ``'ipv6'``, ``'mac'``; None for any other type (bitfields, nested structs, arrays...).
    For readers that decode many records of one type at once (a struct.Struct, a numpy
    dtype) and must give the values :func:`decoder` gives."""
    t = btf.resolve(tid)
    if t.kind != Kind.STRUCT or _prefix_struct(btf, t) or value_kind(btf, tid):
        return None
    out: list[tuple[str, int, int, str]] = []
    for m in t.members:
        if m.bitfield_size or not m.name:
            return None
        off = m.bit_offset // 8
        mt, sp = btf.resolve(m.type), value_kind(btf, m.type)
        if sp in ("ipv4", "ipv6", "mac"):
            out.append((m.name, off, _ADDR_BYTES[sp], sp))
        elif mt.kind == Kind.INT and mt.size in (1, 2, 4, 8) and not mt.int_offset \
                and mt.bits == mt.size * 8 and not mt.encoding & BTF_INT_BOOL:  # fmt: skip
            if sp == "be":
                out.append((m.name, off, mt.size, "be"))
            elif sp is None:
                signed = bool(mt.encoding & BTF_INT_SIGNED)
                out.append((m.name, off, mt.size, "int" if signed else "uint"))
            else:
                return None
        else:
            return None
    return out


def format_text(btf: Btf, tid: int, data: bytes) -> str:
    """One-line human form: scalars as themselves, structs/lists as compact JSON."""
    v = format_value(btf, tid, data)
    return v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))


def parse_value(btf: Btf, tid: int, text: str) -> bytes:
    """Parse user text to the bytes of type ``tid``: ``42``, ``0x2a``, ``10.0.0.1``,
    ``10.0.0.0/8``, an enum name, ``true``, a JSON object/array for structs and arrays, or
    ``hex:0a0b...`` for raw bytes.  Raises ValueError saying what was expected."""
    s = text.strip()
    if s[:1] in ("{", "["):
        try:
            obj: Any = json.loads(s)
        except json.JSONDecodeError as e:
            raise ValueError(f"invalid JSON value {s!r}: {e.msg}") from None
    else:
        obj = s
    return encode_value(btf, tid, obj)


def type_label(btf: Btf, tid: int) -> str:
    """The type's name as bpfdsl spells it: ``__u8`` -> ``u8``, ``__s8`` -> ``i8``,
    ``__be16`` -> ``be16``; other names as in BTF (``unsigned int``, ``flow``)."""
    chain = btf.name_chain(tid)
    if not chain:
        return btf.resolve(tid).kind.name.lower()
    name = chain[0]
    for pre, rep in _ALIASES.items():
        if name.startswith(pre) and name[len(pre) :].isdigit():
            return rep + name[len(pre) :]
    return name


def int_range(size: int, signed: bool) -> tuple[int, int]:
    """(lowest, highest) value of a ``size``-byte integer."""
    bits = size * 8
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def _int(obj: Any, what: str) -> int:
    if isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, int):
        return obj
    if isinstance(obj, str):
        low = obj.strip().lower()
        if low in ("true", "false"):
            return int(low == "true")
        try:
            return int(low.replace("_", ""), 0)
        except ValueError:
            pass
    raise ValueError(f"expected an integer for {what}, got {_as_json(obj)}")


def _int_bytes(
    v: int, size: int, order: Literal["little", "big"], what: str, signed: bool = False
) -> bytes:
    """``v`` in ``size`` bytes (``order``: "little"/"big"); ValueError naming type ``what``
    and its range when ``v`` is outside it (nothing wraps: -1 is no u8)."""
    lo, hi = int_range(size, signed)
    if not lo <= v <= hi:
        raise ValueError(f"{v} does not fit in {what} ({lo}..{hi})")
    return v.to_bytes(size, order, signed=signed)


def _ipv4(text: str) -> bytes | None:
    """Packed a.b.c.d (network order) or None when ``text`` is no dotted IPv4 address."""
    if text.count(".") != 3:
        return None
    try:
        return ipaddress.IPv4Address(text.strip()).packed
    except ValueError:
        return None


_FORMS = {
    "ipv4": "an IPv4 address like 10.0.0.1",
    "ipv6": "an IPv6 address like fd00::1",
    "mac": "a MAC address like 02:00:00:00:00:01",
}


def _address(kind: str, text: str, what: str) -> bytes:
    """The packed address of ``kind`` ('ipv4', 'ipv6', 'mac') written as ``text``, network
    order; ValueError naming the expected form (and the family it got instead)."""
    t = text.strip()
    try:
        if kind == "mac":
            parts = t.split(":")
            if len(parts) == 6 and all(len(x) == 2 for x in parts):
                return bytes.fromhex("".join(parts))
        elif kind == "ipv4":
            return ipaddress.IPv4Address(t).packed
        else:
            return ipaddress.IPv6Address(t).packed
    except ValueError:
        pass
    got = ""
    try:
        other = ipaddress.ip_address(t)
        got = f" (an IPv{other.version} address)"
        if kind == "ipv6" and other.version == 4:
            got += f"; its IPv4-mapped form is ::ffff:{t}"
    except ValueError:
        pass
    raise ValueError(f"expected {_FORMS[kind]} for {what}, got {text!r}{got}")


def _as_json(obj: object) -> str:
    """``obj`` as the user wrote it (JSON), for messages; Python's repr if it is not JSON."""
    try:
        return json.dumps(obj)
    except (TypeError, ValueError):
        return repr(obj)


def encode_value(btf: Btf, tid: int, obj: Any, _depth: int = 0) -> bytes:
    """Python value (as :func:`format_value` returns, or str forms) -> bytes of type ``tid``."""
    if _depth > _MAX_DEPTH:
        raise ValueError("value nests too deeply")
    size = btf.size_of(tid)
    if isinstance(obj, str) and obj.startswith("hex:"):
        raw = bytes.fromhex(obj[4:])
        if len(raw) != size:
            raise ValueError(f"hex value has {len(raw)} bytes, the type has {size}")
        return raw
    sp = value_kind(btf, tid)
    t = btf.resolve(tid)
    name = type_label(btf, tid)
    if sp == "ipv4" and t.kind == Kind.INT and t.size == 4:  # __be32: an address or a number
        if isinstance(obj, str) and (v4 := _ipv4(obj)) is not None:
            return v4  # an IPv4 literal is a be32, as in the language
        if isinstance(obj, str) and (":" in obj or "." in obj):
            _address("ipv4", obj, name)  # raises: '10.1', an IPv6 or MAC address
        return _int_bytes(_int(obj, f"{name} (or an IPv4 address a.b.c.d)"), 4, "big", name)
    if sp in _ADDR_BYTES and isinstance(obj, str):
        return _address(sp, obj, name).ljust(size, b"\0")
    if sp == "be" and t.kind == Kind.INT:
        return _int_bytes(_int(obj, name), t.size, "big", name)
    k = t.kind
    if k == Kind.INT:
        signed = bool(t.encoding & BTF_INT_SIGNED)
        return _int_bytes(_int(obj, name), t.size, "little", name, signed)
    if k in (Kind.ENUM, Kind.ENUM64):
        for m in t.members:
            if isinstance(obj, str) and m.name == obj:
                return _int_bytes(m.value, t.size, "little", name, bool(t.kflag))
        return _int_bytes(_int(obj, f"enum {name}"), t.size, "little", name, bool(t.kflag))
    if k == Kind.PTR:
        return _int_bytes(_int(obj, name), 8, "little", name)
    if k == Kind.FLOAT:
        return struct.pack("<d" if t.size == 8 else "<f", float(obj))
    if k == Kind.ARRAY:
        esz = btf.size_of(t.type)
        et = btf.resolve(t.type)
        if isinstance(obj, str) and esz == 1 and t.nelems in (6, 16) and ":" in obj:
            # a bare u8[6]/u8[16] (objects without the mac_addr/ipv6_addr typedefs)
            return _address("mac" if t.nelems == 6 else "ipv6", obj, f"{name}[{t.nelems}]")
        is_char = et.kind == Kind.INT and (et.encoding & BTF_INT_CHAR or et.name == "char")
        if isinstance(obj, str) and esz == 1 and is_char:  # as format_value prints them
            raw = obj.encode()
            if len(raw) > t.nelems:
                raise ValueError(f"string of {len(raw)} bytes does not fit char[{t.nelems}]")
            return raw.ljust(t.nelems, b"\0")
        if not isinstance(obj, list) or len(obj) > t.nelems:
            raise ValueError(f"expected a list of at most {t.nelems} elements, got {_as_json(obj)}")
        out = b"".join(encode_value(btf, t.type, x, _depth + 1) for x in obj)
        return out.ljust(size, b"\0")
    if k in (Kind.STRUCT, Kind.UNION):
        return _encode_struct(btf, t, obj, size, name, _depth)
    if k == Kind.DATASEC:  # the value of a global-data map (.rodata, .data, .bss)
        raise ValueError(
            f"{name} is a data section, not written as one value: a config (.rodata) is "
            "frozen once loaded, set it at load time with `bpfdsl load --set NAME=VALUE`"
        )
    raise ValueError(f"cannot write values of BTF kind {k.name} ({name})")


def _prefix(kind: str, text: str, what: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``text`` as a prefix of family ``kind`` ('ipv4'/'ipv6'); ValueError naming the form
    expected: the other family, a missing ``/len`` or host bits (``10.0.0.1/8``, which the
    language refuses too) are errors."""
    example = "10.0.0.0/8" if kind == "ipv4" else "2001:db8::/32"
    t = text.strip()
    cls = ipaddress.IPv4Network if kind == "ipv4" else ipaddress.IPv6Network
    if "/" not in t:
        raise ValueError(f"expected a prefix like {example} for {what}, got {text!r}")
    try:
        net = cls(t, strict=False)
    except ValueError:
        try:
            other = ipaddress.ip_network(t, strict=False)
        except ValueError:
            raise ValueError(f"expected a prefix like {example} for {what}, got {text!r}") from None
        raise ValueError(
            f"expected an IPv{4 if kind == 'ipv4' else 6} prefix like {example} for {what}, "
            f"got {text!r} (an IPv{other.version} prefix)"
        ) from None
    if ipaddress.ip_address(t.split("/", 1)[0].strip()) != net.network_address:
        raise ValueError(f"{text!r} has host bits set past /{net.prefixlen}: give {net}")
    return net


def _encode_struct(btf: Btf, t: BtfType, obj: Any, size: int, name: str, depth: int) -> bytes:
    pk = _prefix_struct(btf, t)
    if pk and isinstance(obj, str):
        net = _prefix(pk, obj, name)
        m = t.members[1]
        buf = bytearray(size)
        buf[0:4] = net.prefixlen.to_bytes(4, "little")
        off = m.bit_offset // 8
        packed = net.network_address.packed
        buf[off : off + len(packed)] = packed
        return bytes(buf)
    members = [m for m in t.members if m.name]
    if isinstance(obj, list):
        if len(obj) > len(members):
            raise ValueError(f"{name} has {len(members)} fields, got {len(obj)} values")
        obj = {m.name: v for m, v in zip(members, obj, strict=False)}
    if not isinstance(obj, dict):
        raise ValueError(f"expected an object with fields {[m.name for m in members]} for {name}")
    known = {m.name for m in members}
    unknown = set(obj) - known
    if unknown:
        raise ValueError(f"{name} has no field(s) {sorted(unknown)}; fields: {sorted(known)}")
    buf = bytearray(size)
    for m in t.members:
        if m.name not in obj:
            continue
        if m.bitfield_size:
            v = _int(obj[m.name], m.name)
            if not 0 <= v < 1 << m.bitfield_size:
                raise ValueError(
                    f"{v} does not fit in field {m.name} ({m.bitfield_size} bits: "
                    f"0..{(1 << m.bitfield_size) - 1})"
                )
            word = int.from_bytes(buf, "little") | (v << m.bit_offset)
            buf[:] = word.to_bytes(size, "little")
            continue
        off = m.bit_offset // 8
        raw = encode_value(btf, m.type, obj[m.name], depth + 1)
        buf[off : off + len(raw)] = raw
    return bytes(buf)


# struct module codes of little-endian integers by (size, signed): one table for the batch
# readers (bpfdsl.runtime.events.RowCodec) and :func:`encoder`
INT_CODES = {(1, False): "B", (2, False): "H", (4, False): "I", (8, False): "Q",
             (1, True): "b", (2, True): "h", (4, True): "i", (8, True): "q"}  # fmt: skip


def encoder(btf: Btf, tid: int) -> Callable[[Any], bytes]:
    """A function encoding a Python value of type ``tid`` to the bytes
    :func:`encode_value` gives (and raising its ValueError), with the walk over the type
    done once: for writing many entries of one type (``MapView.update_batch``, ``bpfdsl
    map update --from``).  Structs of named, non-overlapping members are one generated
    function packing a ``struct.Struct`` (ints checked to be ``int``, be integers and
    addresses converted by member); IPv4 text through ``socket.inet_pton`` (as strict as
    ``ipaddress``: four decimal parts, no leading zeros), IPv4/IPv6 prefixes, MACs, enum
    names, arrays of any of these.  Any other value or form (``hex:``, text integers,
    missing struct fields, bitfields...) and any value the fast path refuses goes to
    :func:`encode_value` itself, so the result and the errors are encode_value's."""
    return _encoder(btf, tid, 0)


def _encoder(btf: Btf, tid: int, depth: int) -> Callable[[Any], bytes]:
    def slow(obj: Any) -> bytes:
        return encode_value(btf, tid, obj, depth)

    if depth > _MAX_DEPTH:
        return slow
    size = btf.size_of(tid)
    sp = value_kind(btf, tid)
    t = btf.resolve(tid)
    k = t.kind
    if sp == "ipv4":
        return _ipv4_encoder(slow, size, k == Kind.INT and t.size == 4)
    if sp == "ipv6" or sp == "mac":
        return _text_address_encoder(slow, sp, size)
    if k == Kind.INT:
        order: Literal["little", "big"] = "big" if sp == "be" else "little"
        signed = sp != "be" and bool(t.encoding & BTF_INT_SIGNED)
        n = t.size

        def enc_int(obj: Any) -> bytes:
            if type(obj) is int:
                try:
                    return obj.to_bytes(n, order, signed=signed)
                except OverflowError:
                    pass
            return slow(obj)

        return enc_int
    if k in (Kind.ENUM, Kind.ENUM64):
        names: dict[str, bytes] = {}
        for m in t.members:
            if m.name not in names:
                try:
                    names[m.name] = m.value.to_bytes(t.size, "little", signed=bool(t.kflag))
                except OverflowError:
                    return slow
        n, esigned = t.size, bool(t.kflag)

        def enc_enum(obj: Any) -> bytes:
            tp = type(obj)
            if tp is str:
                got = names.get(obj)
                if got is not None:
                    return got
            elif tp is int:
                try:
                    return obj.to_bytes(n, "little", signed=esigned)
                except OverflowError:
                    pass
            return slow(obj)

        return enc_enum
    if k == Kind.ARRAY:
        elem = _encoder(btf, t.type, depth + 1)
        nelems = t.nelems

        def enc_array(obj: Any) -> bytes:
            if type(obj) is list and len(obj) <= nelems:
                try:
                    return b"".join([elem(x) for x in obj]).ljust(size, b"\0")
                except Exception:
                    pass
            return slow(obj)  # text forms (char arrays, bare u8[6]/u8[16]) and errors

        return enc_array
    if k == Kind.STRUCT:
        pk = _prefix_struct(btf, t)
        if pk:
            return _prefix_encoder(slow, pk, size, t.members[1].bit_offset // 8)
        return _struct_encoder(btf, t, size, depth, slow)
    return slow  # unions, floats, pointers...


def _ipv4_encoder(slow: Callable[[Any], bytes], size: int, is_int: bool) -> Callable[[Any], bytes]:
    """IPv4 text by inet_pton (glibc's inet_pton4 takes exactly what ipaddress takes: four
    decimal parts 0-255 without leading zeros), and for a be32 an int in network order."""
    pton, af = socket.inet_pton, socket.AF_INET

    def enc(obj: Any) -> bytes:
        tp = type(obj)
        try:
            if tp is str:
                raw = pton(af, obj)
                return raw if size == 4 else raw.ljust(size, b"\0")
            if tp is int and is_int:
                return obj.to_bytes(4, "big")
        except (OSError, OverflowError):
            pass
        return slow(obj)

    return enc


def _text_address_encoder(
    slow: Callable[[Any], bytes], kind: str, size: int
) -> Callable[[Any], bytes]:
    if kind == "ipv6":
        v6 = ipaddress.IPv6Address

        def enc6(obj: Any) -> bytes:
            if type(obj) is str:
                try:
                    return v6(obj).packed.ljust(size, b"\0")
                except ValueError:
                    pass
            return slow(obj)

        return enc6

    def enc_mac(obj: Any) -> bytes:
        # _address's form (six parts of two hex digits) for text with nothing to strip:
        # 17 characters, a colon at every third and only there, the rest no whitespace
        if type(obj) is str and len(obj) == 17 and obj[2::3] == ":::::":
            digits = obj.replace(":", "")
            if len(digits) == 12 and digits.isalnum():
                try:
                    raw = bytes.fromhex(digits)
                    return raw if size == 6 else raw.ljust(size, b"\0")
                except ValueError:
                    pass
        return slow(obj)

    return enc_mac


def _prefix_encoder(
    slow: Callable[[Any], bytes], kind: str, size: int, off: int
) -> Callable[[Any], bytes]:
    """An LPM key from ``ADDR/LEN`` text (LEN decimal digits, no host bits), as _prefix."""
    bits = 32 if kind == "ipv4" else 128
    tail = size - off - bits // 8
    if off < 4 or tail < 0:
        return slow
    pad = bytes(off - 4)
    end = bytes(tail)
    pton, af = socket.inet_pton, socket.AF_INET
    v6 = ipaddress.IPv6Address

    def enc(obj: Any) -> bytes:
        if type(obj) is str:
            addr, sep, plen = obj.partition("/")
            if sep and plen.isascii() and plen.isdigit() and "/" not in plen and "%" not in addr:
                n = int(plen)
                try:
                    raw = pton(af, addr) if bits == 32 else v6(addr).packed
                except (OSError, ValueError):
                    raw = None
                if raw is not None and n <= bits:
                    if not int.from_bytes(raw, "big") & ((1 << (bits - n)) - 1):
                        return n.to_bytes(4, "little") + pad + raw + end
        return slow(obj)

    return enc


def _struct_encoder(
    btf: Btf, t: BtfType, size: int, depth: int, slow: Callable[[Any], bytes]
) -> Callable[[Any], bytes]:
    """One generated function for a struct of named, non-overlapping, non-bitfield
    members: a dict holding exactly its fields packs through one struct.Struct."""
    got = _struct_packer(btf, t, size, depth, slow)
    if got is None:
        return slow
    names, packm = got[0], got[1]
    ns: dict[str, Any] = {"slow": slow, "packm": packm}
    src = (
        "def enc(obj):\n"
        f"    if type(obj) is dict and len(obj) == {len(names)}:\n"
        "        try:\n"
        f"            return packm({', '.join(f'obj[{n!r}]' for n in names)})\n"
        "        except Exception:  # a value of another form, or out of range\n"
        "            pass\n"
        "    return slow(obj)\n"
    )
    exec(compile(src, f"<encoder {t.name or 'struct'}>", "exec"), ns)
    return cast("Callable[[Any], bytes]", ns["enc"])


def _struct_packer(
    btf: Btf,
    t: BtfType,
    size: int,
    depth: int,
    slow: Callable[[Any], bytes],
    json_text: bool = False,
    prefix: str = "",
) -> tuple[list[str], Callable[..., bytes], dict[str, Any], str] | None:
    """(member names in BTF order, a generated function of one argument per member
    giving the struct's bytes as encode_value gives them for the dict of those members,
    raising when a value is not of a form it packs itself, its namespace and the pack
    expression of its body over the arguments ``{prefix}v{i}``); None when the struct is
    not of named, non-overlapping, non-bitfield members.  ``json_text``: every argument
    is the text of a JSON integer (integer members) or of a JSON string without escapes
    (address members; 6-byte MACs checked to be ``xx:xx:xx:xx:xx:xx`` in hex digits), as
    :func:`json_line_encoder`'s expression captures them."""
    members = list(t.members)
    if not members or any(m.bitfield_size or not m.name or m.bit_offset % 8 for m in members):
        return None
    if len({m.name for m in members}) != len(members):
        return None
    fmt, pos = "<", 0
    ns: dict[str, Any] = {
        "pton": socket.inet_pton,
        "AF_INET": socket.AF_INET,
        "fromhex": bytes.fromhex,
    }
    args, checks = [], []
    for i, m in sorted(enumerate(members), key=lambda im: im[1].bit_offset):
        off, msize = m.bit_offset // 8, btf.size_of(m.type)
        if off < pos:
            return None  # overlapping members (a union-like layout)
        fmt += f"{off - pos}x" if off > pos else ""
        pos = off + msize
        mt, sp = btf.resolve(m.type), value_kind(btf, m.type)
        v, e = f"{prefix}v{i}", f"{prefix}e{i}"
        if mt.kind == Kind.INT and sp is None and mt.size in (1, 2, 4, 8):
            fmt += INT_CODES[(mt.size, bool(mt.encoding & BTF_INT_SIGNED))]
            if json_text:
                args.append(f"int({v})")
            else:
                checks.append(f"type({v}) is int")  # struct.pack takes bools, __index__...
                args.append(v)
            continue
        fmt += f"{msize}s"
        if mt.kind == Kind.INT and sp == "be":
            if json_text:
                args.append(f"int({v}).to_bytes({mt.size}, 'big')")
            else:
                checks.append(f"type({v}) is int")  # to_bytes refuses what does not fit
                args.append(f"{v}.to_bytes({mt.size}, 'big')")
            continue
        sub = _encoder(btf, m.type, depth + 1)
        if sub.__name__ == "slow":  # encode_value itself: its bytes checked against the slot
            sub = _sized(sub, msize)
        ns[e] = sub
        if json_text and sp == "mac" and msize == 6:
            args.append(f"fromhex({v}.replace(':', ''))")  # what enc_mac does with it
        elif json_text and sp == "ipv4" and msize == 4:
            args.append(f"pton(AF_INET, {v})")
        elif sp == "ipv4" and msize == 4:  # the common case inline: a.b.c.d text
            args.append(f"(pton(AF_INET, {v}) if type({v}) is str else {e}({v}))")
        else:
            args.append(f"{e}({v})")
    if pos > size:
        return None
    fmt += f"{size - pos}x" if size > pos else ""
    ns[f"{prefix}pack"] = struct.Struct(fmt).pack
    params = ", ".join(f"{prefix}v{i}" for i in range(len(members)))
    expr = f"{prefix}pack({', '.join(args)})"
    src = (
        f"def packm({params}):\n"
        f"    if {' and '.join(checks) or 'True'}:\n"
        f"        return {expr}\n"
        "    raise ValueError('not a form packed here')\n"
    )
    exec(compile(src, f"<packer {t.name or 'struct'}>", "exec"), ns)
    return [m.name for m in members], ns["packm"], ns, expr


# JSON text of one string without escapes (what json decodes to the same characters) or of
# an integer (JSON's grammar: no leading zeros, no '+'), and JSON's blanks within a line
_JSON_STR = r'"([^"\\\x00-\x1f]*)"'
_JSON_INT = r"(-?(?:0|[1-9][0-9]*))"
_JSON_BLANK = "[ \t]*"
_JSON_MAC = '"((?:[0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2})"'  # the text enc_mac takes as it is


def json_line_encoder(
    btf: Btf, key_tid: int, value_tid: int, key_size: int, value_size: int
) -> JsonLineEncoder | None:
    """For JSON lines files (``bpfdsl map update --from``): a function taking one line and
    giving the (key bytes, value bytes) :func:`encoder` gives for ``json.loads(line)``'s
    ``key`` and ``value``, when the line is ``{"key": K, "value": V}`` (as ``json.dumps``
    writes it, or with other blanks) whose K and V are structs written as objects of
    every member in BTF order, each an integer or a string without escapes; None for any
    other line (which then goes through json and the encoder).  The line is read by one
    regular expression, the struct packed from its groups without building dicts.  None
    when the key or value type is not such a struct."""
    parts, exprs, params = [], [], []
    b = _JSON_BLANK
    ns: dict[str, Any] = {}
    for tid, size, prefix in ((key_tid, key_size, "k_"), (value_tid, value_size, "v_")):
        t = btf.resolve(tid)
        got = None
        if t.kind == Kind.STRUCT and not _prefix_struct(btf, t) and not value_kind(btf, tid):
            slow = _encode_value_of(btf, tid)
            got = _struct_packer(btf, t, size, 0, slow, json_text=True, prefix=prefix)
        if got is None or btf.size_of(tid) != size:
            return None
        fields = []
        for m in t.members:  # the BTF order of names
            mt, sp = btf.resolve(m.type), value_kind(btf, m.type)
            if mt.kind == Kind.INT and sp in (None, "be"):
                form = _JSON_INT  # the form json.dumps writes
            elif sp == "mac" and btf.size_of(m.type) == 6:
                form = _JSON_MAC
            elif sp in ("ipv4", "ipv6", "mac"):
                form = _JSON_STR
            else:
                return None  # nested objects, lists, enums...: json and the encoder
            fields.append(f"{re.escape(json.dumps(m.name))}{b}:{b}{form}")
        parts.append(f"\\{{{b}{f'{b},{b}'.join(fields)}{b}\\}}")
        ns.update(got[2])
        exprs.append(got[3])
        params += [f"{prefix}v{i}" for i in range(len(t.members))]
    pattern = re.compile(
        f'{b}\\{{{b}"key"{b}:{b}{parts[0]}{b},{b}"value"{b}:{b}{parts[1]}{b}\\}}{b}'
    )
    ns["match"] = pattern.fullmatch
    kexpr, vexpr = exprs
    src = (
        "def line(text):\n"
        "    m = match(text)\n"
        "    if m is None:\n"
        "        return None\n"
        f"    {', '.join(params)}, = m.groups()\n"
        "    try:\n"
        f"        return {kexpr}, {vexpr}\n"
        "    except Exception:  # a value the packers do not take: json and the encoder\n"
        "        return None\n"
        "def rows(groups, start):\n"
        "    keys, values = [], []\n"
        "    kappend, vappend = keys.append, values.append\n"
        "    try:\n"
        f"        for {', '.join(params)}, in groups[start:]:\n"
        f"            kappend({kexpr})  # one list longer than the other: the value failed\n"
        f"            vappend({vexpr})\n"
        "    except Exception:\n"
        "        pass\n"
        "    del keys[len(values):]\n"
        "    return keys, values\n"
    )
    exec(compile(src, "<json line encoder>", "exec"), ns)
    return JsonLineEncoder(
        ns["line"], re.compile(f"^{pattern.pattern}$", re.MULTILINE).findall, ns["rows"]
    )


class JsonLineEncoder:
    """What :func:`json_line_encoder` gives: called with one line, (key bytes, value
    bytes) or None; :meth:`rows` packs the groups :attr:`findall` finds in a whole text
    (one tuple per line in the form, ``\\n``-separated lines), from ``start`` up to the
    first it cannot pack: (keys, values) of the packed ones."""

    def __init__(
        self,
        line: Callable[[str], tuple[bytes, bytes] | None],
        findall: Callable[[str], list[tuple[str, ...]]],
        rows: Callable[[list[tuple[str, ...]], int], tuple[list[bytes], list[bytes]]],
    ) -> None:
        self._line = line
        self.findall = findall
        self.rows = rows

    def __call__(self, text: str) -> tuple[bytes, bytes] | None:
        return self._line(text)


def _encode_value_of(btf: Btf, tid: int) -> Callable[[Any], bytes]:
    def slow(obj: Any) -> bytes:
        return encode_value(btf, tid, obj)

    return slow


def _sized(fn: Callable[[Any], bytes], n: int) -> Callable[[Any], bytes]:
    """``fn`` raising when its bytes do not fill the ``n``-byte slot (the struct's slow
    path then writes what encode_value writes)."""

    def enc(obj: Any) -> bytes:
        raw = fn(obj)
        if len(raw) != n:
            raise ValueError("size")
        return raw

    return enc
