"""Packet access lowering (back end mixin of :class:`bpfdsl.backend.codegen.generator.CodeGen`).

``parse H`` reads the cursor (a packet pointer), checks ``cursor + size > data_end`` on
64-bit pointers (the shape the verifier accepts; never arithmetic on data_end, never
32-bit ALU on pointers: FIELD-BUGS B04/B06), then advances the cursor by the header's
length (ipv4: ihl*4 with ihl >= 5; tcp: doff*4 with doff >= 5).  data/data_end are
loaded from ``struct xdp_md`` (u32 at offsets 0/4, zero-extended, as clang does) at each
use, so after adjust_head/adjust_tail (which reset the cursor to data) they are fresh.
Header field writes update checksums incrementally per RFC 1624 eqn. 3: the IPv4 header
checksum, the L4 checksum for port writes, and the L4 pseudo-header checksum for IP
address writes (UDP: a zero checksum stays zero, a computed zero becomes 0xffff); how
is in :mod:`bpfdsl.backend.codegen.csum` (an IPv6 ``daddr`` write counts only if no Routing
header with segments left follows: RFC 8200 8.1).
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.limits import MAX_PACKET_OFF
from bpfdsl.backend.codegen.csum import CsumGen
from bpfdsl.backend.llvm_ext import volatile_load
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import (
    CTX_DATA,
    CTX_DATA_META,
    CTX_FIELDS,
    IPV6_EXT_HEADERS,
    IPV6_EXT_MAX,
    PSEUDO_FIELDS,
)
from bpfdsl.lang.layout import Header, HField
from bpfdsl.lang.sema.encap import DEFAULTS
from bpfdsl.lang.sema.symbols import BUILTINS, PKT_RESIZE

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()


def _expr_key(e: ast.Expr) -> tuple:
    """A length/condition expression as nested tuples: equal for equal expressions."""
    if isinstance(e, ast.BinOp):
        return (e.op, _expr_key(e.left), _expr_key(e.right))
    return (type(e).__name__, getattr(e, "id", getattr(e, "value", None)))


def _field_plus_const(e: ast.Expr, h: Header) -> tuple[HField, int] | None:
    """(field, K) when length expression ``e`` of header ``h`` is ``K + FIELD``,
    ``FIELD + K`` or ``FIELD`` (K >= 0) over a host-order unsigned integer field of ``h``
    (a ``u8`` or a ``bit<N>``), else None."""
    k, name = 0, None
    if isinstance(e, ast.Name):
        name = e.id
    elif isinstance(e, ast.BinOp) and e.op == "+":
        for a, b in ((e.left, e.right), (e.right, e.left)):
            if isinstance(a, ast.IntLit) and isinstance(b, ast.Name):
                k, name = a.value, b.id
    f = h.fields.get(name) if name is not None else None
    if f is None or not isinstance(f.type, T.IntType) or f.type.be or f.type.signed:
        return None
    return f, k


class PktGen(CsumGen):
    def ctx_u32(self, off: int) -> ir.Value:
        """The u32 context field at byte ``off``, its address marked
        ``llvm.preserve.static.offset`` as clang marks an access to a struct declared
        ``__attribute__((preserve_static_offset))``: LLVM's BPF back end
        (BPFPreserveStaticOffsetPass, LLVM 18) then keeps the load at a constant offset from
        the context; otherwise SimplifyCFG may sink two loads of different fields on two
        paths into one from a phi of the addresses, ``ctx += 12; *(u32 *)(ctx + 0)``, which
        the verifier refuses ("dereference of modified ctx ptr"; found by subprogram
        fuzzing)."""
        base = self.b.call(self._static_offset(), [self.f.ctx])
        return self.b.load(self.gep(base, off), typ=I32, align=4)

    def _static_offset(self) -> ir.Function:
        fn = self.m.globals.get("llvm.preserve.static.offset")
        if fn is None:
            fn = ir.Function(self.m, ir.FunctionType(PTR, [PTR]), "llvm.preserve.static.offset")
        return fn

    def _ctx_ptr(self, which: int, volatile: bool = False) -> ir.Value:
        """data (0) or data_end (1) of the context as a packet pointer, loaded the way
        clang does: u32 + zext + inttoptr for xdp_md, a 64-bit pointer for sk_msg_md.
        ``volatile``: a fresh load LLVM may not treat as loop-invariant (see bounds())."""
        assert self.f.ctx_kind is not None  # sema: packet access in programs and packet fns only
        off = CTX_DATA[self.f.ctx_kind][which]
        wide = CTX_DATA[self.f.ctx_kind][2] == 8
        ptr = self.gep(self.f.ctx, off)
        if volatile:
            v = volatile_load(self.b, ptr, PTR if wide else I32, 8 if wide else 4)
        elif wide:
            return self.b.load(ptr, typ=PTR, align=8)
        else:
            v = self.b.load(ptr, typ=I32, align=4)
        return v if wide else self.b.inttoptr(self.b.zext(v, I64), PTR)

    def opaque(self, v: ir.Value, side_effect: bool = True) -> ir.Value:
        """``v`` through an empty inline asm (libbpf's ``barrier_var``): an opaque 64-bit
        scalar.  Without it LLVM reassociates e.g. ``7 + (data_end - data)`` into arithmetic
        on the pointers and narrows it to 32 bits, in IR and again in instruction selection
        (verifier: "32-bit pointer arithmetic prohibited", FIELD-BUGS B04; found by program
        fuzzing).  ``llvm.bpf.passthrough`` is not enough: it is gone before ISel.
        ``side_effect=False``: the asm reads and writes no memory, so loads of data and
        data_end on either side of it stay shared (a scalar offset needs no more)."""
        asm = ir.InlineAsm(ir.FunctionType(I64, [I64]), "", "=r,0", side_effect=side_effect)
        return self.b.call(asm, [v], attrs=() if side_effect else ("readnone", "nounwind"))

    def pkt_data(self) -> ir.Value:
        return self._ctx_ptr(0)

    def ctx_field(self, name: str) -> ir.Value:
        assert self.f.ctx_kind is not None  # sema allows ctx fields only where there is a ctx
        off, ty, access = CTX_FIELDS[self.f.ctx_kind][name]
        if access == "len":  # data_end - data as a 64-bit scalar (B04)
            # Own volatile loads: if LLVM shared them with the loads behind bounds checks,
            # one zero-extension could serve both, emitted under alu32 as a 32-bit mov that
            # turns the pointer into a scalar for the verifier (found by program fuzzing).
            d = self.b.ptrtoint(self._ctx_ptr(0, volatile=True), I64)
            de = self.b.ptrtoint(self._ctx_ptr(1, volatile=True), I64)
            return self.opaque(self.b.sub(de, d))
        if access == "ip6":
            p = self.alloca_mem(16, name)
            for i in range(4):
                self.b.store(self.ctx_u32(off + 4 * i), self.gep(p, 4 * i), align=4)
            return p
        v = self.ctx_u32(off)
        if access == "port_be":
            return self.b.trunc(self.b.lshr(v, ir.Constant(I32, 16)), I16)
        if access == "port_host":
            return self.b.trunc(v, I16)
        return v

    # ---- optionals ----
    def gen_optional(self, e: ast.Expr, fail: ir.Block) -> ir.Value:
        """Emit ``e`` (parse, lookup, skip_ext, a pointer argument of a global fn); branch
        to ``fail`` when missing; return the payload on the fall-through path."""
        if isinstance(e, ast.Parse):
            # sema: a parse (after no errors) is an optional view of a known header
            assert isinstance(e.ty, T.OptionalType) and isinstance(e.ty.inner, T.HeaderType)
            return self.parse(e.ty.inner.layout, fail)
        if isinstance(e, ast.Push):
            return self.push(e, fail)
        if isinstance(e, ast.Call) and e.name == "skip_ext":
            return self.skip_ext(e, fail)
        if isinstance(e, ast.Call) and e.name == "meta":
            return self.meta_view(e, fail)
        if isinstance(e, ast.Load):
            return self.load_bytes(e, fail)
        if isinstance(e, ast.Field):  # a conditional header field
            return self.cond_field(e, fail)
        if isinstance(e, ast.Call) and e.name == "ringbuf_reserve":
            p = self.ringbuf_reserve(e)
            ok = self.new_block("reserved")
            self.b.cbranch(self.b.icmp_unsigned("==", p, ir.Constant(PTR, None)), fail, ok)
            self.start(ok)
            self.zero_record(p, e)
            return p
        if isinstance(e, ast.Call):  # a fn returning an optional: {i1 present, value}
            r = self.gen(e)
            ok = self.new_block("present")
            self.b.cbranch(self.b.extract_value(r, 0), ok, fail)
            self.start(ok)
            return self.b.extract_value(r, 1)
        if isinstance(e, (ast.MethodCall, ast.Name)):  # a lookup, a nullable argument
            p = self.map_lookup(e) if isinstance(e, ast.MethodCall) else self.gen(e)
            ok = self.new_block("found")
            self.b.cbranch(self.b.icmp_unsigned("==", p, ir.Constant(PTR, None)), fail, ok)
            self.start(ok)
            return p
        raise AssertionError("codegen: optional")

    def meta_view(self, e: ast.Call, fail: ir.Block) -> ir.Value:
        """``meta(S)``: ``ctx->data_meta`` (u32 + zext + inttoptr, as clang loads it), or
        ``fail`` when ``data_meta + sizeof(S) > data`` (the verifier's rule for a
        PTR_TO_PACKET_META: it is readable up to data, checked like ``cursor + n > data_end``)."""
        assert isinstance(e.ty, T.OptionalType) and isinstance(e.ty.inner, T.MetaRef)  # sema
        assert self.f.ctx_kind is not None  # sema: meta() in xdp program bodies only
        size = e.ty.inner.inner.size
        v = self.b.load(self.gep(self.f.ctx, CTX_DATA_META[self.f.ctx_kind]), typ=I32, align=4)
        p = self.b.inttoptr(self.b.zext(v, I64), PTR)
        ok = self.new_block("meta.ok")
        data = self._ctx_ptr(0, volatile=bool(self.f.loops) or self.f.volatile_end)
        self.b.cbranch(self.b.icmp_unsigned(">", self.gep(p, size), data), fail, ok)
        self.start(ok)
        return p

    def bounds(
        self,
        p: ir.Value,
        size: int,
        fail: ir.Block,
        name: str,
        data_end: ir.Value | None = None,
    ) -> None:
        """Branch to ``fail`` if ``p + size > data_end`` (pointer compare, verifier shape).
        ``data_end``: a data_end already loaded for this check (``parse`` shares one between
        a header's fixed-part and whole-header checks); by default a fresh load."""
        ok = self.new_block(f"{name}.ok")
        end = self.b.gep(p, [ir.Constant(I64, size)], inbounds=True, source_etype=I8)
        # In a loop, LLVM's loop passes may rewrite pointer compares against a loop-invariant
        # data_end into integer arithmetic on data_end (found by fuzzing: the verifier then
        # loses the packet range, FIELD-BUGS B06).  A volatile load per check prevents it.
        if data_end is None:
            data_end = self._ctx_ptr(1, volatile=bool(self.f.loops) or self.f.volatile_end)
        self.b.cbranch(self.b.icmp_unsigned(">", end, data_end), fail, ok)
        self.start(ok)

    def parse(self, h: Header, fail: ir.Block) -> ir.Value:
        """``parse`` of header layout ``h`` (layout.Header): check its fixed part, move the
        cursor by its length (fixed; computed from its fields, ``fail`` when below the fixed
        size or above ``max_length``; or the fixed part plus the conditional fields there)."""
        cur = self.b.load(self.f.cursor, typ=PTR)
        # A header with a length or conditional fields has two checks sharing one data_end.
        # In a loop, one whose length is read from the packet (a TCP option, a DNS label)
        # takes a plain data_end load that LLVM hoists out of the loop, as C's one
        # ``data_end`` does: the cursor then moves by a loaded amount, not an add
        # recurrence, so the loop passes cannot rewrite its compares into arithmetic on
        # data_end (B06 needs a cursor moved by a constant).  Other checks in loops keep
        # their volatile load per check.
        whole_end = h.length is not None or bool(h.conditional)
        data_end = None
        if h.length is not None and self.f.loops and not self.f.volatile_end:
            data_end = self._ctx_ptr(1)
        elif whole_end:
            data_end = self._ctx_ptr(1, volatile=bool(self.f.loops) or self.f.volatile_end)
        self.bounds(cur, h.size, fail, h.name, data_end)
        if h.length is not None:
            ln = self.header_length(cur, h, fail)
            nxt = self.gep(cur, ln)
        elif h.conditional:
            nxt = self.gep(cur, self.cond_offset(cur, h, None))
        else:
            nxt = self.gep(cur, h.size)
        if data_end is not None:
            # the packet must hold the whole header, as C's ``pos + hdrsize > data_end``
            ok = self.new_block(f"{h.name}.whole")
            self.b.cbranch(self.b.icmp_unsigned(">", nxt, data_end), fail, ok)
            self.start(ok)
        self.b.store(nxt, self.f.cursor)
        return cur

    def header_length(self, cur: ir.Value, h: Header, fail: ir.Block) -> ir.Value:
        """The length (i64) of header ``h`` at ``cur``, branching to ``fail`` when it is below
        the fixed size or above ``max_length``.  A length ``FIELD * K`` (ipv4's ``ihl * 4``)
        is bounded on the field before the multiplication, the shape clang gives
        ``ip->ihl < 5``: the same instructions as C, and the verifier sees the field's range."""
        e, max_length = h.length, h.max_length
        assert e is not None and max_length is not None  # parse: a header with a length
        f = (
            h.fields.get(e.left.id)
            if isinstance(e, ast.BinOp) and isinstance(e.left, ast.Name)
            else None
        )
        k = (
            e.right.value
            if f is not None and isinstance(e, ast.BinOp) and isinstance(e.right, ast.IntLit)
            else 0
        )
        ft = f.type if f is not None and isinstance(f.type, T.IntType) else None
        fmax = (1 << ft.bits) - 1 if ft is not None else 0
        if (
            k > 0
            and isinstance(e, ast.BinOp)
            and e.op == "*"
            and f is not None
            and ft is not None
            and fmax
            and not ft.be
            and -(-h.size // k) <= fmax
        ):
            n = self.field_value(cur, f)
            bounds = [("<", -(-h.size // k))]  # ceil(size / K)
            if max_length // k < fmax:  # else no value of the field is too big
                bounds.append((">", max_length // k))
        elif (add := _field_plus_const(e, h)) is not None:
            # ``K + FIELD`` (a TLV's ``2 + len``, a DNS label's ``1 + len``): the bounds on
            # the field, as C's ``len > 63``, and only those a field value can break
            f, add_k = add
            assert isinstance(f.type, T.IntType)  # _field_plus_const: an integer field
            n = self.field_value(cur, f)
            fmax = (1 << f.type.bits) - 1
            bounds = [("<", h.size - add_k)] if h.size > add_k else []
            if max_length - add_k < fmax:
                bounds.append((">", max_length - add_k))
            for op, bound in bounds:
                ok = self.new_block(f"{h.name}.len")
                self.b.cbranch(self.b.icmp_unsigned(op, n, ir.Constant(n.type, bound)), fail, ok)
                self.start(ok)
            n = self.b.zext(n, I64) if n.type.width < 64 else n
            return self.b.add(n, ir.Constant(I64, add_k)) if add_k else n
        else:
            n, k = self.header_expr(cur, h, e), 0
            bounds = [("<", h.size), (">", max_length)]
        for op, bound in bounds:
            ok = self.new_block(f"{h.name}.len")
            self.b.cbranch(self.b.icmp_unsigned(op, n, ir.Constant(n.type, bound)), fail, ok)
            self.start(ok)
        if not k:
            return n
        n = self.b.zext(n, I64) if n.type.width < 64 else n
        if k & (k - 1) == 0:
            return self.b.shl(n, ir.Constant(I64, k.bit_length() - 1))
        return self.b.mul(n, ir.Constant(I64, k))

    # ---- header layouts (bpfdsl.lang.layout) ----
    def header_expr(self, hdr: ir.Value, h: Header, e: ast.Expr) -> ir.Value:
        """A length or condition expression of header ``h`` at ``hdr`` as an i64: numbers,
        the header's fields (as host-order numbers) and LENGTH_OPS; without recursion."""
        todo, vals = [(e, False)], []
        while todo:
            x, done = todo.pop()
            if isinstance(x, ast.IntLit):
                vals.append(ir.Constant(I64, x.value))
            elif isinstance(x, ast.Name):
                f = h.fields[x.id]
                assert isinstance(f.type, T.IntType)  # layout.check_expr: integer fields
                v = self.field_value(hdr, f)
                if f.type.be:
                    v = self.bswap(v)
                vals.append(self.b.zext(v, I64) if v.type.width < 64 else v)
            elif not done:
                assert isinstance(x, ast.BinOp)  # layout.check_expr: numbers, fields, LENGTH_OPS
                todo += [(x, True), (x.right, False), (x.left, False)]
            else:
                assert isinstance(x, ast.BinOp)  # as above
                b, a = vals.pop(), vals.pop()
                # binop: a shift by a field is taken modulo 64, as everywhere (LLVM's shl
                # by 64 or more is poison: `length: (2 << k) + 2` with k a u8)
                vals.append(self.binop(x.op, a, b, False))
        return vals[0]

    def cond_present(self, hdr: ir.Value, h: Header, f: HField) -> ir.Value:
        """i1: conditional field ``f`` of ``h`` (at ``hdr``) is there."""
        assert f.cond is not None  # a conditional field
        v = self.header_expr(hdr, h, f.cond)
        return self.b.icmp_unsigned("!=", v, ir.Constant(I64, 0))

    def cond_offset(self, hdr: ir.Value, h: Header, name: str | None) -> ir.Value:
        """Byte offset (i64) of conditional field ``name`` of ``h`` (None: the header's end):
        its declared offset plus the sizes of the conditional fields before it that are there."""
        if name is None:
            before = [f for f in h.fields.values() if f.cond is not None]
        else:
            before = [h.fields[n] for n in h.fields[name].after]
        sizes: dict[tuple, tuple[HField, int]] = {}  # one term per condition (GRE: 4 * C)
        for g in before:
            assert g.cond is not None  # conditional fields (layout: `after` names only those)
            key = _expr_key(g.cond)
            first, n = sizes.get(key, (g, 0))
            sizes[key] = (first, n + g.type.size)
        v = ir.Constant(I64, h.size)
        for g, n in sizes.values():
            here = self.b.zext(self.cond_present(hdr, h, g), I64)
            v = self.b.add(v, self.b.mul(here, ir.Constant(I64, n)))
        return v

    def cond_field(self, e: ast.Field, fail: ir.Block) -> ir.Value:
        """A conditional field (``key: be32 if k``): ``fail`` when it is not there or the
        packet ends before it (its own bounds check); its value (memory for bytes)."""
        assert isinstance(e.obj.ty, T.HeaderType)  # only header fields are conditional
        h = e.obj.ty.layout
        f = h.fields[e.name]
        hdr = self.gen(e.obj)
        ok = self.new_block(f"{e.name}.there")
        self.b.cbranch(self.cond_present(hdr, h, f), ok, fail)
        self.start(ok)
        p = self.gep(hdr, self.cond_offset(hdr, h, e.name))
        self.bounds(p, f.type.size, fail, e.name)
        return self.read_bytes(p, f.type, f.type.size)

    def read_bytes(self, p: ir.Value, ty: T.Type, align: int) -> ir.Value:
        """The value of type ``ty`` at packet pointer ``p``: an integer, or a stack copy of
        the bytes (addresses, byte arrays)."""
        if isinstance(ty, T.IntType):
            return self.b.load(p, typ=self.lt(ty), align=ty.size)
        dst = self.alloca_mem(ty.size)
        self.copy_bytes(dst, p, ty.size, min(8, align))
        return dst

    def field_value(self, hdr: ir.Value, f: HField) -> ir.Value:
        """Field ``f`` (an HField) of the header at ``hdr``: an integer of its type (a bit
        field: its bits of the window read in network order, as a host-order number), or a
        pointer to its bytes."""
        p = self.gep(hdr, f.offset)
        if not isinstance(f.type, T.IntType):
            return p
        if not f.width:
            return self.b.load(p, typ=self.lt(f.type), align=f.type.size)
        w = f.window
        v = self._read_window(p, f)
        if f.shift:
            v = self.b.lshr(v, ir.Constant(v.type, f.shift))
        if f.width < 8 * w:
            v = self.b.and_(v, ir.Constant(v.type, (1 << f.width) - 1))
        return self.conv(v, T.IntType(8 * w), f.type)

    def _read_window(self, p: ir.Value, f: HField) -> ir.Value:
        """The ``f.window`` bytes at ``p`` as a network-order (big-endian) number."""
        w = f.window
        if w in (1, 2, 4, 8):
            v = self.b.load(p, typ=ir.IntType(8 * w), align=self._window_align(f))
            return self.bswap(v) if w > 1 else v
        it = ir.IntType(8 * w)
        v = ir.Constant(it, 0)
        for i in range(w):
            byte = self.b.zext(self.b.load(self.gep(p, i), typ=I8, align=1), it)
            v = self.b.or_(v, self.b.shl(byte, ir.Constant(it, 8 * (w - 1 - i))))
        return v

    def _write_window(self, p: ir.Value, f: HField, v: ir.Value) -> None:
        """Write ``v`` (the window as a network-order number) back as ``f.window`` bytes."""
        w = f.window
        if w in (1, 2, 4, 8):
            self.b.store(self.bswap(v) if w > 1 else v, p, align=self._window_align(f))
            return
        for i in range(w):
            byte = self.b.trunc(self.b.lshr(v, ir.Constant(v.type, 8 * (w - 1 - i))), I8)
            self.b.store(byte, self.gep(p, i), align=1)

    @staticmethod
    def _window_align(f: HField) -> int:
        """Alignment of a bit field's window, relative to the header's start (headers are
        taken to be aligned like their C structs, as clang does)."""
        a = f.window if f.window in (1, 2, 4, 8) else 1
        while f.offset % a:
            a //= 2
        return a

    def store_bits(self, hdr: ir.Value, f: HField, op: str, value: ast.Expr) -> None:
        """Write bit field ``f`` (``op`` "=" or compound) keeping the other bits of its
        window: read, mask, insert, write back in network order."""
        w = f.window
        it = ir.IntType(8 * w)
        p = self.gep(hdr, f.offset)
        host = self._read_window(p, f)
        v = self.rv(value, f.type)
        if op != "=":
            cur = self.field_value(hdr, f)
            v = self.binop(op[:-1], cur, v, False)
        v = self.conv(v, f.type, T.IntType(8 * w))
        mask = ((1 << f.width) - 1) << f.shift
        ins = self.b.and_(self.b.shl(v, ir.Constant(it, f.shift)), ir.Constant(it, mask))
        keep = self.b.and_(host, ir.Constant(it, ~mask & ((1 << 8 * w) - 1)))
        self._write_window(p, f, self.b.or_(keep, ins))

    # ``cursor + N`` with N + size at most this is addressed from the cursor directly: the
    # verifier adds N to the cursor's fixed offset, and the cursor's variable part (header
    # lengths, the extension-header walk: a few KiB at most) plus N + size stays far below
    # MAX_PACKET_OFF.  A larger N is bounded like a run-time offset (see pkt_offset_ptr).
    NEAR_OFF = 256

    def pkt_offset_ptr(
        self, base: str, offset: ast.Expr | None, size: int, fail: ir.Block
    ) -> ir.Value:
        """Packet pointer of ``load``/``store`` bytes at ``offset`` from the cursor or the
        packet's first byte (``base``), checked for ``size`` bytes; ``fail`` on a short
        packet.

        The verifier proves a range from ``p + size > pkt_end`` only if p's variable part
        plus its fixed offset plus ``size`` is at most MAX_PACKET_OFF (kernel
        find_good_pkt_pointers; else the access is "invalid access to packet").  So:
        ``offset(view) [+ K]`` reads from the view (no check when inside its fixed part,
        which ``parse`` checked); a constant reads at ``base + N`` (sema: ``N + size``
        within MAX_PACKET_OFF from the packet start); anything else -- a run-time offset, a
        far constant from the cursor -- becomes one scalar from the packet's first byte,
        ``(cursor - data) + off``, which fails above ``MAX_PACKET_OFF - size`` and is
        added to data (a packet cannot be that long: XDP's linear data is one page)."""
        view = self._view_relative(offset, size) if base == "packet" else None
        if view is not None:
            hdr, k, inside = view
            p = self.gep(self.gen(hdr), k)
            if not inside:
                self.bounds(p, size, fail, "bytes")
            return p
        v = self.c.cval.get(offset) if offset is not None else 0
        if v is not None and (base == "packet" or v + size <= self.NEAR_OFF):
            p = self.b.load(self.f.cursor, typ=PTR) if base == "cursor" else self.pkt_data()
            if v:
                p = self.b.gep(p, [ir.Constant(I64, v)], inbounds=True, source_etype=I8)
            self.bounds(p, size, fail, "bytes")
            return p
        assert offset is not None  # ``at cursor`` is the constant 0
        off = self.rv(offset, T.U64)
        if base == "cursor":  # a 64-bit pointer difference as an opaque scalar (B04)
            cur = self.b.ptrtoint(self.b.load(self.f.cursor, typ=PTR), I64)
            d = self.b.ptrtoint(self._ctx_ptr(0, volatile=True), I64)
            off = self.b.add(self.opaque(self.b.sub(cur, d)), off)
        ok = self.new_block("off.ok")
        big = self.b.icmp_unsigned(">", off, ir.Constant(I64, MAX_PACKET_OFF - size))
        self.b.cbranch(big, fail, ok)
        self.start(ok)
        p = self.gep(self.pkt_data(), self.opaque(off, side_effect=False))
        self.bounds(p, size, fail, "bytes")
        return p

    def _view_relative(
        self, offset: ast.Expr | None, size: int
    ) -> tuple[ast.Expr, int, bool] | None:
        """``offset(view)``, ``offset(view) + K`` or ``K + offset(view)`` (K a constant, 0 <=
        K, K + ``size`` at most NEAR_OFF): (the view, K, whether the bytes lie inside the fixed
        part of its header, which its ``parse`` checked); None for any other offset."""
        k, call = 0, offset
        if isinstance(offset, ast.BinOp) and offset.op == "+":
            for a, b in ((offset.left, offset.right), (offset.right, offset.left)):
                c = self.c.cval.get(b)
                if c is not None and isinstance(a, ast.Call) and a.name == "offset":
                    k, call = c, a
                    break
        if not (isinstance(call, ast.Call) and call.name == "offset" and 0 <= k):
            return None
        view = call.args[0]
        assert isinstance(view.ty, T.HeaderType)  # sema: offset() takes a header view
        if k + size > self.NEAR_OFF:
            return None
        return view, k, k + size <= view.ty.layout.size

    def view_offset(self, view: ast.Expr) -> ir.Value:
        """``offset(view)``: bytes from the packet's first byte to the header view (u32),
        a 64-bit difference of pointers taken as an opaque scalar before it is truncated, so
        no 32-bit ALU op ever takes a pointer (FIELD-BUGS B04); data is loaded afresh (as for
        ctx.len) so no zero-extension is shared with the bounds checks."""
        p = self.b.ptrtoint(self.gen(view), I64)
        d = self.b.ptrtoint(self._ctx_ptr(0, volatile=True), I64)
        return self.b.trunc(self.opaque(self.b.sub(p, d)), I32)

    def load_bytes(self, e: ast.Load, fail: ir.Block) -> ir.Value:
        """``load T at OFF``: ``fail`` on a short packet, else the value (bytes: a copy)."""
        assert isinstance(e.ty, T.OptionalType)  # sema: a load is optional (short packet)
        ty = e.ty.inner
        p = self.pkt_offset_ptr(e.base, e.offset, ty.size, fail)
        return self.read_bytes(p, ty, 8)

    def s_Store(self, s: ast.Store) -> None:
        """``store T at OFF = V else { ... }``: the write, or the else block on a short packet."""
        ty = self.c.stores[s]
        fail, done = self.new_block("store.short"), self.new_block("store.end")
        p = self.pkt_offset_ptr(s.base, s.offset, ty.size, fail)
        if isinstance(ty, T.IntType):
            self.b.store(self.rv(s.value, ty), p, align=ty.size)
        else:  # at any packet offset: as aligned as its type only
            self.store_bytes(p, s.value, ty, max(1, ty.align))
        self.b.branch(done)
        self.start(fail)
        self.block(s.orelse)
        if not self.b.block.is_terminated:
            self.b.branch(done)
        self.start(done)

    def skip_ext(self, e: ast.Call, fail: ir.Block) -> ir.Value:
        """Walk at most IPV6_EXT_MAX extension headers after an ipv6 header; result: the
        upper-layer protocol number (u8); missing if truncated or too many headers.  The
        EXT_* flags of the walk go to ``ext_flags_slot`` (unused ones are optimized away)."""
        slot = self.ext_flags_slot(e.args[0])
        if slot is not None:
            self.b.store(ir.Constant(I8, 0), slot)
        return self.ext_walk(self.gen(e.args[0]), fail, slot)

    def ext_walk(
        self,
        ip6: ir.Value,
        fail: ir.Block,
        flags: ir.Value | None = None,
        stop: int = 0,
        stop_to: ir.Block | None = None,
    ) -> ir.Value:
        """The walk of :meth:`skip_ext` from the cursor (just past the ipv6 header at
        ``ip6``); leaves the cursor at the upper-layer header; returns its protocol (u8).
        ``flags`` (an i8 slot, set to 0 by the caller) collects what the walk passed, and
        a header that is one of ``stop`` ends the walk at ``stop_to`` (EXT_RH_ACTIVE,
        EXT_LATER_FRAG; see codegen.csum)."""
        nh_slot = self.alloca(I8, "nexthdr", 1)
        cnt = self.alloca(I32, "ext.i", 4)
        self.b.store(self.b.load(self.gep(ip6, 6), typ=I8, align=1), nh_slot)
        self.b.store(ir.Constant(I32, 0), cnt)
        head, more, ext, done = (
            self.new_block(n) for n in ("ext.head", "ext.more", "ext.hdr", "ext.done")
        )
        self.b.branch(head)
        self.start(head)
        nh = self.b.load(nh_slot)
        is_ext = None
        for v in IPV6_EXT_HEADERS:
            c = self.b.icmp_unsigned("==", nh, ir.Constant(I8, v))
            is_ext = c if is_ext is None else self.b.or_(is_ext, c)
        self.b.cbranch(is_ext, more, done)
        self.start(more)
        self.b.cbranch(
            self.b.icmp_unsigned("<", self.b.load(cnt), ir.Constant(I32, IPV6_EXT_MAX)), ext, fail
        )
        self.start(ext)
        cur = self.b.load(self.f.cursor, typ=PTR)
        self.bounds(cur, 8, fail, "ext")  # data-dependent stride: no SCEV rewrite possible
        nxt_hdr = self.b.load(cur, typ=I8, align=1)
        hlen = self.b.load(self.gep(cur, 1), typ=I8, align=1)
        ln = self.b.shl(
            self.b.add(self.b.zext(hlen, I64), ir.Constant(I64, 1)), ir.Constant(I64, 3)
        )
        is_frag = self.b.icmp_unsigned("==", nh, ir.Constant(I8, 44))
        ln = self.b.select(is_frag, ir.Constant(I64, 8), ln)
        if flags is not None:
            bits = self._ext_bits(nh, cur, branch_free=True)
            self.b.store(self.b.or_(self.b.load(flags, typ=I8), bits), flags)
        if stop:
            on = self.new_block("ext.on")
            hit = self.b.and_(self._ext_bits(nh, cur, branch_free=False), ir.Constant(I8, stop))
            self.b.cbranch(self.b.icmp_unsigned("!=", hit, ir.Constant(I8, 0)), stop_to, on)
            self.start(on)
        self.b.store(self.gep(cur, ln), self.f.cursor)
        self.b.store(nxt_hdr, nh_slot)
        self.b.store(self.b.add(self.b.load(cnt), ir.Constant(I32, 1)), cnt)
        self.b.branch(head)
        self.start(done)
        return self.b.load(nh_slot)

    def resize(self, e: ast.Call) -> ir.Value:
        """adjust_head/tail/meta, msg_pull/push/pop_data: the helper call, then cursor = data
        (every earlier packet pointer is invalid: bpf_helper_changes_pkt_data)."""
        hid = HELPERS[PKT_RESIZE[e.name]].id
        sig = BUILTINS[e.name]
        assert sig is not None
        args = [self.rv(a, t) for a, t in zip(e.args, sig[0], strict=True)]
        r = self.helper(hid, I64, [self.f.ctx, *args])
        self.reset_cursor()
        return r

    # ---- push / pop (bpfdsl.lang.sema.encap) ----
    def _inner_len(self, view: ir.Value, name: str) -> ir.Value:
        """The length (i64) of the packet from ``view`` on: its IPv4 ``tot_len`` or IPv6
        ``payload_len`` + 40 (so trailing Ethernet padding stays outside, as Katran counts
        it), else the bytes to the packet's end (a 64-bit difference of pointers as an
        opaque scalar, FIELD-BUGS B04)."""
        if name in ("ipv4", "ipv6"):
            off = 2 if name == "ipv4" else 4
            v = self.b.zext(self.bswap(self.b.load(self.gep(view, off), typ=I16, align=2)), I64)
            return v if name == "ipv4" else self.b.add(v, ir.Constant(I64, 40))
        de = self.b.ptrtoint(self._ctx_ptr(1, volatile=True), I64)
        return self.opaque(self.b.sub(de, self.b.ptrtoint(view, I64)))

    @staticmethod
    def _hdr_align(h: Header) -> int:
        """The alignment of header ``h`` as its C struct (its widest aligned field, at most
        8): what clang assumes for ``*hdr = value``."""
        a = 1
        for f in h.fields.values():
            fa = PktGen._window_align(f) if f.width else max(1, min(8, f.type.align))
            if f.type == T.MAC:
                fa = 2
            a = max(a, fa)
        return a

    def _be16_at(self, hdr: ir.Value, off: int, v: ir.Value) -> None:
        """Store host-order i64 ``v`` as a be16 at ``hdr + off``."""
        self.b.store(self.bswap(self.b.trunc(v, I16)), self.gep(hdr, off), align=2)

    def _build_pushed(self, hdr: ir.Value, ph: ast.PushHeader, h: Header, rest: ir.Value) -> None:
        """Header ``h`` in zeroed stack memory ``hdr``: the fields push computes (``rest``:
        i64 bytes from this header to the packet's end after the push), the defaults, then
        the fields given (bit fields keep the bits around them)."""
        if h.library and h.name == "ipv4":
            self.b.store(ir.Constant(I8, 0x45), hdr, align=1)  # version 4, ihl 5
            self._be16_at(hdr, h.fields["tot_len"].offset, rest)
        elif h.library and h.name == "ipv6":
            self.b.store(ir.Constant(I8, 0x60), hdr, align=1)  # version 6
            pl = self.b.sub(rest, ir.Constant(I64, h.size))
            self._be16_at(hdr, h.fields["payload_len"].offset, pl)
        elif h.library and h.name == "udp":
            self._be16_at(hdr, h.fields["len"].offset, rest)  # check stays 0: none
        if h.library:
            for name, v in DEFAULTS.get(h.name, {}).items():
                if name not in ph.fields:
                    self.b.store(ir.Constant(I8, v), self.gep(hdr, h.fields[name].offset))
        for name, value in ph.fields.items():
            f = h.fields[name]
            if f.width:
                self.store_bits(hdr, f, "=", value)
            elif isinstance(f.type, T.IntType):
                p = self.gep(hdr, f.offset)
                self.b.store(self.rv(value, f.type), p, align=min(f.type.size, 8))
            else:
                al = f.offset & -f.offset if f.offset else 8
                self.store_bytes(self.gep(hdr, f.offset), value, f.type, min(8, al))

    def _ipv4_check(self, hdr: ir.Value) -> None:
        """The IPv4 header checksum (RFC 791, RFC 1071) of the 20 bytes at ``hdr`` (its
        ``check`` 0): the one's-complement sum of the words as stored, folded."""
        s: ir.Value = ir.Constant(I64, 0)
        for off in range(0, 20, 2):
            w = self.b.load(self.gep(hdr, off), typ=I16, align=2)
            s = self.b.add(s, self.b.zext(w, I64))
        self.b.store(self._fold16(s, False), self.gep(hdr, 10), align=2)

    def _save_prefix(self, view: ir.Value, prefix: int, n: int) -> ir.Value | None:
        """The first ``n`` of the ``prefix`` bytes before header ``view`` (its L2 header)
        copied to the stack."""
        if not n:
            return None
        saved = self.alloca_mem(n, "l2", filled=[(0, n)])
        self.copy_bytes(saved, self.gep(view, -prefix), n, 2 if n % 2 == 0 else 1)
        return saved

    def _adjust_head(self, delta: ir.Value, fail: ir.Block) -> None:
        """``bpf_xdp_adjust_head(ctx, delta)``, ``fail`` when it refuses; cursor = data."""
        r = self.helper(HELPERS["xdp_adjust_head"].id, I64, [self.f.ctx, delta])
        self.reset_cursor()
        ok = self.new_block("resized")
        self.b.cbranch(self.b.icmp_unsigned("!=", r, ir.Constant(I64, 0)), fail, ok)
        self.start(ok)

    def push(self, e: ast.Push, fail: ir.Block) -> ir.Value:
        """``push H1 {...}, ... before VIEW``: the headers built on the stack (lengths,
        IPv4 checksum, UDP-over-IPv6 checksum over the inner packet), the L2 bytes before VIEW saved, ``adjust_head(-n)``, both written
        at the new start; the view of the first pushed header (``fail``: no headroom)."""
        plan = self.c.pushes[e]
        view = self.gen(e.before)
        n = sum(h.size for h in plan.headers)
        inner = self._inner_len(view, plan.inner)
        bufs, off = [], 0
        for ph, h in zip(e.headers, plan.headers, strict=True):
            buf = self.alloca_mem(h.size, h.name)
            self._build_pushed(buf, ph, h, self.b.add(inner, ir.Constant(I64, n - off)))
            bufs.append((buf, h, off))
            off += h.size
        for buf, h, _ in bufs:
            if h.library and h.name == "ipv4":
                self._ipv4_check(buf)
        for i, (_buf, h, _) in enumerate(bufs):
            if h.library and h.name == "udp" and i and bufs[i - 1][1].name == "ipv6":
                inner_sum = self._pkt_sum(view, inner, fail)
                self._udp6_check(bufs[i - 1][0], [b for b, _, _ in bufs[i:]], bufs[i:], inner_sum)
        keep = plan.prefix - (2 if plan.ethertype is not None else 0)
        saved = self._save_prefix(view, plan.prefix, keep)
        self._adjust_head(ir.Constant(I32, -n & 0xFFFFFFFF), fail)
        data = self.pkt_data()
        self.bounds(data, plan.prefix + n, fail, "push")
        if saved is not None:
            self.copy_bytes(data, saved, keep, 2 if keep % 2 == 0 else 1)
        if plan.ethertype is not None:
            v = ir.Constant(I16, int.from_bytes(plan.ethertype.to_bytes(2, "big"), "little"))
            self.b.store(v, self.gep(data, plan.prefix - 2), align=2)
        first = self.gep(data, plan.prefix)
        for buf, h, off in bufs:
            self.copy_bytes(self.gep(first, off), buf, h.size, self._hdr_align(h))
        return first

    # the packet bytes a pushed UDP-over-IPv6 checksum sums: at most a page, XDP's linear data
    SUM_MAX = 4096

    def _pkt_sum(self, p0: ir.Value, n: ir.Value, fail: ir.Block) -> ir.Value:
        """The one's-complement sum (i64, unfolded) of the ``n`` packet bytes at ``p0``, as
        stored (32-bit words read little-endian, as csum_diff sums them; a last odd byte as
        the first byte of a zero-padded word); ``fail`` when ``n`` is above SUM_MAX or the
        packet ends before.  A loop of at most SUM_MAX / 4 words, each bounds-checked on a
        fresh data_end (the verifier walks it word by word)."""
        b = self.b
        big = b.icmp_unsigned(">", n, ir.Constant(I64, self.SUM_MAX))
        ok = self.new_block("sum.len")
        b.cbranch(big, fail, ok)
        self.start(ok)
        words = b.lshr(n, ir.Constant(I64, 2))
        pre = b.block
        head, body, done = (self.new_block(x) for x in ("sum.head", "sum.word", "sum.tail"))
        b.branch(head)
        self.start(head)
        i = b.phi(I64)
        acc = b.phi(I64)
        i.add_incoming(ir.Constant(I64, 0), pre)
        acc.add_incoming(ir.Constant(I64, 0), pre)
        more = b.and_(
            b.icmp_unsigned("<", i, words),
            b.icmp_unsigned("<", i, ir.Constant(I64, self.SUM_MAX // 4)),
        )
        b.cbranch(more, body, done)
        self.start(body)
        off = self.opaque(b.shl(i, ir.Constant(I64, 2)), side_effect=False)
        p = self.gep(p0, off)
        end = self.gep(p, 4)
        inside = self.new_block("sum.in")
        b.cbranch(b.icmp_unsigned(">", end, self._ctx_ptr(1, volatile=True)), fail, inside)
        self.start(inside)
        w = b.zext(b.load(p, typ=I32, align=1), I64)
        nxt_acc = b.add(acc, w)
        nxt_i = b.add(i, ir.Constant(I64, 1))
        i.add_incoming(nxt_i, b.block)
        acc.add_incoming(nxt_acc, b.block)
        b.branch(head)
        self.start(done)
        # the last 0..3 bytes
        tail = self.gep(p0, self.opaque(b.and_(n, ir.Constant(I64, ~3 & 0xFFFF)), False))
        rem = b.and_(n, ir.Constant(I64, 3))
        total = acc
        for size in (2, 1):
            # rem & 2: a 16-bit word at the tail; rem & 1: one byte after it (or at the tail)
            has = b.icmp_unsigned("!=", b.and_(rem, ir.Constant(I64, size)), ir.Constant(I64, 0))
            yes, join = self.new_block(f"sum.{size}"), self.new_block(f"sum.{size}.done")
            before = b.block
            b.cbranch(has, yes, join)
            self.start(yes)
            q = tail if size == 2 else self.gep(tail, b.and_(rem, ir.Constant(I64, 2)))
            qe = self.gep(q, size)
            inb = self.new_block(f"sum.{size}.in")
            b.cbranch(b.icmp_unsigned(">", qe, self._ctx_ptr(1, volatile=True)), fail, inb)
            self.start(inb)
            v = b.zext(b.load(q, typ=ir.IntType(8 * size), align=1), I64)
            added = b.add(total, v)
            yes_end = b.block
            b.branch(join)
            self.start(join)
            ph = b.phi(I64)
            ph.add_incoming(total, before)
            ph.add_incoming(added, yes_end)
            total = ph
        return total

    def _udp6_check(self, ip6: ir.Value, hdrs: list, layouts: list, inner: ir.Value) -> None:
        """The UDP checksum over IPv6 (RFC 8200 8.1, RFC 768; RFC 6935: a tunnel's too) of
        the pushed UDP header ``hdrs[0]`` (its check 0), the headers pushed after it and the
        inner packet's sum ``inner``: the pseudo-header (addresses, UDP length, next header
        17), all as stored, folded; a computed 0 is sent as 0xffff."""
        b = self.b
        s = inner
        for off in range(8, 40, 4):  # saddr, daddr
            s = b.add(s, b.zext(b.load(self.gep(ip6, off), typ=I32, align=4), I64))
        s = b.add(s, ir.Constant(I64, 17 << 8))  # next header 17, as stored
        udp = hdrs[0]
        s = b.add(s, b.zext(b.load(self.gep(udp, 4), typ=I16, align=2), I64))  # the length
        for buf, (_, h, _) in zip(hdrs, layouts, strict=True):
            for off in range(0, h.size - 1, 2):
                s = b.add(s, b.zext(b.load(self.gep(buf, off), typ=I16, align=2), I64))
        c = self._fold16(s, True)
        zero = b.icmp_unsigned("==", c, ir.Constant(I16, 0))
        c = b.select(zero, ir.Constant(I16, 0xFFFF), c)
        b.store(c, self.gep(udp, 6), align=2)

    def _view_len(self, hdr: ir.Value, h: Header) -> ir.Value:
        """The length (i64) of the parsed header ``h`` at ``hdr`` (its parse checked it)."""
        if h.length is not None:
            return self.header_expr(hdr, h, h.length)
        if any(f.cond is not None for f in h.fields.values()):
            return self.cond_offset(hdr, h, None)
        return ir.Constant(I64, h.size)

    def s_Pop(self, s: ast.Pop) -> None:
        """``pop FIRST [through LAST] else {...}``: the L2 bytes before FIRST saved,
        ``adjust_head(+n)`` (n: FIRST's start to LAST's end), those bytes written at the
        new start; the else block when the kernel refuses."""
        plan = self.c.pops[s]
        first = self.gen(s.first)
        if plan.delta is not None:
            delta: ir.Value = ir.Constant(I32, plan.delta)
        else:
            last_e = s.last or s.first
            assert isinstance(last_e.ty, T.HeaderType)  # sema.encap: a view
            last = self.gen(last_e)
            end = self.b.add(self.b.ptrtoint(last, I64), self._view_len(last, last_e.ty.layout))
            d = self.opaque(self.b.sub(end, self.b.ptrtoint(first, I64)))
            delta = self.b.trunc(d, I32)
        saved = self._save_prefix(first, plan.prefix, plan.prefix)
        fail, done = self.new_block("pop.fail"), self.new_block("pop.done")
        self._adjust_head(delta, fail)
        if saved is not None:
            data = self.pkt_data()
            self.bounds(data, plan.prefix, fail, "pop")
            self.copy_bytes(data, saved, plan.prefix, 2 if plan.prefix % 2 == 0 else 1)
        self.b.branch(done)
        self.start(fail)
        self.block(s.orelse)
        if not self.b.block.is_terminated:
            self.b.unreachable()
        self.start(done)

    def reset_cursor(self) -> None:
        """cursor = data, loaded afresh from the context (after a resize, or where paths
        that resized and paths that did not meet: see bpfdsl.lang.sema.resize)."""
        self.b.store(self._ctx_ptr(0, volatile=True), self.f.cursor)

    # ---- fields ----
    def header_field_ptr(self, e: ast.Field) -> ir.Value:
        assert isinstance(e.obj.ty, T.HeaderType)
        f = e.obj.ty.layout.fields[e.name]
        return self.gep(self.gen(e.obj), f.offset)

    def load_header_field(self, e: ast.Field) -> ir.Value:
        assert isinstance(e.obj.ty, T.HeaderType)
        return self.field_value(self.gen(e.obj), e.obj.ty.layout.fields[e.name])

    def store_header_elem(self, tgt: ast.Index, op: str, value: ast.Expr) -> None:
        """``hdr.bytes[i] = v`` (a ``[u8; N]`` header field): the byte, and the header's own
        checksum for the 16-bit word holding it."""
        fld = tgt.obj
        assert isinstance(fld, ast.Field) and isinstance(fld.obj.ty, T.HeaderType)  # see assign
        layout = fld.obj.ty.layout
        f = layout.fields[fld.name]
        hdr = self.gen(fld.obj)
        off = self.b.add(self.rv(tgt.index, T.U64), ir.Constant(I64, f.offset))
        p = self.gep(hdr, off)
        v = self.rv(value, T.U8)
        if op != "=":
            old = self.b.load(p, typ=I8, align=1)
            v = self.binop(op[:-1], old, v, False)
        if layout.csum is None:
            self.b.store(v, p, align=1)
            return
        wp = self.gep(hdr, self.b.and_(off, ir.Constant(I64, ~1 & 0xFFFFFFFFFFFFFFFF)))
        old_w = self.b.load(wp, typ=I16, align=2)
        self.b.store(v, p, align=1)
        new_w = self.b.load(wp, typ=I16, align=2)
        self.csum_update(self.gep(hdr, layout.csum), [old_w], [new_w], layout.zero_ok)

    def store_header_field(self, tgt: ast.Field, op: str, value: ast.Expr) -> None:
        assert isinstance(tgt.obj.ty, T.HeaderType)
        layout = tgt.obj.ty.layout
        f = layout.fields[tgt.name]
        hdr = self.gen(tgt.obj)
        p = self.gep(hdr, f.offset)
        size = f.size
        lo, hi = f.offset & ~1, (f.offset + size + 1) & ~1
        own = layout.csum is not None and not (lo <= layout.csum < hi)
        kinds = PSEUDO_FIELDS.get(layout.name, {}).get(tgt.name, ())
        l4 = self._related_l4(tgt.obj, kinds) if kinds else []
        if f.width:  # a bit field: read, insert, write its window
            old_w = self._words(hdr, lo, hi) if own else []
            self.store_bits(hdr, f, op, value)
            if own:
                new_w = self._words(hdr, lo, hi)
                self.csum_update(self.gep(hdr, layout.csum), old_w, new_w, layout.zero_ok)
            return
        k = self._byte_step(f, op, value) if own and not kinds and not layout.zero_ok else 0
        if k:  # ttl -= 1 and the like: the constant's own checksum addend
            assert layout.csum is not None  # own
            old = self.b.load(p, typ=I8, align=1)
            new = self.csum_byte_delta(self.gep(hdr, layout.csum), f.offset, k, old)
            self.b.store(new, p, align=1)
            return
        if isinstance(f.type, T.IntType):
            v = self.rv(value, f.type)
            if op != "=":
                old = self.b.load(p, typ=v.type, align=size)
                signed = getattr(f.type, "signed", False)
                v = self.binop(op[:-1], old, v, signed)
        old_w = self._words(hdr, lo, hi) if own or l4 != [] else []
        if isinstance(f.type, T.IntType):
            self.b.store(v, p, align=size)
        else:
            # the field's alignment in its header (a MAC from fib.dmac: three u16 moves)
            self.store_bytes(p, value, f.type, 2 if f.type == T.MAC else max(1, f.type.align))
        if not old_w:
            return
        new_w = self._words(hdr, lo, hi)
        if own:
            # udp.len is in the UDP header and (as the UDP length) in its pseudo-header
            twice = layout.name == "udp" and tgt.name == "len"
            old_w, new_w = (old_w * 2, new_w * 2) if twice else (old_w, new_w)
            self.csum_update(self.gep(hdr, layout.csum), old_w, new_w, layout.zero_ok)
        if kinds:
            v6 = layout.name == "ipv6"
            rh = False if v6 and tgt.name == "daddr" else None
            self.pseudo_update(tgt.obj, l4, hdr, v6, kinds, old_w, new_w, rh)

    def _byte_step(self, f: HField, op: str, value: ast.Expr) -> int:
        """``k`` (1..255) if writing u8 field ``f`` with ``op value`` is ``f -= k`` modulo
        256 (``f += n`` is ``f -= 256 - n``) for a constant ``value``; else 0."""
        n = self.c.cval.get(value)
        if op not in ("+=", "-=") or n is None or f.width or f.type.size != 1:
            return 0
        if getattr(f.type, "signed", False) or not isinstance(f.type, T.IntType):
            return 0
        return (-n if op == "+=" else n) % 256
