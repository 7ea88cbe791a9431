"""Header layouts from ``header`` declarations (front end): ast.HeaderDecl -> Header.

One mechanism for the standard library (``bpfdsl/lang/headers.bpfd``, read by
:mod:`bpfdsl.lang.headers`) and for headers a program declares (sema).  Fields are laid out
in declaration order, in network byte order: ``bit<N>`` fields are packed most significant
bit first (P4's ``bit<N>``) and read as host-order integers of the smallest of u8/u16/u32/u64
that holds N bits; every other field (``u8``, ``be16``/``be32``/``be64``, ``mac_addr``,
``ipv6_addr``, ``[u8; N]``) starts at a whole byte.  The fixed part must be whole bytes.

Declaration arguments (``header NAME(ARG: VALUE, ...)``):

- ``length: EXPR`` -- the header's full length in bytes, computed from its own fields
  (numbers, fields of the fixed part, ``+ - * << >> & |``), like ipv4's ``ihl * 4``;
  ``max_length: N`` bounds it (required with ``length``: the verifier must see a bound;
  at most :data:`MAX_PACKET_OFF`).  ``parse`` fails (runs ``else``) when the computed length
  is below the fixed size or above the bound.
- ``checksum: FIELD`` -- a ``be16`` field holding the Internet checksum (RFC 1071) of the
  header: field writes update it incrementally (RFC 1624).
- Standard library only (they tie the header to the IP pseudo-header rules of
  :data:`bpfdsl.lang.headers.PSEUDO_FIELDS`): ``pseudo_header: true`` (the checksum also
  covers the IP pseudo-header; a transport header), ``zero_checksum: true`` (a zero
  checksum means "none" and stays zero: UDP, RFC 768), ``l4: true`` (a transport header).

A field ``NAME: TYPE if EXPR`` (after the fixed part) is present only when EXPR, over the
fixed fields, is not zero (GRE's key, RFC 2890); each present one moves the fields after it,
and the header's length is the fixed part plus the present fields.  Fields a length or a
condition is computed from are read-only (writing them would move what was parsed after).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable
from dataclasses import dataclass, field

from bpfdsl.abi.limits import MAX_PACKET_OFF
from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T

# MAX_PACKET_OFF (bpfdsl.abi.limits): a header longer than this could not be addressed.
USER_ARGS = ("length", "max_length", "checksum")
LIBRARY_ARGS = ("pseudo_header", "zero_checksum", "l4")
# operators of length and condition expressions (host-order u64 arithmetic)
LENGTH_OPS = ("+", "-", "*", "<<", ">>", "&", "|")
# whole-byte field types (network order); bit<N> fields are the host-order alternative
_BYTE_TYPES = ("u8", "be16", "be32", "be64", "mac_addr", "ipv6_addr")

Err = Callable[[str, str, Span, "str | None"], None]


@dataclass(frozen=True, slots=True)
class HField:
    """One header field: byte ``offset`` and language ``type``.  A bit field (``bit<N>``)
    has ``width`` N (bits; 0 = a whole-byte field) and is read from the ``window`` bytes
    at ``offset`` (1, 2, 4 or 8 in one load; 3, 5, 6 or 7 byte by byte) taken in network
    order, ``shift`` bits above the lowest bit of that number.  ``readonly``: a field the
    header's length or a condition is computed from.  A conditional field (``cond``, an
    expression over fixed fields) is present only when ``cond`` is not 0, at ``offset`` plus
    the sizes of the conditional fields before it (``after``, names) that are present.
    Immutable, equal by value."""

    offset: int
    type: T.Type
    shift: int = 0
    width: int = 0
    window: int = 0  # 0: 1 for a bit field, else none
    readonly: bool = False
    cond: ast.Expr | None = None
    after: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.window and self.width:
            object.__setattr__(self, "window", 1)

    @property
    def writable(self) -> bool:
        return not self.readonly and self.cond is None

    @property
    def size(self) -> int:
        """Bytes a read or write touches (the window of a bit field)."""
        return self.window if self.width else self.type.size


@dataclass(eq=False, slots=True)
class Header:
    """A header layout (:data:`bpfdsl.lang.headers.HEADERS`, or a program's ``header``).
    ``size``: fixed part in bytes.  ``length``: how the full length is found (``None``:
    the fixed size or, with conditional fields, the fixed size plus the fields present;
    else an expression over the fields, in bytes), at most ``max_length`` bytes (None: the
    fixed size).  ``csum``: offset of the checksum field or None; ``pseudo``: the checksum
    covers the IP pseudo-header; ``zero_ok``: a zero checksum means "none" and stays zero
    (UDP over IPv4); ``l4``: a transport header.  ``decl``: the ``header`` declaration
    (None for headers made in Python); ``library``: from the standard library.  Immutable
    by convention once built; compared by identity (one object per header)."""

    name: str
    c_name: str
    size: int
    fields: dict[str, HField] = field(default_factory=dict)
    length: ast.Expr | None = None
    csum: int | None = None
    pseudo: bool = False
    zero_ok: bool = False
    l4: bool = False
    max_length: int | None = None
    decl: ast.HeaderDecl | None = None
    library: bool = False

    def __post_init__(self) -> None:
        if self.max_length is None:
            self.max_length = self.size

    @property
    def conditional(self) -> bool:
        """Has fields present only when a condition holds (their sizes add to the length)."""
        return any(f.cond is not None for f in self.fields.values())

    def __repr__(self) -> str:
        return f"Header({self.name!r}, {self.c_name!r}, size={self.size})"


def _value_type(bits: int) -> T.IntType:
    """The host-order integer a bit<N> field reads as: u8, u16, u32 or u64."""
    for t in (T.U8, T.U16, T.U32, T.U64):
        if bits <= t.bits:
            return t
    raise AssertionError(bits)


def _window(first: int, last: int, size: int) -> tuple[int, int] | None:
    """(start byte, bytes) of what is read for a bit field in bytes ``first..last`` of a
    ``size``-byte header: the smallest load of 1, 2, 4 or 8 bytes at an offset that is a
    multiple of it (the shape of clang's loads of C bit fields), else at the latest offset
    where it fits in the header; else exactly those bytes (3, 5, 6 or 7, read one by one).
    None for more than 8 bytes (a bit<57..64> starting inside a byte)."""
    span = last - first + 1
    if span > 8:
        return None
    for w in (1, 2, 4, 8):
        start = first // w * w
        if start + w > last and start + w <= size:
            return start, w
    for w in (1, 2, 4, 8):
        for start in range(first, last - w, -1):
            if start >= 0 and start + w <= size:
                return start, w
    return first, span


class _Builder:
    def __init__(self, decl: ast.HeaderDecl, resolve: Callable, err: Err, library: bool):
        self.decl = decl
        self.resolve = resolve
        self.err = err
        self.library = library
        self.ok = True

    def error(self, code: str, msg: str, span: Span, hint: str | None = None) -> None:
        self.ok = False
        self.err(code, msg, span, hint)

    def field_type(self, f: ast.HeaderFieldDecl) -> tuple[T.Type | None, int]:
        """(language type, bits) of field ``f``; (None, 0) after an error."""
        t = f.type
        if isinstance(t, ast.BitType):
            if t.name != "bit":
                self.error("unknown-type", f"unknown type `{t.name}<{t.width}>`", t.span,
                           "header fields take `bit<N>` (N bits, most significant first)")  # fmt: skip
                return None, 0
            if not 1 <= t.width <= 64:
                self.error(
                    "bit-width",
                    f"`bit<{t.width}>` has {'no' if t.width == 0 else 'more than 64'} bits: "
                    "a bit field has 1 to 64",
                    t.span,
                    "split a wider field into several bit<N> fields, or use a byte array `[u8; N]`",
                )
                return None, 0
            return _value_type(t.width), t.width
        ty = self.resolve(t)
        if ty is None or ty is T.ERR:
            self.ok = False
            return None, 0
        if isinstance(ty, T.ArrayType) and ty.elem == T.U8:
            return ty, ty.size * 8
        if ty.name in _BYTE_TYPES:
            return ty, ty.size * 8
        hint = "header fields are in network order: use be16/be32/be64, or bit<N> for a "
        hint += "host-order number of N bits"
        if isinstance(ty, T.ArrayType):
            hint = "a header array holds bytes: write `[u8; N]`"
        self.error(
            "header-field-type",
            f"`{ty}` cannot be a header field",
            t.span,
            hint + "; header fields: u8, be16, be32, be64, mac_addr, ipv6_addr, [u8; N], bit<N>",
        )
        return None, 0

    def build(self) -> Header | None:
        d = self.decl
        placed: list[tuple[str, int, int, T.Type, bool]] = []  # (name, bit, bits, type, bit<N>)
        bits = 0  # running bit offset of the fixed part
        size = None  # bytes of the fixed part, once a conditional field starts
        cond_fields: list[tuple[str, ast.HeaderFieldDecl, T.Type]] = []
        spans: dict[str, ast.HeaderFieldDecl] = {}
        if not d.fields:
            self.error("empty-header", f"header `{d.name}` has no fields", d.span,
                       "declare its fields, e.g. `header h { flags: u8, id: be16 }`")  # fmt: skip
            return None
        for f in d.fields:
            if f.name in spans:
                self.error("duplicate-name", f"`{f.name}` appears twice in header `{d.name}`",
                           f.span, f"the first is at line {spans[f.name].span.line}")  # fmt: skip
                continue
            spans[f.name] = f
            ty, n = self.field_type(f)
            if ty is None:
                continue
            is_bits = isinstance(f.type, ast.BitType)
            if f.cond is not None or size is not None:
                if size is None:
                    if bits % 8:
                        self.error("header-bits", self._bits_msg(bits), f.span,
                                   self._bits_hint(bits))  # fmt: skip
                        return None
                    size = bits // 8
                if f.cond is None:
                    self.error(
                        "header-field-order",
                        f"field `{f.name}` follows a conditional field: its place would "
                        "depend on the packet",
                        f.span,
                        "put the fields that are always there first, the `if` fields last",
                    )
                elif is_bits:
                    self.error("header-field-type", f"conditional field `{f.name}` is a bit field",
                               f.type.span, "a field with `if` holds whole bytes: use u8, "
                               "be16, be32, be64, [u8; N] or an address")  # fmt: skip
                else:
                    cond_fields.append((f.name, f, ty))
                continue
            if not is_bits and bits % 8:
                self.error(
                    "header-bits",
                    f"field `{f.name}` ({ty}) would start at bit {bits % 8} of byte "
                    f"{bits // 8}: only bit<N> fields share a byte",
                    f.span,
                    self._bits_hint(bits),
                )
            placed.append((f.name, bits, n, ty, is_bits))
            bits += n
        if not self.ok:
            return None
        if size is None:
            if bits % 8:
                self.error("header-bits", self._bits_msg(bits), d.fields[-1].span,
                           self._bits_hint(bits))  # fmt: skip
                return None
            size = bits // 8
        if size > MAX_PACKET_OFF:
            self.error(
                "header-length",
                f"header `{d.name}` is {size} bytes: the verifier addresses at most "
                f"{MAX_PACKET_OFF} bytes of a packet",
                d.span,
                "declare the part the program reads; `load` reaches bytes after it",
            )
            return None
        fields: dict[str, HField] = {}
        for name, bit, n, ty, is_bits in placed:
            hf = None
            if is_bits:
                assert isinstance(ty, T.IntType)  # field_type gives bit<N> its _value_type(N)
                hf = self._bit_field(name, bit, n, ty, size, spans[name])
            fields[name] = hf if hf is not None else HField(bit // 8, ty)
        if not self.ok:
            return None
        h = Header(d.name, d.name, size, fields, decl=d, library=self.library)
        readonly: set[str] = set()
        self.args(h, fields, readonly)
        after: list[str] = []
        off = size
        for name, f, ty in cond_fields:
            assert f.cond is not None  # cond_fields holds the fields with `if` only
            self.check_expr(f.cond, fields, "condition", readonly)
            fields[name] = HField(off, ty, cond=f.cond, after=tuple(after))
            after.append(name)
            off += ty.size
        if cond_fields:
            if h.length is not None:
                self.error(
                    "header-length",
                    "a header with `if` fields has the length of the fields present: "
                    "remove `length`",
                    d.arg_spans.get("length", d.span),
                    "or drop the `if` fields and read those bytes with `load`",
                )
            h.max_length = off
        for name in readonly:
            fields[name] = dataclasses.replace(fields[name], readonly=True)
        return h if self.ok else None

    def _bit_field(
        self, name: str, bit: int, n: int, ty: T.IntType, size: int, f: ast.HeaderFieldDecl
    ) -> HField | None:
        """The HField of ``bit<n>`` at bit offset ``bit`` of a ``size``-byte header: read
        from a 1/2/4/8-byte window in network order, ``shift`` bits above its lowest bit."""
        first, last = bit // 8, (bit + n - 1) // 8
        if bit % 8 == 0 and n == 8:
            return None  # a whole byte: a plain u8
        win = _window(first, last, size)
        if win is None:
            self.error(
                "header-bits",
                f"bit field `{name}` (bit<{n}> at bit {bit % 8} of byte {first}) spans 9 "
                "bytes: it cannot be read as one 64-bit number",
                f.span,
                "start it at a whole byte, or split it into two bit<N> fields",
            )
            return None
        start, w = win
        shift = (start + w) * 8 - (bit + n)
        return HField(start, ty, shift, n, w)

    @staticmethod
    def _bits_msg(bits: int) -> str:
        return f"the fields add up to {bits} bits, not a whole number of bytes"

    @staticmethod
    def _bits_hint(bits: int) -> str:
        pad = 8 - bits % 8
        return (
            f"add {pad} bit{'s' if pad > 1 else ''} (e.g. `reserved: bit<{pad}>`) or widen a field"
        )

    def args(self, h: Header, fields: dict[str, HField], readonly: set[str]) -> None:
        d = self.decl
        allowed = USER_ARGS + (LIBRARY_ARGS if self.library else ())
        for k, span in d.arg_spans.items():
            if k not in allowed:
                m = difflib.get_close_matches(k, allowed, n=1)
                hint = f"did you mean `{m[0]}`?" if m else "header arguments: " + ", ".join(allowed)
                if k in LIBRARY_ARGS:
                    hint = (
                        "the IP pseudo-header rules are known only for the library's tcp, udp, "
                        "icmp and icmpv6; header arguments: " + ", ".join(USER_ARGS)
                    )
                self.error("header-args", f"unknown header argument `{k}`", span, hint)
        a = d.args
        if "length" in a:
            e = a["length"]
            names = self.check_expr(e, fields, "length", readonly)
            if names == 0 and self.ok:
                self.error(
                    "header-length",
                    "this length uses no field: the header would have a fixed size",
                    e.span,
                    "declare the bytes as fields (e.g. `data: [u8; N]`), or compute the "
                    "length from a field",
                )
            if "max_length" not in a:
                self.error(
                    "header-length",
                    f"the length of header `{d.name}` depends on the packet but has no bound",
                    d.arg_spans["length"],
                    "add `max_length: N` (bytes): the kernel verifier must see how far the "
                    "cursor can move",
                )
            else:
                bound = self.const(a["max_length"])
                if bound is not None and not h.size <= bound <= MAX_PACKET_OFF:
                    self.error(
                        "header-length",
                        f"max_length must be from the fixed size ({h.size} byte"
                        f"{'s' if h.size > 1 else ''}) to "
                        f"{MAX_PACKET_OFF}, not {bound}",
                        a["max_length"].span,
                        "the bound is in bytes, e.g. `max_length: 60` for ihl * 4",
                    )
                elif bound is not None:
                    h.length, h.max_length = e, bound
        elif "max_length" in a:
            self.error("header-length", "max_length without a length", d.arg_spans["max_length"],
                       "add `length: EXPR` (bytes, from the header's fields) or remove it")  # fmt: skip
        if "checksum" in a:
            e = a["checksum"]
            f = fields.get(e.id) if isinstance(e, ast.Name) else None
            if f is None or f.type != T.BE16 or f.offset % 2 or f.cond is not None:
                self.error(
                    "header-checksum",
                    "checksum names the be16 field holding the header's checksum",
                    e.span,
                    "e.g. `checksum: check` with `check: be16` at an even offset",
                )
            elif h.size % 2:
                self.error(
                    "header-checksum",
                    f"header `{d.name}` has an odd size ({h.size} bytes): its checksum sums "
                    "16-bit words",
                    e.span,
                )
            else:
                h.csum = f.offset
        for k in LIBRARY_ARGS:
            if k in a and k in allowed:
                v = a[k]
                if not isinstance(v, ast.BoolLit):
                    self.error("header-args", f"`{k}` takes true or false", v.span)
                    continue
                setattr(h, {"pseudo_header": "pseudo", "zero_checksum": "zero_ok"}.get(k, k),
                        v.value)  # fmt: skip
        if h.pseudo:
            h.l4 = True

    def const(self, e: ast.Expr) -> int | None:
        if isinstance(e, ast.IntLit):
            return e.value
        self.error("header-length", "max_length must be a number", e.span,
                   "write the bound in bytes, e.g. `max_length: 60`")  # fmt: skip
        return None

    def check_expr(
        self, e: ast.Expr, fields: dict[str, HField], what: str, readonly: set[str]
    ) -> int:
        """Check a length/condition expression: numbers, fixed integer fields of the header,
        LENGTH_OPS; the fields it names become read-only.  Returns how many fields it names."""
        stack, n = [e], 0
        while stack:
            x = stack.pop()
            if isinstance(x, ast.BinOp) and x.op in LENGTH_OPS:
                stack += [x.left, x.right]
            elif isinstance(x, ast.IntLit):
                continue
            elif isinstance(x, ast.Name):
                f = fields.get(x.id)
                if f is None or not isinstance(f.type, T.IntType) or f.cond is not None:
                    hint = "use integer fields declared before the conditional ones"
                    if f is None:
                        m = difflib.get_close_matches(x.id, list(fields), n=1)
                        hint = f"did you mean `{m[0]}`?" if m else "fields: " + ", ".join(fields)
                    self.error(
                        "header-length",
                        f"`{x.id}` is not an integer field of header `{self.decl.name}`",
                        x.span,
                        hint,
                    )
                    continue
                readonly.add(x.id)
                n += 1
            else:
                self.error(
                    "header-length",
                    f"a header {what} is computed from its fields, numbers and "
                    + " ".join(LENGTH_OPS),
                    x.span,
                    "e.g. `length: ihl * 4` or `key: be32 if k`",
                )
        return n


def header_layout(
    decl: ast.HeaderDecl, resolve: Callable[[ast.TypeRef], T.Type | None], err: Err,
    library: bool = False,
) -> Header | None:  # fmt: skip
    """The layout of ``decl`` (offsets in bytes, network order), or None after errors reported
    through ``err(code, message, span, hint)``.  ``resolve`` turns a written type into a
    language type (None or T.ERR after its own error).  ``library``: a standard-library
    declaration (its arguments may tie it to the IP pseudo-header rules)."""
    return _Builder(decl, resolve, err, library).build()
