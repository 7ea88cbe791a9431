"""Operator typing for sema (front end mixin of ``sema_expr.ExprChecker``): arithmetic,
comparisons with their byte-order rules, logic, casts, prefix membership, constant folding
(exact for literals, wrapping for typed values)."""

from __future__ import annotations

from . import ast
from . import types as T


class OpsChecker:
    def unify(self, node, a: ast.Expr, b: ast.Expr) -> T.Type:
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
            return ta if ta.bits >= tb.bits else tb
        if ta == tb:
            return ta
        self.err("type-mismatch", f"mixing {ta} and {tb}", node.span)
        return ta

    def fold(self, e, op, a, b, ty):
        va, vb = self.c.cval.get(a), self.c.cval.get(b)
        if op in "/%" and vb == 0:
            self.err("division-by-zero", "division by zero", b.span)
            return
        if va is None or vb is None:
            return
        import operator as o

        fns = {
            "+": o.add,
            "-": o.sub,
            "*": o.mul,
            "&": o.and_,
            "|": o.or_,
            "^": o.xor,
            "<<": o.lshift,
            ">>": o.rshift,
            "/": o.floordiv,
            "%": o.mod,
        }
        if op in "/%" and vb == 0:
            self.err("division-by-zero", "division by zero", b.span)
            return
        v = fns[op](va, vb)
        if isinstance(ty, T.IntType):
            v &= (1 << ty.bits) - 1
        self.c.cval[e] = v

    def e_BinOp(self, e):
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
        sh = self.c.cval.get(e.right) if e.op in ("<<", ">>") else None
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

    def e_Compare(self, e):
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
        if isinstance(ty, (T.BytesType, T.StructType)) and e.op not in ("==", "!="):
            self.err("type-mismatch", f"`{e.op}` is not defined for {ty}", e.span)
        self.c.optype[e] = ty
        va, vb = self.c.cval.get(e.left), self.c.cval.get(e.right)
        if va is not None and vb is not None and e.op in ("==", "!="):
            self.c.cval[e] = int((va == vb) == (e.op == "=="))
        return T.BOOL

    def e_Logic(self, e):
        self.cond(e.left)
        self.cond(e.right)
        return T.BOOL

    def e_Unary(self, e):
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
            r = -v if e.op == "-" else ~v
            if isinstance(t, T.IntType):
                r &= (1 << t.bits) - 1
            self.c.cval[e] = r
        return t

    def e_Cast(self, e):
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
            self.c.cval[e] = v & ((1 << to.bits) - 1)
        return to

    def e_InPrefix(self, e):
        ta, tb = self.expr(e.left), self.expr(e.right)
        want = {T.IPV4_PREFIX.name: T.BE32, T.IPV6_PREFIX.name: T.IPV6_ADDR}
        if not (isinstance(e.right, ast.AddrLit) and e.right.prefixlen is not None):
            self.err(
                "type-mismatch",
                "`in` needs a prefix literal on the right, e.g. 10.0.0.0/8",
                e.right.span,
            )
        elif ta != want[tb.name]:
            self.err(
                "type-mismatch",
                f"`{tb}` membership needs a {want[tb.name]} address, found {ta}",
                e.left.span,
            )
        return T.BOOL
