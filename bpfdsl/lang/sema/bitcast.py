"""Bit-casts between host and network order, and checksum arithmetic for declared headers.

``raw(x)``: a ``be16``/``be32``/``be64`` as the ``u16``/``u32``/``u64`` with the same bits
(the value as the bytes sit in memory, read on the little-endian BPF target); ``as_be(x)``:
the inverse, a ``u16``/``u32``/``u64`` taken as the ``beN`` whose stored bytes are its own.
Neither swaps bytes (``host()`` and ``be16()`` do).

``csum_fold(sum)``: a 32- or 64-bit one's-complement sum of bytes as stored (what
``csum_diff`` returns) folded to 16 bits and complemented: the ``be16`` to store in a
checksum field (the kernel's ``csum_fold``, include/asm-generic/checksum.h).
``csum_replace(check, old, new)``: RFC 1624 eqn. 3, ``HC' = ~(~HC + ~m + m')``, the checksum
``check`` after a field changes from ``old`` to ``new`` (both ``be16``, ``be32`` or ``be64``),
the kernel's ``csum_replace2``/``csum_replace4`` (include/net/checksum.h).
"""

from __future__ import annotations

from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.csum import covering_l4
from bpfdsl.lang.sema.symbols import ExprHost

BITCAST_BUILTINS = ("raw", "as_be", "csum_fold", "csum_replace")
"""The calls this module checks (pure: no helper call, no packet access)."""


def whole_header_write(ex: ExprHost, tgt: ast.Name, h: T.HeaderType, value: ast.Expr) -> None:
    """``view = value``: the bytes of a struct value laid out as the header (the same field
    names at the same offsets with the same types, nothing else) written over the header.
    Refused for a header with a checksum rule, a variable length, conditional or bit
    fields (a field-by-field write keeps those right)."""
    st = ex.expr(value)
    if st is T.ERR:
        return
    lay = h.layout
    if lay.csum is not None or lay.pseudo or lay.length is not None:
        ex.err(
            "header-write",
            f"header `{h.name}` has a checksum rule or a variable length: it cannot be "
            "written whole",
            tgt.span,
            "write its fields one by one (each write keeps the checksum right), or declare "
            "a header without the rule and compute its checksum with csum_fold()/csum_replace()",
        )
        return
    odd = [n for n, f in lay.fields.items() if f.width or f.cond is not None]
    if odd:
        ex.err(
            "header-write",
            f"header `{h.name}` has bit or conditional fields ({', '.join(odd)}): it "
            "cannot be written from a struct",
            tgt.span,
            "write those fields one by one",
        )
        return
    same = (
        isinstance(st, T.StructType)
        and st.size == lay.size
        and set(st.fields) == set(lay.fields)
        and all(st.fields[n] == (f.offset, f.type) for n, f in lay.fields.items())
    )
    if not same:
        fields = ", ".join(f"{n}: {f.type}" for n, f in lay.fields.items())
        ex.err(
            "type-mismatch",
            f"`{tgt.id}` (header {h.name}) is written whole from a struct with its fields at "
            f"the same offsets, found {st}",
            value.span,
            f"declare `struct {h.name}_s {{ {fields} }}` and assign a value of it",
        )
        return
    if ex.s.kind is not None:  # a header in a UDP/TCP payload: as a field write there
        l4 = covering_l4(ex, tgt)
        if l4 is not None:
            ex.s.payload_writes.append((tgt.span, l4))


def fold16(s: int) -> int:
    """The one's-complement fold of a 64-bit sum to 16 bits (not complemented)."""
    s &= (1 << 64) - 1
    s = (s & 0xFFFFFFFF) + (s >> 32)
    for _ in range(3):
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _arg(ex: ExprHost, a: ast.Expr) -> T.Type:
    t = ex.expr(a)
    return t.inner if isinstance(t, T.RefType) else t


def check(ex: ExprHost, e: ast.Call) -> T.Type:
    """Check one of :data:`BITCAST_BUILTINS`; record a constant value when the arguments
    have one (a ``beN`` constant is kept as its raw bits, as ``coerce`` keeps it)."""
    c = ex.c
    args = e.args
    want = {"raw": 1, "as_be": 1, "csum_fold": 1, "csum_replace": 3}[e.name]
    if len(args) != want or e.kwargs:
        ex.err("arg-count", f"`{e.name}` takes {want} argument(s)", e.span)
        for a in args:
            ex.expr(a)
        return T.ERR
    if e.name in ("raw", "as_be"):
        t = _arg(ex, args[0])
        if t is T.ERR:
            return T.ERR
        to_be = e.name == "as_be"
        if not (isinstance(t, T.IntType) and t.bits >= 16 and t.be != to_be):
            form = "a u16/u32/u64" if to_be else "a be16/be32/be64"
            hint = (
                "`as_be(x as u16)` gives the be16 whose bytes are x's"
                if to_be
                else "`raw(ip.check)` gives the u16 with the bits as stored"
            )
            ex.err("type-mismatch", f"{e.name}() takes {form}, found {t}", args[0].span, hint)
            return T.ERR
        v = c.cval.get(args[0])
        if v is not None:
            c.cval[e] = v & ((1 << t.bits) - 1)
        return T.IntType(t.bits, be=True) if to_be else T.IntType(t.bits)
    if e.name == "csum_fold":
        t = _arg(ex, args[0])
        if isinstance(t, T.UntypedInt):
            ex.coerce(args[0], T.U64)
            t = args[0].ty
        if t is T.ERR:
            return T.BE16
        if not (isinstance(t, T.IntType) and not t.be):
            ex.err(
                "type-mismatch",
                f"csum_fold() takes a host-order integer sum, found {t}",
                args[0].span,
                "e.g. `csum_fold(csum_diff(none, hdr, 0))`",
            )
            return T.BE16
        v = c.cval.get(args[0])
        if v is not None:
            c.cval[e] = ~fold16(v) & 0xFFFF
        return T.BE16
    # csum_replace(check, old, new)
    ex.expect(args[0], T.BE16)
    told, tnew = _arg(ex, args[1]), _arg(ex, args[2])
    if isinstance(told, T.UntypedInt) and isinstance(tnew, T.IntType):
        ex.coerce(args[1], tnew)
        told = args[1].ty
    elif isinstance(tnew, T.UntypedInt) and isinstance(told, T.IntType):
        ex.coerce(args[2], told)
        tnew = args[2].ty
    for a, t in ((args[1], told), (args[2], tnew)):
        if t is not T.ERR and not (isinstance(t, T.IntType) and t.be):
            ex.err(
                "type-mismatch",
                f"csum_replace() sums 16-bit words in network order: old and new are "
                f"be16/be32/be64, found {t}",
                a.span,
                "convert a host-order value with be16()/be32(), or take its bits with as_be()",
            )
            return T.BE16
    if told is not T.ERR and tnew is not T.ERR and told != tnew:
        ex.err(
            "type-mismatch",
            f"csum_replace(): old is {told} but new is {tnew}; they must be the same type",
            args[2].span,
        )
        return T.BE16
    hc, old, new = (c.cval.get(a) for a in args)
    if hc is not None and old is not None and new is not None and isinstance(told, T.IntType):
        s = ~hc & 0xFFFF
        for i in range(0, told.bits, 16):
            s += (~(old >> i) & 0xFFFF) + ((new >> i) & 0xFFFF)
        c.cval[e] = ~fold16(s) & 0xFFFF
    return T.BE16
