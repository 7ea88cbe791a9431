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
import struct
from typing import TYPE_CHECKING, Literal

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
    (``bpfdsl events``), where format_value's per-call walk would dominate.  Structs of
    plain members (integers, be integers, addresses) get a member table; anything else
    falls back to format_value."""
    t = btf.resolve(tid)
    if t.kind != Kind.STRUCT or _prefix_struct(btf, t) or value_kind(btf, tid):
        return lambda data: format_value(btf, tid, data)
    plan: list[tuple[str, int, int, Callable[[bytes], Any]]] = []
    for m in t.members:
        if m.bitfield_size or not m.name:
            return lambda data: format_value(btf, tid, data)
        off, size = m.bit_offset // 8, btf.size_of(m.type)
        mt, sp = btf.resolve(m.type), value_kind(btf, m.type)
        if sp == "ipv4":
            plan.append((m.name, off, 4, lambda b: str(ipaddress.IPv4Address(b))))
        elif sp == "ipv6":
            plan.append((m.name, off, 16, lambda b: str(ipaddress.IPv6Address(b))))
        elif sp == "mac":
            plan.append((m.name, off, 6, lambda b: ":".join(f"{x:02x}" for x in b)))
        elif sp == "be" and mt.kind == Kind.INT:
            plan.append((m.name, off, mt.size, lambda b: int.from_bytes(b, "big")))
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
    raise ValueError(f"expected an integer for {what}, got {obj!r}")


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
            raise ValueError(f"expected a list of at most {t.nelems} elements, got {obj!r}")
        out = b"".join(encode_value(btf, t.type, x, _depth + 1) for x in obj)
        return out.ljust(size, b"\0")
    if k in (Kind.STRUCT, Kind.UNION):
        return _encode_struct(btf, t, obj, size, name, _depth)
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
