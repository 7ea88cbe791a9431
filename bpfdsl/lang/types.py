"""Types of the language (front end): what sema assigns to expressions and codegen lowers.

Scalars are :class:`IntType` (host order, or network order when ``be``) and :data:`BOOL`;
fixed byte strings (:class:`BytesType`: MAC 6 bytes, IPv6 address 16 bytes) are kept in
network byte order; :class:`StructType` lays out members with C natural alignment (an
8-byte member at an 8-byte offset, padding zeroed by codegen: FIELD-BUGS B07).
"""

from __future__ import annotations


class Type:
    """Base of all types; subclasses provide ``size``/``align`` (bytes) and ``name``.

    Types are plain classes (not dataclasses: their creation at import exec()s generated
    code): a :class:`ValueType` is immutable by convention and compared and hashed by
    ``_key()`` for the same class (frozen-dataclass semantics); other types compare by
    identity."""

    _repr_fields: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._repr_fields)
        return f"{type(self).__name__}({args})"


class ValueType(Type):
    """A type equal to another of the same class with the same ``_key()``."""

    def _key(self) -> tuple:
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())


class IntType(ValueType):
    """An integer of ``bits`` bits; ``be`` = stored in network byte order (be16/be32/be64).

    ``size``/``align`` in bytes (bits // 8); ``name`` as written (``u16``, ``i32``, ``be16``)."""

    _repr_fields = ("bits", "signed", "be")

    def __init__(self, bits: int, signed: bool = False, be: bool = False) -> None:
        self.bits = bits
        self.signed = signed
        self.be = be
        self.size = self.align = bits // 8
        self.name = f"be{bits}" if be else f"{'i' if signed else 'u'}{bits}"

    def _key(self) -> tuple:
        return (self.bits, self.signed, self.be)

    def __str__(self) -> str:
        return self.name


class BoolType(ValueType):
    _repr_fields = ("size", "align", "name")

    def __init__(self, size: int = 1, align: int = 1, name: str = "bool") -> None:
        self.size = size
        self.align = align
        self.name = name

    def _key(self) -> tuple:
        return (self.size, self.align, self.name)

    def __str__(self) -> str:
        return "bool"


class UntypedInt(ValueType):
    """Type of an integer literal before context gives it one."""

    _repr_fields = ("name", "size", "align")

    def __init__(self, name: str = "integer literal", size: int = 8, align: int = 8) -> None:
        self.name = name
        self.size = size
        self.align = align

    def _key(self) -> tuple:
        return (self.name, self.size, self.align)

    def __str__(self) -> str:
        return self.name


class BytesType(ValueType):
    """Fixed-size byte string in network order: ``mac_addr`` (6), ``ipv6_addr`` (16)."""

    _repr_fields = ("name", "size", "align")

    def __init__(self, name: str, size: int, align: int) -> None:
        self.name = name
        self.size = size
        self.align = align

    def _key(self) -> tuple:
        return (self.name, self.size, self.align)

    def __str__(self) -> str:
        return self.name


class StructType(Type):
    """A C-layout struct; ``fields``: name -> (byte offset, type).  Compared by identity."""

    _repr_fields = ("name", "fields", "size", "align")

    def __init__(
        self,
        name: str,
        fields: dict[str, tuple[int, Type]] | None = None,
        size: int = 0,
        align: int = 1,
    ) -> None:
        self.name = name
        self.fields = {} if fields is None else fields
        self.size = size
        self.align = align

    def __str__(self) -> str:
        return self.name


class ArrayType(ValueType):
    """``[elem; count]``: ``count`` elements, no padding between them."""

    _repr_fields = ("elem", "count")

    def __init__(self, elem: Type, count: int) -> None:
        self.elem = elem
        self.count = count

    def _key(self) -> tuple:
        return (self.elem, self.count)

    @property
    def size(self) -> int:  # type: ignore[override]
        return self.elem.size * self.count

    @property
    def align(self) -> int:  # type: ignore[override]
        return self.elem.align

    @property
    def name(self) -> str:  # type: ignore[override]
        return f"[{self.elem}; {self.count}]"

    def __str__(self) -> str:
        return self.name


class HeaderType(ValueType):
    """A view of a packet header (a bounds-checked packet pointer); see bpfdsl.lang.headers.

    Equal by ``name`` (``layout``, a headers.Header, does not take part)."""

    _repr_fields = ("name", "layout")

    def __init__(self, name: str, layout: object) -> None:
        self.name = name
        self.layout = layout

    def _key(self) -> tuple:
        return (self.name,)

    def __str__(self) -> str:
        return f"header {self.name}"


class MapType(Type):
    """A map: ``kind`` is the language name (``percpu_array``), ``map_type`` the kernel's
    BPF_MAP_TYPE_* number, ``max_entries`` and ``flags`` (BPF_F_*) as in ``struct
    bpf_map_def``.  Compared by identity."""

    _repr_fields = ("name", "kind", "map_type", "key", "value", "max_entries", "flags")

    def __init__(
        self,
        name: str,
        kind: str,
        map_type: int,
        key: Type | None,
        value: Type | None,
        max_entries: int,
        flags: int = 0,
    ) -> None:
        self.name = name
        self.kind = kind
        self.map_type = map_type
        self.key = key
        self.value = value
        self.max_entries = max_entries
        self.flags = flags

    def __str__(self) -> str:
        return f"map {self.name}"


class OptionalType(Type):
    """A value that may be missing (map lookup, parse): must go through let-else / if-let."""

    _repr_fields = ("inner", "what")

    def __init__(self, inner: Type, what: str = "value") -> None:
        self.inner = inner
        self.what = what

    def __str__(self) -> str:
        return f"optional {self.inner}"


class RefType(Type):
    """A reference to a map value (result of a handled lookup); reads load, writes store."""

    _repr_fields = ("inner", "percpu", "readonly")

    def __init__(self, inner: Type, percpu: bool = False, readonly: bool = False) -> None:
        self.inner = inner
        self.percpu = percpu
        self.readonly = readonly

    def __str__(self) -> str:
        return f"&{self.inner}"


class CtxType(ValueType):
    _repr_fields = ("name",)

    def __init__(self, name: str = "ctx") -> None:
        self.name = name

    def _key(self) -> tuple:
        return (self.name,)

    def __str__(self) -> str:
        return "ctx"


class VoidType(ValueType):
    _repr_fields = ("name",)

    def __init__(self, name: str = "void") -> None:
        self.name = name

    def _key(self) -> tuple:
        return (self.name,)

    def __str__(self) -> str:
        return "void"


class ErrorType(ValueType):
    """The type of an expression that already has an error: fits anywhere (no cascades)."""

    _repr_fields = ("name", "size", "align")

    def __init__(self, name: str = "<error>", size: int = 4, align: int = 4) -> None:
        self.name = name
        self.size = size
        self.align = align

    def _key(self) -> tuple:
        return (self.name, self.size, self.align)

    def __str__(self) -> str:
        return self.name


ERR = ErrorType()
U8, U16, U32, U64 = IntType(8), IntType(16), IntType(32), IntType(64)
I8, I16, I32, I64 = IntType(8, True), IntType(16, True), IntType(32, True), IntType(64, True)
BE16, BE32, BE64 = IntType(16, be=True), IntType(32, be=True), IntType(64, be=True)
BOOL = BoolType()
UNTYPED = UntypedInt()
VOID = VoidType()
CTX = CtxType()
MAC = BytesType("mac_addr", 6, 1)
IPV6_ADDR = BytesType("ipv6_addr", 16, 4)


def make_struct(name: str, members: list[tuple[str, Type]]) -> StructType:
    """Lay out ``members`` in order with C natural alignment; size rounded to the alignment."""
    off, align, fields = 0, 1, {}
    for fname, ty in members:
        a = max(1, ty.align)
        off = (off + a - 1) // a * a
        fields[fname] = (off, ty)
        off += ty.size
        align = max(align, a)
    size = (off + align - 1) // align * align
    return StructType(name, fields, size, align)


IPV4_PREFIX = make_struct("ipv4_prefix", [("prefixlen", U32), ("addr", BE32)])
IPV6_PREFIX = make_struct("ipv6_prefix", [("prefixlen", U32), ("addr", IPV6_ADDR)])

BUILTIN_TYPES: dict[str, Type] = {
    "u8": U8,
    "u16": U16,
    "u32": U32,
    "u64": U64,
    "i8": I8,
    "i16": I16,
    "i32": I32,
    "i64": I64,
    "be16": BE16,
    "be32": BE32,
    "be64": BE64,
    "bool": BOOL,
    "mac_addr": MAC,
    "ipv6_addr": IPV6_ADDR,
    "ipv4_prefix": IPV4_PREFIX,
    "ipv6_prefix": IPV6_PREFIX,
}


def is_int(t: Type) -> bool:
    """An integer (or an already-reported error, so no second message follows)."""
    return isinstance(t, (IntType, UntypedInt, ErrorType))


def is_host_int(t: Type) -> bool:
    return isinstance(t, (UntypedInt, ErrorType)) or (isinstance(t, IntType) and not t.be)
