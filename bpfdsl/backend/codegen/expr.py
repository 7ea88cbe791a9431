"""Expression lowering (back end mixin of :class:`bpfdsl.backend.codegen.generator.CodeGen`).

Scalars are LLVM integers of their type's width (bool: i1), byte-order types keep the raw
memory value (no swap at run time unless ``host()``/``be16()`` ask for it).  Aggregates
(structs, MAC/IPv6 addresses) are pointers to memory, or ``bytes`` for constants.
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.backend.codegen.host import GenHost
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import Config, Const, Local

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
_BSWAP = {16: "llvm.bswap.i16", 32: "llvm.bswap.i32", 64: "llvm.bswap.i64"}


def copy_chunks(size: int, align: int) -> list[tuple[int, int]]:
    """(offset, width) pieces for copying ``size`` bytes with at most ``align`` per access."""
    out, off = [], 0
    while off < size:
        w = 8
        while w > 1 and (w > align or off % w or off + w > size):
            w //= 2
        out.append((off, w))
        off += w
    return out


# the two opaque copies of bpf_div (ExprGen._div_opaque): tied in-out register, and a
# clobber of a register BPF has not (x86's), which only makes the two asms differ
_DIVISOR_COPY = "=r,0,~{dirflag}"
_RESULT_COPY = "=r,0,~{fpsr}"


def _nonzero_const(v: ir.Value) -> bool:
    """Is ``v`` an integer constant other than 0 (a divisor LLVM may divide by as is)?"""
    if not isinstance(v, ir.Constant) or not isinstance(v.constant, int):
        return False
    return v.constant & ((1 << v.type.width) - 1) != 0


def _all_ones(v: ir.Value) -> bool:
    """Is ``v`` the integer constant with every bit set (-1 of a signed type)?"""
    if not isinstance(v, ir.Constant) or not isinstance(v.constant, int):
        return False
    m = (1 << v.type.width) - 1
    return v.constant & m == m


_PURE_CALLS = ("host", "be16", "be32", "be64", "hash", "raw", "as_be", "csum_fold", "csum_replace")


def _calls(e: ast.Expr) -> bool:
    """Does expression ``e`` call a helper (or a fn, or a map method)?"""
    if isinstance(e, (ast.Call, ast.MethodCall)):
        return e.name not in _PURE_CALLS or any(_calls(a) for a in e.args)
    return any(
        _calls(getattr(e, f))
        for f in ("left", "right", "operand", "expr", "obj", "index")
        if isinstance(getattr(e, f, None), ast.Expr)
    )


class ExprGen(GenHost):
    # ---- scalars ----
    def gen(self, e: ast.Expr) -> ir.Value:
        v = self.c.cval.get(e)
        if v is not None and isinstance(e.ty, (T.IntType, T.BoolType, T.UntypedInt)):
            return ir.Constant(self.lt(e.ty), v)
        return getattr(self, "g_" + type(e).__name__)(e)

    def conv(self, v: ir.Value, frm: T.Type, to: T.Type, allow_narrow: bool = True) -> ir.Value:
        dst = self.lt(to)
        if v.type == dst:
            return v
        src_bits, dst_bits = v.type.width, dst.width
        if dst_bits < src_bits:
            return self.b.trunc(v, dst)
        if getattr(frm, "signed", False):
            return self.b.sext(v, dst)
        return self.b.zext(v, dst)

    def rv(self, e: ast.Expr, ty: T.Type, allow_narrow: bool = False) -> ir.Value:
        """``e`` as a scalar of ``ty`` (loads through map-value references)."""
        v = self.gen(e)
        et = e.ty
        if isinstance(et, T.RefType):
            v = self.b.load(v, typ=self.lt(et.inner), align=max(1, et.inner.size))
            et = et.inner
        if isinstance(et, T.UntypedInt):
            return ir.Constant(self.lt(ty), self.c.cval.get(e, 0))
        return self.conv(v, et, ty, allow_narrow)

    def bswap(self, v: ir.Value) -> ir.Value:
        name = _BSWAP[v.type.width]
        fn = self.m.globals.get(name) or ir.Function(
            self.m, ir.FunctionType(v.type, [v.type]), name
        )
        return self.b.call(fn, [v])

    def g_Name(self, e: ast.Name) -> ir.Value:
        sym = self.c.sym.get(e)
        if isinstance(sym, Local):
            slot = self.var(sym)
            t = sym.ty
            if isinstance(t, (T.StructType, T.BytesType, T.ArrayType)):
                return slot
            if isinstance(slot, ir.Argument):
                return slot
            ty = PTR if isinstance(t, (T.HeaderType, T.RefType, T.OptionalType)) else self.lt(t)
            return self.b.load(slot, typ=ty)
        if isinstance(sym, Config):
            if self.dbg:
                return self.dbg.load_config(self.b, self.globals[sym.name])
            return self.b.load(self.globals[sym.name], typ=self.lt(sym.ty))
        if isinstance(sym, Const):
            if sym.data is not None:
                return self.g_AddrLit(e)
            return ir.Constant(self.lt(sym.ty), sym.value)
        if isinstance(sym, T.MapType):
            return self.globals[sym.name]
        if isinstance(sym, T.CtxType):
            return self.f.ctx
        raise AssertionError(f"codegen: unresolved name {e.id}")

    def operands(self, e: ast.BinOp | ast.Compare, ty: T.Type) -> tuple[ir.Value, ir.Value]:
        """Both operands as ``ty``; an operand that calls a helper is evaluated first, so no
        packet pointer loaded for the other one (``ctx.len``) lives across the call, where a
        32-bit spill of it would be refused by the verifier (found by program fuzzing)."""
        if _calls(e.right) and not _calls(e.left):
            b = self.rv(e.right, ty)
            return self.rv(e.left, ty), b
        return self.rv(e.left, ty), self.rv(e.right, ty)

    def g_BinOp(self, e: ast.BinOp) -> ir.Value:
        ty = e.ty
        a, b = self.operands(e, ty)
        signed = getattr(ty, "signed", False)
        return self.binop(e.op, a, b, signed)

    def binop(self, op: str, a: ir.Value, b: ir.Value, signed: bool) -> ir.Value:
        """``a op b`` with BPF's defined results where LLVM has undefined behaviour: shift
        amounts are taken modulo the width (as the BPF ISA does; LLVM folds the mask of a
        constant), and a division by anything but a non-zero constant is :meth:`bpf_div`
        (x / 0 = 0, x % 0 = x, MIN / -1 = MIN) -- so LLVM cannot "assume" the divisor is
        non-zero, drop the user's checks or fold results.  Whether the divisor is constant
        is asked of the IR value, not of sema: codegen folds ``y % -1`` to a constant 0
        (found by scripts/fuzz_fold.py: ``x % (y % -1)`` was LLVM's ``srem x, 0``)."""
        if op in ("<<", ">>"):
            b = self.b.and_(b, ir.Constant(b.type, b.type.width - 1))
        if op in ("/", "%") and not _nonzero_const(b):
            return self.bpf_div(op, a, b, signed)
        if op in ("/", "%") and signed and _all_ones(b):
            # a constant -1 divisor: LLVM's sdiv/srem of MIN by -1 is undefined; BPF's
            # (and intops') -MIN = MIN, MIN % -1 = 0
            return self.b.neg(a) if op == "/" else ir.Constant(a.type, 0)
        return self._binop_plain(op, a, b, signed)

    def bpf_div(self, op: str, a: ir.Value, b: ir.Value, signed: bool) -> ir.Value:
        """``a / b`` or ``a % b`` (one integer type) by a divisor that is not a constant, as
        the one BPF insn (BPF_DIV / BPF_MOD; signed: ``sdiv``/``smod``, ISA v4), whose
        results are the language's for every divisor: x / 0 = 0, x % 0 = x, signed
        MIN / -1 = MIN, MIN % -1 = 0 (Documentation/bpf/standardization/instruction-set.rst;
        ``abi/intops.py``).  LLVM's udiv/sdiv/urem/srem are undefined there, so the divisor
        *and* the result go through opaque copies (:meth:`_div_opaque`): LLVM learns nothing
        of ``b`` from the division (no check of the user's on ``b`` is dropped, no value of
        ``b`` is folded in: a local ``let d = 0`` stays a register) and cannot reason about
        the result from the operands (``100 / d == 0`` is not ``d > 100``, ``a % d < d`` is
        not true: issue #23); what it sees is a division of two unknowns, emitted as the one
        insn with no guard (clang emits the same bare insn for C's ``a / b``).  8- and
        16-bit operands are extended to 32 bits, and 32-bit ones to 64 without ALU32
        (``self.alu32``: -mcpu v1, v2): the quotient and remainder of the extended values
        are theirs (signed MIN / -1 of i8 is 128 in 32 bits, truncated back to MIN)."""
        ty, w = a.type, a.type.width
        wide = I32 if w <= 32 and self.alu32 else I64
        # the divisor's copy: into the asm extended as its type says (free after a load,
        # sign-extending for i8/i16, or after an ALU32 op), with no range: LLVM would
        # narrow the division to 8 or 16 bits, and then clear the upper bits of the copy
        d = self._div_opaque(
            self.b.sext(b, I64) if signed and w < 32 else self.b.zext(b, I64), _DIVISOR_COPY
        )
        d = self.b.trunc(d, wide) if wide.width < 64 else d
        if w < wide.width:
            a = (self.b.sext if signed else self.b.zext)(a, wide)
        if op == "/":
            q = self.b.sdiv(a, d) if signed else self.b.udiv(a, d)
        else:
            q = self.b.srem(a, d) if signed else self.b.urem(a, d)
        # the result's copy: an unsigned quotient or remainder is in its type's range, and
        # after an ALU32 insn a register's upper half is zero: known, so that LLVM adds no
        # insns to extend what is extended already
        q = self._div_opaque(self.b.zext(q, I64) if wide.width < 64 else q, _RESULT_COPY)
        if w < 64 and (not signed or wide.width < 64):
            hi = ir.Constant(I64, 1 << (32 if signed else w))
            q.set_metadata("range", self.m.add_metadata([ir.Constant(I64, 0), hi]))
        return self.b.trunc(q, ty) if w < 64 else q

    def _div_opaque(self, v: ir.Value, constraint: str) -> ir.CallInstr:
        """The i64 ``v`` through an empty inline asm without side effects: LLVM cannot see
        the value (nor any fact of it), but drops the copy when unused.  ``constraint``:
        :data:`_DIVISOR_COPY` or :data:`_RESULT_COPY`, whose clobbers (of registers BPF does
        not have: no insn, no effect) make them two asms that are no other code's: LLVM
        merges equal copies of one kind only (readnone calls of one asm on one value), so
        what it assumes of a divisor's copy from the division (non-zero) never reaches a
        result's copy of the same value, nor ``csum``'s and ``maps``' copies (found by
        scripts/fuzz_fold.py: ``if (a / b) != 0`` over locals a = 0 and b = 2**32 - 1 took
        the ``asm(0)`` of its 0 quotient for the ``asm(0)`` of a divisor elsewhere, and
        called it non-zero)."""
        asm = ir.InlineAsm(ir.FunctionType(I64, [I64]), "", constraint)
        return self.b.call(asm, [v], attrs=("readnone", "nounwind"))

    def _binop_plain(self, op: str, a: ir.Value, b: ir.Value, signed: bool) -> ir.Value:
        fn = {
            "+": self.b.add,
            "-": self.b.sub,
            "*": self.b.mul,
            "&": self.b.and_,
            "|": self.b.or_,
            "^": self.b.xor,
            "<<": self.b.shl,
            ">>": self.b.ashr if signed else self.b.lshr,
            "/": self.b.sdiv if signed else self.b.udiv,
            "%": self.b.srem if signed else self.b.urem,
        }[op]
        return fn(a, b)

    def g_Compare(self, e: ast.Compare) -> ir.Value:
        ty = self.c.optype[e]
        if isinstance(ty, (T.BytesType, T.StructType, T.ArrayType)):
            eq = self.bytes_equal(e.left, e.right, ty)
            return eq if e.op == "==" else self.b.not_(eq)
        a, b = self.operands(e, ty)
        if getattr(ty, "signed", False):
            return self.b.icmp_signed(e.op, a, b)
        return self.b.icmp_unsigned(e.op, a, b)

    def g_Logic(self, e: ast.Logic) -> ir.Value:
        t, f, end = self.new_block("l.true"), self.new_block("l.false"), self.new_block("l.end")
        self.branch_cond(e, t, f, value=True)
        self.start(t)
        self.b.branch(end)
        self.start(f)
        self.b.branch(end)
        self.start(end)
        phi = self.b.phi(I1)
        phi.add_incoming(ir.Constant(I1, 1), t)
        phi.add_incoming(ir.Constant(I1, 0), f)
        return phi

    def branch_cond(self, e: ast.Expr, t: ir.Block, f: ir.Block, value: bool = False) -> None:
        """Branch to ``t`` if ``e`` holds else ``f``, short-circuiting && || !.  ``value``:
        the branches make a bool value (g_Logic), whose phi LLVM may fold into arithmetic."""
        if isinstance(e, ast.Logic):
            mid = self.new_block("l.rhs")
            if e.op == "&&":
                self.branch_cond(e.left, mid, f, value)
            else:
                self.branch_cond(e.left, t, mid, value)
            self.start(mid)
            self.branch_cond(e.right, t, f, value)
        elif isinstance(e, ast.Unary) and e.op == "!":
            self.branch_cond(e.operand, f, t, value)
        elif isinstance(e, ast.MethodCall) and e.name == "contains" and not value:
            # branch on the lookup's pointer, as C's `if (!bpf_map_lookup_elem(..))`: no
            # 0/1 value.  Not where the branches make a value: LLVM turns that phi into
            # arithmetic on the map_value_or_null pointer (verifier: "pointer arithmetic
            # on map_value_or_null prohibited"), so map_method's opaque 0/1 is used there
            p = self.map_lookup(e)
            self.b.cbranch(self.b.icmp_unsigned("!=", p, ir.Constant(PTR, None)), t, f)
        else:
            self.b.cbranch(self.gen(e), t, f)

    def g_Unary(self, e: ast.Unary) -> ir.Value:
        if e.op == "!":
            return self.b.not_(self.gen(e.operand))
        v = self.rv(e.operand, e.ty)
        return self.b.neg(v) if e.op == "-" else self.b.not_(v)

    def g_Cast(self, e: ast.Cast) -> ir.Value:
        et = e.expr.ty.inner if isinstance(e.expr.ty, T.RefType) else e.expr.ty
        return self.conv(
            self.rv(e.expr, et) if not isinstance(et, T.UntypedInt) else self.rv(e.expr, e.ty),
            et,
            e.ty,
        )

    def g_Index(self, e: ast.Index) -> ir.Value:
        p = self.index_ptr(e)
        if isinstance(e.ty, T.RefType) or not isinstance(e.ty, (T.IntType, T.BoolType)):
            return p  # an element of a map value (rv() loads it) or an aggregate
        return self.b.load(p, typ=self.lt(e.ty), align=max(1, e.ty.align))

    def index_ptr(self, e: ast.Index) -> ir.Value:
        base = self.gen(e.obj)
        ot = e.obj.ty.inner if isinstance(e.obj.ty, T.RefType) else e.obj.ty
        assert isinstance(ot, T.ArrayType)
        i = self.rv(e.index, T.U64)
        off = self.b.mul(i, ir.Constant(I64, ot.elem.size))
        return self.gep(base, off)

    def g_Field(self, e: ast.Field) -> ir.Value:
        ot = e.obj.ty
        if isinstance(ot, T.HeaderType):
            return self.load_header_field(e)
        if isinstance(ot, T.CtxType):
            return self.ctx_field(e.name)
        p = self.field_ptr(e)
        if not isinstance(e.ty, (T.IntType, T.BoolType)):
            return p
        return self.b.load(p, typ=self.lt(e.ty), align=max(1, e.ty.align))

    def field_ptr(self, e: ast.Field) -> ir.Value:
        """Address of a struct field (local struct or map value)."""
        ot = e.obj.ty
        st = ot.inner if isinstance(ot, T.RefType) else ot
        assert isinstance(st, T.StructType)
        base = self.gen(e.obj)
        return self.gep(base, st.fields[e.name][0])

    def g_InPrefix(self, e: ast.InPrefix) -> ir.Value:
        # a constant prefix (literal or const, sema): u32 prefixlen, host order, then the address
        value = self.c.cbytes[e.right]
        plen, data = int.from_bytes(value[:4], "little"), value[4:]
        bits = int.from_bytes(data, "big")
        nbits = len(data) * 8
        mask = ((1 << plen) - 1) << (nbits - plen) if plen else 0
        if e.left.ty == T.BE32:
            v = self.rv(e.left, T.BE32)
            m = int.from_bytes(mask.to_bytes(4, "big"), "little")
            n = int.from_bytes((bits & mask).to_bytes(4, "big"), "little")
            return self.b.icmp_unsigned(
                "==", self.b.and_(v, ir.Constant(I32, m)), ir.Constant(I32, n)
            )
        src = self.mem_of(e.left)
        if isinstance(src, (bytes, bytearray)):  # a constant address (a `const`): known now
            return ir.Constant(I1, int(int.from_bytes(src, "big") & mask == bits & mask))
        res = ir.Constant(I1, 1)
        mb, nb = mask.to_bytes(16, "big"), (bits & mask).to_bytes(16, "big")
        for off in range(0, 16, 4):
            m = int.from_bytes(mb[off : off + 4], "little")
            if not m:
                continue
            w = self.b.load(self.gep(src, off), typ=I32, align=4)
            c = self.b.icmp_unsigned(
                "==",
                self.b.and_(w, ir.Constant(I32, m)),
                ir.Constant(I32, int.from_bytes(nb[off : off + 4], "little")),
            )
            res = self.b.and_(res, c)
        return res

    # ---- aggregates ----
    def mem_of(self, e: ast.Expr) -> ir.Value | bytes:
        """Memory (ptr) or constant ``bytes`` holding the aggregate value of ``e``."""
        if e in self.c.cbytes:
            return self.c.cbytes[e]
        if isinstance(e, ast.Field) and isinstance(e.obj.ty, T.HeaderType):
            return self.header_field_ptr(e)
        return self.gen(e)

    def g_BytesLit(self, e: ast.BytesLit) -> ir.Value:
        return self.g_AddrLit(e)

    def g_AddrLit(self, e: ast.AddrLit | ast.Name | ast.BytesLit) -> ir.Value:
        # a Name: a const with data
        data = self.c.cbytes[e]
        p = self.alloca_mem(len(data))
        self.store_const_bytes(p, data, 8)
        return p

    def store_const_bytes(self, dst: ir.Value, data: bytes, align: int) -> None:
        for off, w in copy_chunks(len(data), align):
            v = int.from_bytes(data[off : off + w], "little")
            self.b.store(ir.Constant(ir.IntType(8 * w), v), self.gep(dst, off), align=w)

    def copy_bytes(self, dst: ir.Value, src: ir.Value, size: int, align: int) -> None:
        for off, w in copy_chunks(size, align):
            ty = ir.IntType(8 * w)
            v = self.b.load(self.gep(src, off), typ=ty, align=w)
            self.b.store(v, self.gep(dst, off), align=w)

    def store_bytes(self, dst: ir.Value, e: ast.Expr, ty: T.Type, dst_align: int = 8) -> None:
        """Write aggregate ``e`` of type ``ty`` to ``dst``, whose alignment is ``dst_align``
        (default: an 8-aligned stack area), in accesses as wide as both ends allow."""
        src = self.mem_of(e)
        if isinstance(src, (bytes, bytearray)):
            self.store_const_bytes(dst, bytes(src), dst_align)
        else:
            self.copy_bytes(dst, src, ty.size, min(dst_align, self.align_of(e)))

    def align_of(self, e: ast.Expr) -> int:
        """Alignment (bytes, at most 8) of the memory holding aggregate ``e``: locals and
        call results are 8-aligned stack areas (alloca_mem), so a field of a local struct
        is aligned as its offset is (``fib.dmac`` at 58: 2); header fields as in their C
        structs (MACs: 2)."""
        if isinstance(e, ast.Field) and isinstance(e.obj.ty, T.HeaderType):
            return 2 if e.ty == T.MAC else max(1, e.ty.align)
        if (
            isinstance(e, ast.Field)
            and isinstance(e.obj, ast.Name)
            and isinstance(e.obj.ty, T.StructType)
            and isinstance(self.c.sym.get(e.obj), Local)
        ):
            off = e.obj.ty.fields[e.name][0]
            return min(8, off & -off) if off else 8
        return 8 if isinstance(e, (ast.Name, ast.Call)) else max(1, e.ty.align)

    def bytes_equal(self, a: ast.Expr, b: ast.Expr, ty: T.Type) -> ir.Value:
        ma, mb = self.mem_of(a), self.mem_of(b)
        align = min(self.align_of(a), self.align_of(b), 8)
        res = None
        for off, w in copy_chunks(ty.size, align):
            it = ir.IntType(8 * w)
            vals = []
            for m in (ma, mb):
                if isinstance(m, (bytes, bytearray)):
                    vals.append(ir.Constant(it, int.from_bytes(m[off : off + w], "little")))
                else:
                    vals.append(self.b.load(self.gep(m, off), typ=it, align=w))
            c = self.b.icmp_unsigned("==", vals[0], vals[1])
            res = c if res is None else self.b.and_(res, c)
        return res if res is not None else ir.Constant(I1, 1)

    # ---- assignment ----
    def assign(self, s: ast.Assign) -> None:
        tgt = s.target
        if isinstance(tgt, ast.Index) and isinstance(tgt.obj.ty, T.MapType):
            return self.map_assign(s)
        if isinstance(tgt, ast.Field) and isinstance(tgt.obj.ty, T.HeaderType):
            return self.store_header_field(tgt, s.op, s.value)
        if isinstance(tgt.ty, T.HeaderType):  # a whole header from a struct (sema.bitcast)
            assert isinstance(s.value.ty, T.StructType)
            # aligned as its C struct, as clang assumes for `*hdr = value`
            return self.store_bytes(self.gen(tgt), s.value, s.value.ty, s.value.ty.align)
        if (
            isinstance(tgt, ast.Index)
            and isinstance(tgt.obj, ast.Field)
            and isinstance(tgt.obj.obj.ty, T.HeaderType)
        ):
            return self.store_header_elem(tgt, s.op, s.value)
        ty = tgt.ty.inner if isinstance(tgt.ty, T.RefType) else tgt.ty
        obj_ty = tgt.obj.ty if isinstance(tgt, (ast.Field, ast.Index)) else None
        ref = isinstance(tgt.ty, T.RefType) or isinstance(obj_ty, T.RefType)
        if isinstance(tgt.ty, T.RefType):
            percpu = tgt.ty.percpu
        else:
            percpu = isinstance(obj_ty, T.RefType) and obj_ty.percpu
        if isinstance(tgt, ast.Name):
            loc = self.c.sym[tgt]
            assert isinstance(loc, Local)
            slot = self.var(loc)
            if isinstance(loc.ty, T.RefType):
                slot = self.b.load(slot, typ=PTR)
        elif isinstance(tgt, ast.Field):
            slot = self.field_ptr(tgt)
        else:
            assert isinstance(tgt, ast.Index)
            slot = self.index_ptr(tgt)
        if isinstance(ty, (T.StructType, T.BytesType, T.ArrayType)):
            self.store_bytes(slot, s.value, ty, self.align_of(tgt))
            return
        self.store_scalar(slot, ty, s.op, s.value, atomic=ref and not percpu)

    def store_scalar(
        self, slot: ir.Value, ty: T.Type, op: str, value: ast.Expr, atomic: bool
    ) -> None:
        align = max(1, ty.size)
        v = self.rv(value, ty)
        if op == "=":
            self.b.store(v, slot, align=align)
            return
        if atomic and op in ("+=", "-=", "|=", "&=", "^="):
            if op == "-=":
                v = self.b.neg(v)
            rmw = {"+=": "add", "-=": "add", "|=": "or", "&=": "and", "^=": "xor"}[op]
            self.b.atomic_rmw(rmw, slot, v, "monotonic")
            return
        old = self.b.load(slot, typ=self.lt(ty), align=align)
        # through binop: a run-time shift amount is masked to the width like ``a << b``
        signed = getattr(ty, "signed", False)
        new = self.binop(op[:-1], old, v, signed)
        self.b.store(new, slot, align=align)
