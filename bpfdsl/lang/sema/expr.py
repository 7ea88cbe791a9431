"""Expression typing for sema (front end): types, constant folding, byte order, map access.

Used by :class:`bpfdsl.lang.sema.analyzer.Sema` only.  Every checked expression gets ``expr.ty``;
constant scalars get ``Checked.cval[expr]`` (raw memory value: a be16 ``53`` is
``0x3500``), constant byte strings ``Checked.cbytes[expr]`` (network order).
"""

from __future__ import annotations

import re

from bpfdsl.abi.limits import MAX_PACKET_OFF
from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast, c_names
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import CONSTANTS, CTX_DATA, CTX_FIELDS
from bpfdsl.lang.sema import calls, encap
from bpfdsl.lang.sema.events import EVENT_MAP_HINT, EVENT_MAP_USE
from bpfdsl.lang.sema.ops import OpsChecker
from bpfdsl.lang.sema.symbols import (
    ACTIONS,
    FLAG_CONSTANTS,
    NULLABLE_ARG,
    Config,
    Const,
    Local,
    SemaHost,
    bswap,
)


class ExprChecker(OpsChecker):
    def __init__(self, sema: SemaHost) -> None:
        self.s = sema
        self.c = sema.c

    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None:
        self.s.err(code, msg, span, hint)

    # ---- entry points ----
    def expr(self, e: ast.Expr) -> T.Type:
        if e.ty is not None:
            return e.ty
        t = getattr(self, "e_" + type(e).__name__)(e)
        e.ty = t
        return t

    def expect(self, e: ast.Expr, ty: T.Type) -> None:
        self.expr(e)
        self.coerce(e, ty)

    def coerce(self, e: ast.Expr, ty: T.Type) -> None:
        """Check that ``e`` fits ``ty``; an untyped literal takes ``ty`` (range-checked)."""
        t = e.ty
        if t is None or ty is None or t is T.ERR or ty is T.ERR:
            return
        if isinstance(t, T.UntypedInt):
            v = self.c.cval.get(e, 0)
            if isinstance(ty, T.IntType):
                lo = -(1 << (ty.bits - 1)) if ty.signed else 0
                hi = (1 << (ty.bits - (1 if ty.signed else 0))) - 1
                if not lo <= v <= hi:
                    self.err("out-of-range", f"{v} does not fit in {ty}", e.span,
                             f"{ty} holds {lo}..{hi}: use a value in that range, or a wider "
                             "type")  # fmt: skip
                raw = v & ((1 << ty.bits) - 1)
                self.c.cval[e] = bswap(raw, ty.bits) if ty.be else raw
                e.ty = ty
                return
            if isinstance(ty, T.BoolType):
                self.err(
                    "type-mismatch",
                    "expected bool, found an integer",
                    e.span,
                    "compare it: `x != 0`",
                )
                return
        if t == ty or isinstance(ty, T.UntypedInt):
            return
        if isinstance(t, T.IntType) and isinstance(ty, T.IntType):
            return self.coerce_int(e, t, ty)
        if isinstance(t, T.RefType):
            return self.coerce_ref(e, t, ty)
        self.err("type-mismatch", f"expected {ty}, found {t}", e.span)

    def coerce_int(self, e: ast.Expr, t: T.IntType, ty: T.IntType) -> None:
        """Implicit conversions between integer types: only those that keep every value
        (same byte order; widening; unsigned into a wider signed type)."""
        if t.be != ty.be:
            self.byte_order(e, t, ty)
        elif t.be and t.bits != ty.bits:
            self.err("type-mismatch", f"expected {ty}, found {t}", e.span)
        elif t.bits > ty.bits and not self._builtin_fits(e, ty):
            self.err(
                "type-mismatch",
                f"expected {ty}, found {t} (may not fit)",
                e.span,
                f"convert explicitly: `{self.src_text(e)} as {ty}`",
            )
        elif not t.be and t.signed != ty.signed and (t.signed or t.bits == ty.bits):
            what = (
                f"-1 would become {(1 << ty.bits) - 1}"
                if t.signed
                else f"values from {1 << (ty.bits - 1)} up would become negative"
            )
            self.err(
                "mixed-signedness",
                f"expected {ty}, found {t}: the conversion changes values ({what})",
                e.span,
                f"convert explicitly: `{self.src_text(e)} as {ty}`",
            )

    def _builtin_fits(self, e: ast.Expr, ty: T.IntType) -> bool:
        """A host-order built-in constant (``AF_INET``, a C ``#define``) whose value fits
        ``ty`` narrows to it (``bpf_fib_lookup(family: AF_INET)``, a u8 field)."""
        if not (isinstance(e, ast.Name) and e.id in CONSTANTS and self.s.lookup(e.id) is None):
            return False
        v = self.c.cval.get(e)
        if v is None or ty.be or not 0 <= v < 1 << (ty.bits - (1 if ty.signed else 0)):
            return False
        self.c.cval[e] = v  # host order: the raw value is the value
        e.ty = ty
        return True

    def coerce_ref(self, e: ast.Expr, t: T.RefType, ty: T.Type) -> None:
        if isinstance(t.inner, T.IntType) and isinstance(ty, T.IntType):
            return self.coerce_int(e, t.inner, ty)
        if t.inner != ty:
            self.err("type-mismatch", f"expected {ty}, found {t.inner}", e.span)

    def byte_order(self, e: ast.Node, a: T.Type, b: T.Type) -> None:
        be, host = (a, b) if getattr(a, "be", False) else (b, a)
        self.err(
            "byte-order",
            f"mixing {be} (network byte order) with {host} (host byte order)",
            e.span,
            f"convert the host value with `{be}(x)` or the network value with `host(x)`",
        )

    def cond(self, e: ast.Expr) -> None:
        t = self.expr(e)
        if not isinstance(t, (T.BoolType, T.ErrorType)):
            if isinstance(t, T.OptionalType):
                self.unhandled(e)
            else:
                self.err(
                    "type-mismatch",
                    f"a condition must be bool, found {t}",
                    e.span,
                    "compare it, e.g. `x != 0`",
                )

    def unhandled(self, e: ast.Expr) -> None:
        if isinstance(e.ty, T.OptionalType) and e.ty.what == NULLABLE_ARG:
            fn = self.s.fn.decl.name if self.s.fn else "?"
            name = e.id if isinstance(e, ast.Name) else "this argument"
            self.err(
                "nullable-arg",
                f"`{name}` may be NULL: the kernel verifies global fn `{fn}` on its own, for "
                "any caller, so a pointer argument must be checked before use",
                e.span,
                f"check it first: `let v = {name} else {{ return 0 }}` or "
                f"`if let v = {name} {{ ... }}`",
            )
            return
        what = "the lookup" if isinstance(e, ast.MethodCall) else "this value"
        if isinstance(e, ast.Parse):
            what = f"`parse {e.header}`"
        elif isinstance(e, ast.Field):
            what = f"field `{e.name}` (there only when its condition holds)"
        elif isinstance(e, ast.Load):
            what = "`load` (the packet may be too short)"
        elif isinstance(e, ast.Call):
            what = f"the result of `{e.name}`"
        self.err(
            "unhandled-missing",
            f"{what} may be missing and the missing case is not handled",
            e.span,
            "write `let v = ... else { return XDP_PASS }` or `if let v = ... { ... }`",
        )

    # ---- literals and names ----
    def e_IntLit(self, e: ast.IntLit) -> T.Type:
        self.c.cval[e] = e.value
        return T.UNTYPED

    def e_BytesLit(self, e: ast.BytesLit) -> T.Type:
        self.c.cbytes[e] = e.data
        return T.ArrayType(T.U8, len(e.data))

    def e_Load(self, e: ast.Load) -> T.Type:
        ty = self.pkt_bytes(e, "load")
        return T.OptionalType(ty, "packet bytes")

    def pkt_bytes(self, e: ast.Load | ast.Store, what: str) -> T.Type:
        """Check ``load``/``store`` ``e``: packet data, a type of bytes, a host-order offset
        (constants from 0 to 65535, MAX_PACKET_OFF); returns the type read or written."""
        self.packet_access(e.span, what)
        if e.base == "cursor" and isinstance(self.s.lookup("cursor"), Local):
            self.err(
                "ambiguous-name",
                "`cursor` in a packet offset is the parse cursor, but a local has that name",
                e.span,
                "rename the local",
            )
        n = len(self.s.diags)
        ty = self.s.resolve_type(e.type)
        ok = isinstance(ty, (T.IntType, T.BytesType)) or (
            isinstance(ty, T.ArrayType) and ty.elem == T.U8
        )
        if len(self.s.diags) > n:
            ty = T.ERR
        elif not ok:
            self.err(
                "load-type",
                f"`{what}` reads and writes integers, addresses and byte arrays, not {ty}",
                e.type.span,
                "e.g. `load be16 at cursor + 2` or `load [u8; 4] at cursor`; a header "
                "is read with `parse`",
            )
            ty = T.ERR
        elif ty.size > 256:
            self.err("load-type", f"{ty} is {ty.size} bytes; `{what}` takes at most 256",
                     e.type.span, "read it in parts")  # fmt: skip
            ty = T.ERR
        off = e.offset
        if off is not None:
            t = self.expr(off)
            t = t.inner if isinstance(t, T.RefType) else t
            if isinstance(t, T.UntypedInt):
                v = self.c.cval.get(off, 0)
                if not 0 <= v <= MAX_PACKET_OFF:
                    self.err("out-of-range", f"packet offset {v} is outside 0..65535", off.span,
                             "the kernel bounds packet offsets at 65535 (MAX_PACKET_OFF)")  # fmt: skip
                elif (
                    e.base == "packet"
                    and not isinstance(ty, T.ErrorType)
                    and v + ty.size > MAX_PACKET_OFF
                ):
                    self.err(
                        "out-of-range",
                        f"a {ty.size}-byte `{what}` at packet offset {v} reaches offset "
                        f"{v + ty.size}, past 65535",
                        off.span,
                        "the verifier proves packet bytes only while offset + size is at "
                        f"most 65535 (MAX_PACKET_OFF): start at {MAX_PACKET_OFF - ty.size} "
                        "at most",
                    )
                self.coerce(off, T.U64)
            elif not T.is_host_int(t):
                self.err("type-mismatch", f"a packet offset is a host-order integer, found {t}",
                         off.span, "convert it with `host(x)`")  # fmt: skip
        return ty

    def e_BoolLit(self, e: ast.BoolLit) -> T.Type:
        self.c.cval[e] = int(e.value)
        return T.BOOL

    def e_AddrLit(self, e: ast.AddrLit) -> T.Type:
        if e.prefixlen is not None:  # as stored: u32 prefixlen (host order), then the address
            self.c.cbytes[e] = e.prefixlen.to_bytes(4, "little") + e.data
            return T.IPV4_PREFIX if e.kind == "ipv4" else T.IPV6_PREFIX
        if e.kind == "ipv4":
            self.c.cval[e] = int.from_bytes(e.data, "little")
            return T.BE32
        self.c.cbytes[e] = e.data
        return T.MAC if e.kind == "mac" else T.IPV6_ADDR

    def e_Name(self, e: ast.Name) -> T.Type:
        sym = self.s.lookup(e.id)
        if sym is None:
            if e.id in CONSTANTS:
                v, ty = CONSTANTS[e.id]
                self.c.cval[e] = bswap(v, ty.bits) if ty.be else v
                return ty
            if e.id in ACTIONS:
                self.c.cval[e] = ACTIONS[e.id]
                return T.U32
            if e.id in FLAG_CONSTANTS:
                self.c.cval[e] = FLAG_CONSTANTS[e.id]
                return T.UNTYPED
            names = [n for s in self.s.scopes for n in s] + list(CONSTANTS) + list(ACTIONS)
            hint = self.s.suggest(e.id, names)
            if e.id in self.s.gone:
                loc, end = self.s.gone[e.id]
                how = "parsed" if isinstance(loc.ty, T.HeaderType) else "declared"
                hint = (
                    f"`{e.id}` ({how} at line {loc.span.line}) went out of scope at the end "
                    f"of the block where it was {how} (line {end}); use it inside that block"
                )
            if e.id == "none":
                hint = "`none` is what a fn declared `-> T?` returns when it has no T"
            hint = c_names.name_hint(e.id) or hint
            self.err("unknown-name", f"unknown name `{e.id}`", e.span, hint)
            return T.ERR
        self.c.sym[e] = sym
        if isinstance(sym, Const):
            if sym.data is not None:
                self.c.cbytes[e] = sym.data
            else:
                self.c.cval[e] = sym.value
            return sym.ty
        if isinstance(sym, Config):
            return sym.ty
        if isinstance(sym, Local):
            if sym in self.s.stale:
                what = "metadata view" if isinstance(sym.ty, T.MetaRef) else "header"
                self.err(
                    "stale-header",
                    f"{what} `{e.id}` is invalid here: the packet was "
                    f"resized at line {self.s.stale[sym]}",
                    e.span,
                    "take `meta(...)` again after the call"
                    if isinstance(sym.ty, T.MetaRef)
                    else "parse the header again after adjust_head/adjust_tail",
                )
            elif isinstance(sym.ty, T.HeaderType):
                self.s.view_uses.append((sym, e.span))  # a loop may resize after (resize.py)
            return sym.ty
        assert isinstance(sym, T.Type), sym  # what else a scope holds: a MapType or CTX
        return sym

    def e_IncDec(self, e: ast.IncDec) -> T.Type:
        """``x++`` where a value is wanted (C's post-increment): a statement only."""
        target = self.s.source_text(e.target.span) or "x"
        op = "+=" if e.op == "++" else "-="
        tsp, sp = e.target.span, e.span
        if sp.end_line is not None and sp.end_col and sp.end_line != (tsp.end_line or tsp.line):
            # `++` starting a line: C's prefix `++x`, read as a postfix of the line before
            at = Span(sp.file, sp.end_line, sp.end_col - 2, sp.end_line, sp.end_col)
            nxt = self.s.source_text(Span(sp.file, sp.end_line, sp.end_col, None, None))
            name = re.match(r"\s*([A-Za-z_][\w.]*(?:\[[^\]]*\])?)", nxt)
            what = name.group(1) if name else "x"
            self.err(
                "incdec-value",
                f"bpfdsl has no prefix `{e.op}x`: this `{e.op}` is read as `{target}{e.op}` "
                "of the line before, which is a statement, not a value",
                at,
                f"write `{what} {op} 1` (or `{what}{e.op}`)",
            )
            return T.ERR
        self.err(
            "incdec-value",
            f"`{target}{e.op}` is a statement in bpfdsl, not a value",
            e.span,
            f"write `{target} {op} 1` on its own line, before or after the statement that "
            f"uses `{target}`",
        )
        return T.ERR

    # ---- field access ----
    def e_Field(self, e: ast.Field) -> T.Type:
        t = self.expr(e.obj)
        if t is T.ERR:
            return T.ERR
        if isinstance(t, T.RefType):
            t = t.inner
        if isinstance(t, T.OptionalType):
            self.unhandled(e.obj)
            return T.ERR
        if isinstance(t, T.HeaderType):
            f = t.layout.fields.get(e.name)
            if f is None:
                self.err(
                    "unknown-field",
                    f"header `{t.name}` has no field `{e.name}`",
                    e.span,
                    self.s.suggest(e.name, t.layout.fields)
                    or "fields: " + ", ".join(t.layout.fields),
                )
                return T.ERR
            if f.cond is not None:  # there only when its condition holds (GRE's key)
                return T.OptionalType(f.type, "field")
            return f.type
        if isinstance(t, T.StructType):
            if e.name not in t.fields:
                self.err(
                    "unknown-field",
                    f"struct `{t.name}` has no field `{e.name}`",
                    e.span,
                    self.s.suggest(e.name, t.fields) or "fields: " + ", ".join(t.fields),
                )
                return T.ERR
            return t.fields[e.name][1]
        if isinstance(t, T.CtxType):
            fields = CTX_FIELDS.get(self.s.kind.ctx if self.s.kind else "", {})
            if e.name in ("data", "data_end", "data_meta"):
                self.err(
                    "raw-data",
                    f"`{e.name}` is not accessible: packet and message bytes "
                    "are read through bounds-checked `parse`",
                    e.span,
                    "`let b = parse byte else { ... }` or `parse HEADER`; the length is `ctx.len`",
                )
                return T.ERR
            if e.name not in fields:
                self.err(
                    "unknown-field",
                    f"the context has no field `{e.name}`",
                    e.span,
                    self.s.suggest(e.name, fields) or "fields: " + ", ".join(fields),
                )
                return T.ERR
            kind = self.s.kind.keyword if self.s.kind else ""  # a fn's ctx has no fields
            if e.name == "egress_ifindex" and kind != "xdp(devmap)":
                self.err(
                    "ctx-field-kind",
                    "egress_ifindex is readable only in xdp(devmap) programs",
                    e.span,
                    "the kernel fills it only for programs run by a devmap entry "
                    "(`xdp(devmap) fn ...`); here it would be refused (bpf_context access)",
                )
                return T.ERR
            return fields[e.name][1]
        self.err("no-fields", f"{t} has no fields", e.span)
        return T.ERR

    def e_Index(self, e: ast.Index) -> T.Type:
        t = self.expr(e.obj)
        if isinstance(t, T.MapType) and t.record is not None:
            self.expr(e.index)
            self.err(
                "map-method",
                EVENT_MAP_USE.format(t.name, t.kind),
                e.span,
                EVENT_MAP_HINT,
            )
            return T.ERR
        if isinstance(t, T.MapType):
            self.map_key(t, e.index)
            self.err(
                "unhandled-missing",
                f"`{t.name}[...]` may be missing and the missing case is not handled",
                e.span,
                f"read it with lookup: `let v = {t.name}.lookup(k) else {{ ... }}` or "
                f"`if let v = {t.name}.lookup(k) {{ ... }}`; `m[k] = v` and `m[k] += n` "
                "are fine as statements",
            )
            # reported: the error type, so no later check of this value claims the
            # opposite (needless-if-let / needless-else: "never missing")
            return T.ERR
        ref = t if isinstance(t, T.RefType) else None
        t = t.inner if isinstance(t, T.RefType) else t
        if isinstance(t, T.ArrayType):
            it = self.expr(e.index)
            loc = self.c.sym.get(e.index) if isinstance(e.index, ast.Name) else None
            known = e.index in self.c.cval or (isinstance(loc, Local) and loc.bounds)
            if not (known and T.is_host_int(it) and not isinstance(it, T.UntypedInt)):
                self.coerce(e.index, T.U32)  # a signed constant or loop variable is
            self.index_in_range(e.index, t.count)  # checked by its value/bounds instead
            return T.RefType(t.elem, ref.percpu, ref.readonly) if ref else t.elem
        if not isinstance(t, T.ErrorType):  # an error already reported (an unknown name)
            self.err("not-indexable", f"{t} cannot be indexed", e.span)
        return T.ERR

    def index_in_range(self, idx: ast.Expr, count: int) -> None:
        """Array indexes the verifier can check: a constant below ``count``, or a ``for``
        variable whose bounds lie within the array."""
        v = self.const_value(idx)  # an i32 -1 is -1, outside every array
        if v is not None:
            if not 0 <= v < count:
                self.err(
                    "index-range", f"index {v} is outside the array (0..{count - 1})", idx.span
                )
            return
        loc = self.c.sym.get(idx) if isinstance(idx, ast.Name) else None
        if isinstance(loc, Local) and loc.bounds and 0 <= loc.bounds[0] and loc.bounds[1] <= count:
            return
        if isinstance(idx, ast.Name) and isinstance(loc, Local) and loc.bounds:
            lo, hi = loc.bounds
            self.err(
                "index-range",
                f"`{idx.id}` runs over {lo}..{hi}, outside the array (0..{count})",
                idx.span,
                f"loop within the array: `for {idx.id} in 0..{count}`",
            )
            return
        self.err(
            "index-range",
            f"the array index must be a constant or a `for` variable within 0..{count}",
            idx.span,
            f"loop over it: `for i in 0..{count} {{ ... a[i] ... }}`",
        )

    # ---- operators ----

    def e_Parse(self, e: ast.Parse) -> T.Type:
        self.s.parse_from[e] = self.s.cursor  # the header, if any, this one follows
        self.s.cursor = e  # the Local bound to it takes its place (StmtChecker.bind_parsed)
        self.packet_access(e.span, "parse")
        h = self.c.header(e.header)
        if h is None:
            if e.header in self.c.headers:  # declared with errors: reported there
                return T.OptionalType(T.ERR, "header")
            names = self.c.header_names()
            self.err(
                "unknown-header",
                f"unknown header `{e.header}`",
                e.span,
                self.s.suggest(e.header, names)
                or "headers: " + ", ".join(names) + "; or declare it: `header NAME { ... }`",
            )
            return T.OptionalType(T.U64)
        return T.OptionalType(T.HeaderType(e.header, h), "header")

    def e_Push(self, e: ast.Push) -> T.Type:
        return encap.push(self, e)

    def packet_access(self, span: Span, what: str) -> None:
        """Error unless the program kind has packet data (a fn's packet access is checked
        where it is called from a program)."""
        if self.s.kind is not None and self.s.kind.ctx not in CTX_DATA:
            self.err(
                "parse-no-data",
                f"a {self.s.kind.keyword} program has no packet data to {what}",
                span,
            )

    # ---- calls (sema.calls) ----
    def e_Call(self, e: ast.Call) -> T.Type:
        return calls.call(self, e)

    def e_MethodCall(self, e: ast.MethodCall) -> T.Type:
        return calls.method_call(self, e)

    def map_key(self, m: T.MapType, k: ast.Expr) -> None:
        calls.map_key(self, m, k)

    def assign(self, s: ast.Assign) -> None:
        calls.assign(self, s)

    def tail_call(self, e: ast.Call) -> None:
        calls.tail_call(self, e)
