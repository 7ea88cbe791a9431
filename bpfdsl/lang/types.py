"""Types of the language (front end): what sema assigns to expressions and codegen lowers.

Scalars are :class:`IntType` (host order, or network order when ``be``) and :data:`BOOL`;
fixed byte strings (:class:`BytesType`: MAC 6 bytes, IPv6 address 16 bytes) are kept in
network byte order; :class:`StructType` lays out members with C natural alignment (an
8-byte member at an 8-byte offset, padding zeroed by codegen: FIELD-BUGS B07).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any


class Type:
    """Base of all types; subclasses provide ``size``/``align`` (bytes) and ``name``.

    Every type is a dataclass.  The value types (integers, bool, byte strings, arrays,
    headers, ctx, void, the error type) are frozen and equal when their fields are (``u32``
    written twice is one type); :class:`StructType`, :class:`MapType`, :class:`OptionalType`
    and :class:`RefType` are ``eq=False``, compared by identity: each declaration (or each
    use of a map) is its own type, whatever its members."""

    __slots__ = ()

    if TYPE_CHECKING:  # what the subclasses provide (fields or properties)

        @property
        def name(self) -> str: ...
        @property
        def size(self) -> int: ...
        @property
        def align(self) -> int: ...

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class IntType(Type):
    """An integer of ``bits`` bits; ``be`` = stored in network byte order (be16/be32/be64).

    ``size``/``align`` in bytes (bits // 8); ``name`` as written (``u16``, ``i32``, ``be16``)."""

    bits: int
    signed: bool = False
    be: bool = False

    @property
    def size(self) -> int:
        return self.bits // 8

    align = size

    @property
    def name(self) -> str:
        return f"be{self.bits}" if self.be else f"{'i' if self.signed else 'u'}{self.bits}"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class BoolType(Type):
    size: int = 1
    align: int = 1
    name: str = "bool"

    def __str__(self) -> str:
        return "bool"


@dataclass(frozen=True, slots=True)
class UntypedInt(Type):
    """Type of an integer literal before context gives it one."""

    name: str = "integer literal"
    size: int = 8
    align: int = 8


@dataclass(frozen=True, slots=True)
class BytesType(Type):
    """Fixed-size byte string in network order: ``mac_addr`` (6), ``ipv6_addr`` (16)."""

    name: str
    size: int
    align: int


@dataclass(eq=False, slots=True)
class StructType(Type):
    """A C-layout struct; ``fields``: name -> (byte offset, type).  Compared by identity."""

    name: str
    fields: dict[str, tuple[int, Type]] = field(default_factory=dict)
    size: int = 0
    align: int = 1


@dataclass(frozen=True, slots=True)
class ArrayType(Type):
    """``[elem; count]``: ``count`` elements, no padding between them."""

    elem: Type
    count: int

    @property
    def size(self) -> int:
        return self.elem.size * self.count

    @property
    def align(self) -> int:
        return self.elem.align

    @property
    def name(self) -> str:
        return f"[{self.elem}; {self.count}]"


@dataclass(frozen=True, slots=True)
class HeaderType(Type):
    """A view of a packet header (a bounds-checked packet pointer); see bpfdsl.lang.headers.

    Equal by ``name`` (``layout``, a headers.Header, does not take part)."""

    name: str
    layout: Any = field(compare=False)  # a headers.Header (headers imports this module)

    def __str__(self) -> str:
        return f"header {self.name}"


@dataclass(eq=False, slots=True)
class MapType(Type):
    """A map: ``kind`` is the language name (``percpu_array``), ``map_type`` the kernel's
    BPF_MAP_TYPE_* number, ``max_entries`` and ``flags`` (BPF_F_*) as in ``struct
    bpf_map_def``; ``pinning`` libbpf's LIBBPF_PIN_* (1: pinned by name).  Event maps
    (``ringbuf``, ``perf_event_array``) have no key/value types but a ``record`` struct,
    the type of what programs send through them.  Compared by identity."""

    name: str
    kind: str
    map_type: int
    key: Type | None
    value: Type | None
    max_entries: int
    flags: int = 0
    pinning: int = 0
    record: Type | None = None

    def __str__(self) -> str:
        return f"map {self.name}"


@dataclass(eq=False, slots=True)
class OptionalType(Type):
    """A value that may be missing (map lookup, parse): must go through let-else / if-let."""

    inner: Type
    what: str = "value"

    def __str__(self) -> str:
        return f"optional {self.inner}"


@dataclass(eq=False, slots=True)
class RefType(Type):
    """A reference to a map value (result of a handled lookup); reads load, writes store."""

    inner: Type
    percpu: bool = False
    readonly: bool = False

    def __str__(self) -> str:
        return f"&{self.inner}"


@dataclass(eq=False, slots=True)
class RingbufRef(RefType):
    """A ring buffer reservation (``ringbuf_reserve``): the record's memory in the ring.
    Only this program sees it until ``ringbuf_submit``/``ringbuf_discard`` (so ``+=`` on
    a field is a plain add: ``percpu`` is True); sema's reference rule
    (:mod:`bpfdsl.lang.sema.refs`) makes every path end it exactly once."""

    map_name: str = ""

    def __str__(self) -> str:
        return f"reservation of {self.inner}"


@dataclass(frozen=True, slots=True)
class CtxType(Type):
    name: str = "ctx"

    def __str__(self) -> str:
        return "ctx"


@dataclass(frozen=True, slots=True)
class VoidType(Type):
    name: str = "void"

    def __str__(self) -> str:
        return "void"


@dataclass(frozen=True, slots=True)
class ErrorType(Type):
    """The type of an expression that already has an error: fits anywhere (no cascades)."""

    name: str = "<error>"
    size: int = 4
    align: int = 4


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


@dataclass(eq=False, slots=True)
class MetaRef(RefType):
    """A view of the XDP metadata area (``meta(S)``): struct ``S`` at ``ctx->data_meta``,
    bounds-checked against ``ctx->data``.  Packet memory: no atomics (``percpu`` is True,
    so ``+=`` is a plain add), and invalid after a helper that changes packet data."""

    def __str__(self) -> str:
        return f"metadata {self.inner}"
