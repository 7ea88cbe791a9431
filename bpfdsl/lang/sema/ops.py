"""Operator typing for sema (front end mixin of ``sema.expr.ExprChecker``): arithmetic,
comparisons with their byte-order rules, logic, casts, prefix membership, constant folding
(exact for literals, wrapping for typed values)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bpfdsl.abi import intops
from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import Checked, SemaHost


def const_convert(v: int, frm: T.Type, to: T.Type) -> int:
    """The raw value of type ``to`` that a constant converts to: ``v`` is the raw value of
    ``frm`` (exact for an untyped literal).  C's conversion (``intops.convert``):
    sign-extend a signed value, zero-extend an unsigned one, keep the low bits; byte-order
    types and bool keep their bits (sema allows no other conversion of them)."""
    if not isinstance(to, T.IntType) or to.be:
        return v
    if isinstance(frm, T.UntypedInt):
        return intops.convert(v, None, True, to.bits)
    if isinstance(frm, T.IntType) and not frm.be:
        return intops.convert(v, frm.bits, frm.signed, to.bits)
    return v


def const_value(v: int, ty: T.Type) -> int:
    """The integer a constant means: raw value ``v`` of ``ty`` read as its signedness
    (``-1`` for an i32 0xffffffff); host order for be16/be32/be64; untyped as is."""
    if isinstance(ty, T.IntType):
        if ty.be:
            return int.from_bytes(
                (v & intops.mask(ty.bits)).to_bytes(ty.bits // 8, "little"), "big"
            )
        return intops.value_of(v, ty.bits, ty.signed)
    return v


def _width(ty: T.Type) -> tuple[int | None, bool]:
    """(bits, signed) for intops: None bits (exact) for untyped literals and bool."""
    if isinstance(ty, T.IntType):
        return ty.bits, ty.signed
    return None, True


class OpsChecker:
    # What this mixin uses of its host, expr.ExprChecker, declared for the type checker
    # (expr imports this module, so it is not named here; symbols.ExprHost is the part the
    # other sema modules use).
    c: Checked
    s: SemaHost

    if TYPE_CHECKING:

        def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None: ...
        def coerce(self, e: ast.Expr, ty: T.Type) -> None: ...
        def cond(self, e: ast.Expr) -> None: ...
        def expr(self, e: ast.Expr) -> T.Type: ...
        def byte_order(self, e: ast.Node, a: T.Type, b: T.Type) -> None: ...

    def const_as(self, e: ast.Expr, ty: T.Type) -> int | None:
        """The folded value of ``e`` converted to ``ty`` (raw), or None if not constant."""
        v = self.c.cval.get(e)
        if v is None:
            return None
        return const_convert(v, e.ty, ty)

    def const_value(self, e: ast.Expr) -> int | None:
        """The integer ``e`` folds to (signed types read as signed), or None."""
        v = self.c.cval.get(e)
        return None if v is None else const_value(v, e.ty)

    def src_text(self, e: ast.Expr) -> str:
        """``e`` as written for a hint: a name, a literal, field, index or call as written,
        other source text (one line, short) in parentheses, else ``(...)``."""
        sp, src = e.span, getattr(self.c.program, "source", None) or ""
        if isinstance(e, ast.Name):
            return e.id
        if sp.end_line == sp.line and sp.end_col and sp.end_col - sp.col <= 40:
            lines = src.splitlines()
            if 0 < sp.line <= len(lines):
                text = lines[sp.line - 1][sp.col - 1 : sp.end_col - 1]
                # a postfix form binds tighter than any operator: no parentheses
                postfix = (ast.IntLit, ast.Field, ast.Index, ast.Call, ast.MethodCall)
                return text if isinstance(e, postfix) else "(" + text + ")"
        return "(...)"

    def signedness(
        self,
        node: ast.BinOp | ast.Compare,
        op: str,
        a: ast.Expr,
        ta: T.IntType,
        b: ast.Expr,
        tb: T.IntType,
    ) -> bool:
        """Refuse ``a op b`` when one operand is signed and the other unsigned and at least
        as wide: C would convert the signed one to unsigned (``-1 < 1u`` is false), and
        taking the left operand's signedness would make ``a < b`` and ``b > a`` disagree.
        An unsigned operand narrower than the signed one widens without changing its value
        and is fine (``u8 + i32`` is an i32).  True when refused (the error is reported)."""
        if ta.be or tb.be or ta.signed == tb.signed:
            return False
        (s, se), (u, ue) = ((ta, a), (tb, b)) if ta.signed else ((tb, b), (ta, a))
        if u.bits < s.bits:
            return False
        sx, ux = self.src_text(se), self.src_text(ue)
        hint = f"cast one side so both have one signedness: `{sx} as {u}` or `{ux} as i{u.bits}`"
        if u.bits < 64:
            hint += f"; to keep every value, widen both: `{sx} as i64`, `{ux} as i64`"
        self.err(
            "mixed-signedness",
            f"`{op}` mixes signed {s} and unsigned {u}: whether it works on signed or "
            f"unsigned values is ambiguous (as unsigned, -1 would count as "
            f"{intops.mask(u.bits)})",
            node.span,
            hint,
        )
        return True

    def unify(self, node: ast.BinOp | ast.Compare, a: ast.Expr, b: ast.Expr) -> T.Type:
        ta, tb = self.expr(a), self.expr(b)
        if ta is T.ERR or tb is T.ERR:
            return T.ERR
        ta = ta.inner if isinstance(ta, T.RefType) else ta
        tb = tb.inner if isinstance(tb, T.RefType) else tb
        if isinstance(ta, T.UntypedInt) and isinstance(tb, T.UntypedInt):
            return T.UNTYPED
        if isinstance(ta, T.UntypedInt):
            self.coerce(a, tb)
            return tb
        if isinstance(tb, T.UntypedInt):
            self.coerce(b, ta)
            return ta
        if isinstance(ta, T.IntType) and isinstance(tb, T.IntType):
            if ta.be != tb.be:
                self.byte_order(node, ta, tb)
                return ta
            if ta.be and ta.bits != tb.bits:
                self.err("type-mismatch", f"mixing {ta} and {tb}", node.span)
            self.signedness(node, node.op, a, ta, b, tb)  # reported; typing goes on
            return ta if ta.bits >= tb.bits else tb  # the narrower keeps its value
        if ta == tb:
            return ta
        self.err("type-mismatch", f"mixing {ta} and {tb}", node.span)
        return ta

    def fold(self, e: ast.BinOp, op: str, a: ast.Expr, b: ast.Expr, ty: T.Type) -> None:
        """Fold ``a op b`` of result type ``ty``: each operand converted to ``ty`` as the
        generated code converts it, then ``intops.binop`` (C on the type, exact for
        untyped literals).  A constant zero divisor is an error even when ``a`` is not
        constant."""
        if not T.is_int(ty) or ty is T.ERR:
            return
        va, vb = self.const_as(a, ty), self.const_as(b, ty)
        if op in ("/", "%") and vb == 0:
            self.err("division-by-zero", "division by zero", b.span,
                     "the divisor is the constant 0: divide by another value")  # fmt: skip
            return
        if va is None or vb is None:
            return
        bits, signed = _width(ty)
        self.c.cval[e] = intops.binop(op, va, vb, bits, signed)

    def e_BinOp(self, e: ast.BinOp) -> T.Type:
        ty = self.unify(e, e.left, e.right)
        if isinstance(ty, T.IntType) and ty.be and e.op not in "&|^":
            self.err(
                "byte-order",
                f"arithmetic `{e.op}` on {ty} (network byte order)",
                e.span,
                f"convert first with `host(x)`, compute, then convert back with `{ty}(x)`",
            )
        elif not T.is_int(ty):
            self.err("type-mismatch", f"`{e.op}` needs integers, found {ty}", e.span)
            return T.ERR
        sh = self.const_value(e.right) if e.op in ("<<", ">>") else None
        if sh is not None and sh < 0:
            self.err(
                "shift-negative",
                f"shift by a negative count ({sh})",
                e.right.span,
                "shift by 0..63; for the other direction use the other operator",
            )
            return ty
        if sh is not None and isinstance(ty, T.UntypedInt) and sh >= 64:
            self.err(
                "shift-too-far",
                f"shifting a constant by {sh} bits (integers have at most 64)",
                e.right.span,
                "shift by 0..63",
            )
            return ty
        if sh is not None and isinstance(ty, T.IntType) and sh >= ty.bits:
            self.err(
                "shift-too-far",
                f"shifting a {ty} by {sh} bits (it has {ty.bits})",
                e.right.span,
                f"shift by 0..{ty.bits - 1}, or widen first: `(x as u64)`",
            )
            return ty
        self.fold(e, e.op, e.left, e.right, ty)
        return ty

    def e_Compare(self, e: ast.Compare) -> T.Type:
        ty = self.unify(e, e.left, e.right)
        if isinstance(ty, T.UntypedInt):
            ty = T.U64
            self.coerce(e.left, ty)
            self.coerce(e.right, ty)
        if isinstance(ty, T.IntType) and ty.be and e.op not in ("==", "!="):
            self.err(
                "byte-order",
                f"ordering `{e.op}` on {ty} compares bytes in the wrong order",
                e.span,
                "convert with `host(x)` first",
            )
        if isinstance(ty, (T.BytesType, T.StructType, T.ArrayType)) and e.op not in ("==", "!="):
            self.err("type-mismatch", f"`{e.op}` is not defined for {ty}", e.span)
        self.c.optype[e] = ty
        if isinstance(ty, (T.IntType, T.BoolType)):
            va, vb = self.const_as(e.left, ty), self.const_as(e.right, ty)
            if va is not None and vb is not None:
                bits, signed = _width(ty)
                self.c.cval[e] = int(intops.compare(e.op, va, vb, bits, signed))
        return T.BOOL

    def e_Logic(self, e: ast.Logic) -> T.Type:
        self.cond(e.left)
        self.cond(e.right)
        return T.BOOL

    def e_Unary(self, e: ast.Unary) -> T.Type:
        if e.op == "!":
            self.cond(e.operand)
            return T.BOOL
        t = self.expr(e.operand)
        t = t.inner if isinstance(t, T.RefType) else t  # a map value: its integer, as binops
        if not T.is_host_int(t):
            self.err("type-mismatch", f"`{e.op}` needs a host-order integer, found {t}", e.span)
            return T.ERR
        v = self.c.cval.get(e.operand)
        if v is not None:
            self.c.cval[e] = intops.unop(e.op, v, _width(t)[0])
        return t

    def e_Cast(self, e: ast.Cast) -> T.Type:
        t = self.expr(e.expr)
        t = t.inner if isinstance(t, T.RefType) else t
        to = self.s.resolve_type(e.to)
        if not isinstance(to, T.IntType) or not T.is_int(t) or to.be or getattr(t, "be", False):
            self.err(
                "bad-cast",
                f"cannot cast {t} to {to} with `as`",
                e.span,
                "`as` converts between host-order integers; use host()/be16()/be32() "
                "for byte order",
            )
            return to
        v = self.c.cval.get(e.expr)
        if v is not None:
            self.c.cval[e] = const_convert(v, t, to)  # sign-extends a signed value
        return to

    def e_InPrefix(self, e: ast.InPrefix) -> T.Type:
        ta, tb = self.expr(e.left), self.expr(e.right)
        want = {T.IPV4_PREFIX.name: T.BE32, T.IPV6_PREFIX.name: T.IPV6_ADDR}
        if tb.name not in want or e.right not in self.c.cbytes:
            # a prefix known at compile time (literal or `const`): codegen folds its mask
            self.err(
                "type-mismatch",
                "`in` needs a constant prefix on the right, found "
                + (f"a run-time {tb}" if tb.name in want else str(tb)),
                e.right.span,
                "write a prefix literal such as 10.0.0.0/8 or fc00::/7, or a "
                "`const NAME: ipv4_prefix = ...` (ipv6_prefix)",
            )
        elif ta != want[tb.name]:
            self.err(
                "type-mismatch",
                f"`{tb}` membership needs a {want[tb.name]} address, found {ta}",
                e.left.span,
            )
        return T.BOOL
