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
from bpfdsl.backend.codegen.csum import CsumGen
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import (
    CTX_DATA,
    CTX_FIELDS,
    HEADERS,
    IPV6_EXT_HEADERS,
    IPV6_EXT_MAX,
    PSEUDO_FIELDS,
)
from bpfdsl.lang.sema.symbols import BUILTINS, PKT_RESIZE

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()


class _VolatileLoad(ir.LoadInstr):
    """``load volatile`` (llvmlite's LoadInstr has no volatile flag)."""

    def descr(self, buf: list[str]) -> None:
        inner: list[str] = []
        super().descr(inner)
        buf.append("".join(inner).replace("load ", "load volatile ", 1))


class PktGen(CsumGen):
    def ctx_u32(self, off: int) -> ir.Value:
        return self.b.load(self.gep(self.f.ctx, off), typ=I32, align=4)

    def _ctx_ptr(self, which: int, volatile: bool = False) -> ir.Value:
        """data (0) or data_end (1) of the context as a packet pointer, loaded the way
        clang does: u32 + zext + inttoptr for xdp_md, a 64-bit pointer for sk_msg_md.
        ``volatile``: a fresh load LLVM may not treat as loop-invariant (see bounds())."""
        off = CTX_DATA[self.f.kind.ctx][which]
        wide = CTX_DATA[self.f.kind.ctx][2] == 8
        ptr = self.gep(self.f.ctx, off)
        if volatile:
            v = _VolatileLoad(self.b.block, ptr, typ=PTR if wide else I32)
            v.align = 8 if wide else 4
            self.b._insert(v)
        elif wide:
            return self.b.load(ptr, typ=PTR, align=8)
        else:
            v = self.b.load(ptr, typ=I32, align=4)
        return v if wide else self.b.inttoptr(self.b.zext(v, I64), PTR)

    def opaque(self, v: ir.Value) -> ir.Value:
        """``v`` through an empty inline asm (libbpf's ``barrier_var``): an opaque 64-bit
        scalar.  Without it LLVM reassociates e.g. ``7 + (data_end - data)`` into arithmetic
        on the pointers and narrows it to 32 bits, in IR and again in instruction selection
        (verifier: "32-bit pointer arithmetic prohibited", FIELD-BUGS B04; found by program
        fuzzing).  ``llvm.bpf.passthrough`` is not enough: it is gone before ISel."""
        asm = ir.InlineAsm(ir.FunctionType(I64, [I64]), "", "=r,0", side_effect=True)
        return self.b.call(asm, [v])

    def pkt_data(self) -> ir.Value:
        return self._ctx_ptr(0)

    def pkt_end(self) -> ir.Value:
        return self._ctx_ptr(1)

    def ctx_field(self, name: str) -> ir.Value:
        off, ty, access = CTX_FIELDS[self.f.kind.ctx][name]
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
            return self.parse(e.header, fail)
        if isinstance(e, ast.Call) and e.name == "skip_ext":
            return self.skip_ext(e, fail)
        if isinstance(e, (ast.MethodCall, ast.Name)):  # a lookup, a nullable argument
            p = self.map_lookup(e) if isinstance(e, ast.MethodCall) else self.gen(e)
            ok = self.new_block("found")
            self.b.cbranch(self.b.icmp_unsigned("==", p, ir.Constant(PTR, None)), fail, ok)
            self.start(ok)
            return p
        raise AssertionError("codegen: optional")

    def bounds(self, p: ir.Value, size: int, fail: ir.Block, name: str) -> None:
        """Branch to ``fail`` if ``p + size > data_end`` (pointer compare, verifier shape)."""
        ok = self.new_block(f"{name}.ok")
        end = self.gep(p, size)
        # In a loop, LLVM's loop passes may rewrite pointer compares against a loop-invariant
        # data_end into integer arithmetic on data_end (found by fuzzing: the verifier then
        # loses the packet range, FIELD-BUGS B06).  A volatile load per check prevents it.
        data_end = self._ctx_ptr(1, volatile=bool(self.f.loops))
        self.b.cbranch(self.b.icmp_unsigned(">", end, data_end), fail, ok)
        self.start(ok)

    def parse(self, header: str, fail: ir.Block) -> ir.Value:
        h = HEADERS[header]
        cur = self.b.load(self.f.cursor, typ=PTR)
        self.bounds(cur, h.size, fail, header)
        if h.length is None:
            nxt = self.gep(cur, h.size)
        else:
            off, shift = (0, 0) if h.length == "ihl" else (12, 4)
            byte = self.b.load(self.gep(cur, off), typ=I8, align=1)
            n = self.b.and_(
                self.b.lshr(byte, ir.Constant(I8, shift)) if shift else byte, ir.Constant(I8, 0xF)
            )
            ok = self.new_block(f"{header}.len")
            self.b.cbranch(self.b.icmp_unsigned("<", n, ir.Constant(I8, 5)), fail, ok)
            self.start(ok)
            ln = self.b.shl(self.b.zext(n, I64), ir.Constant(I64, 2))
            nxt = self.gep(cur, ln)
        self.b.store(nxt, self.f.cursor)
        return cur

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
        EXT_LATER_FRAG; see codegen_csum)."""
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
        params = BUILTINS[e.name][0]
        args = [self.rv(a, t) for a, t in zip(e.args, params, strict=True)]
        r = self.helper(hid, I64, [self.f.ctx, *args])
        self.b.store(self.pkt_data(), self.f.cursor)
        return r

    # ---- fields ----
    def header_field_ptr(self, e: ast.Field) -> ir.Value:
        f = e.obj.ty.layout.fields[e.name]
        return self.gep(self.gen(e.obj), f.offset)

    def load_header_field(self, e: ast.Field) -> ir.Value:
        f = e.obj.ty.layout.fields[e.name]
        p = self.gep(self.gen(e.obj), f.offset)
        if not isinstance(f.type, T.IntType):
            return p
        v = self.b.load(p, typ=self.lt(f.type), align=f.type.size)
        if f.width:
            if f.shift:
                v = self.b.lshr(v, ir.Constant(v.type, f.shift))
            v = self.b.and_(v, ir.Constant(v.type, (1 << f.width) - 1))
        return v

    def store_header_field(self, tgt: ast.Field, op: str, value: ast.Expr) -> None:
        layout = tgt.obj.ty.layout
        f = layout.fields[tgt.name]
        hdr = self.gen(tgt.obj)
        p = self.gep(hdr, f.offset)
        size = f.type.size
        lo, hi = f.offset & ~1, (f.offset + size + 1) & ~1
        own = layout.csum is not None and not (lo <= layout.csum < hi)
        kinds = PSEUDO_FIELDS.get(layout.name, {}).get(tgt.name, ())
        l4 = self._related_l4(tgt.obj, kinds) if kinds else []
        if isinstance(f.type, T.IntType):
            v = self.rv(value, f.type)
            if op != "=":
                old = self.b.load(p, typ=v.type, align=size)
                signed = getattr(f.type, "signed", False)
                v = self.binop(op[:-1], old, v, signed, isinstance(v, ir.Constant))
        old_w = self._words(hdr, lo, hi) if own or l4 != [] else []
        if isinstance(f.type, T.IntType):
            self.b.store(v, p, align=size)
        else:
            self.store_bytes(p, value, f.type, 2 if f.type == T.MAC else f.type.align)
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
