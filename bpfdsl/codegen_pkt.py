"""Packet access lowering (back end mixin of :class:`bpfdsl.codegen.CodeGen`).

``parse H`` reads the cursor (a packet pointer), checks ``cursor + size > data_end`` on
64-bit pointers (the shape the verifier accepts; never arithmetic on data_end, never
32-bit ALU on pointers: FIELD-BUGS B04/B06), then advances the cursor by the header's
length (ipv4: ihl*4 with ihl >= 5; tcp: doff*4 with doff >= 5).  data/data_end are
loaded from ``struct xdp_md`` (u32 at offsets 0/4, zero-extended, as clang does) at each
use, so after adjust_head/adjust_tail (which reset the cursor to data) they are fresh.
Header field writes update checksums incrementally per RFC 1624 eqn. 3: the IPv4 header
checksum, the L4 checksum for port writes, and the L4 pseudo-header checksum for IP
address writes (UDP: a zero checksum stays zero, a computed zero becomes 0xffff).  An
IPv6 ``daddr`` write updates the L4 checksum only if no Routing header with segments left
follows (RFC 8200 8.1: the pseudo-header then holds the final destination), checked at
run time by walking the extension headers.
"""

from __future__ import annotations

from llvmlite import ir

from . import ast
from . import types as T
from .headers import CTX_DATA, CTX_FIELDS, IPV6_EXT_HEADERS, IPV6_EXT_MAX, PSEUDO_FIELDS
from .helpers import HELPERS

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()


class _VolatileLoad(ir.LoadInstr):
    """``load volatile`` (llvmlite's LoadInstr has no volatile flag)."""

    def descr(self, buf: list[str]) -> None:
        inner: list[str] = []
        super().descr(inner)
        buf.append("".join(inner).replace("load ", "load volatile ", 1))


class PktGen:
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
        """Emit ``e`` (parse, lookup, skip_ext); branch to ``fail`` when missing; return the
        payload on the fall-through path."""
        if isinstance(e, ast.Parse):
            return self.parse(e.header, fail)
        if isinstance(e, ast.Call) and e.name == "skip_ext":
            return self.skip_ext(e, fail)
        if isinstance(e, ast.MethodCall):
            p = self.map_lookup(e)
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
        from .headers import HEADERS

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
        upper-layer protocol number (u8); missing if truncated or too many headers."""
        return self.ext_walk(self.gen(e.args[0]), fail)

    def ext_walk(self, ip6: ir.Value, fail: ir.Block, flags: ir.Value | None = None) -> ir.Value:
        """The walk of :meth:`skip_ext` from the cursor (just past the ipv6 header at
        ``ip6``); leaves the cursor at the upper-layer header; returns its protocol (u8).
        ``flags`` (an i8 slot, set to 0 by the caller) collects what the walk passed:
        EXT_RH_ACTIVE, EXT_LATER_FRAG."""
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
            self._ext_flags(flags, nh, cur, is_frag)
        self.b.store(self.gep(cur, ln), self.f.cursor)
        self.b.store(nxt_hdr, nh_slot)
        self.b.store(self.b.add(self.b.load(cnt), ir.Constant(I32, 1)), cnt)
        self.b.branch(head)
        self.start(done)
        return self.b.load(nh_slot)

    EXT_RH_ACTIVE = 1  # a Routing header with segments_left != 0 (RFC 8200 4.4)
    EXT_LATER_FRAG = 2  # a Fragment header with a non-zero offset: no L4 header follows

    def _ext_flags(self, flags: ir.Value, nh: ir.Value, cur: ir.Value, is_frag: ir.Value) -> None:
        """``flags |=`` what extension header ``cur`` (8 bytes checked, next header value
        ``nh``) is: a Routing header (43) whose segments_left (byte 3) is not 0, or a
        Fragment header (44) whose 13-bit offset (the be16 at byte 2 without its low 3
        bits) is not 0."""
        b = self.b
        segs = b.load(self.gep(cur, 3), typ=I8, align=1)
        rh = b.and_(
            b.icmp_unsigned("==", nh, ir.Constant(I8, 43)),
            b.icmp_unsigned("!=", segs, ir.Constant(I8, 0)),
        )
        off = b.load(self.gep(cur, 2), typ=I16, align=2)  # be16 loaded as le: mask 0xfff8
        later = b.and_(
            is_frag,
            b.icmp_unsigned("!=", b.and_(off, ir.Constant(I16, 0xF8FF)), ir.Constant(I16, 0)),
        )
        bits = b.or_(
            b.select(rh, ir.Constant(I8, self.EXT_RH_ACTIVE), ir.Constant(I8, 0)),
            b.select(later, ir.Constant(I8, self.EXT_LATER_FRAG), ir.Constant(I8, 0)),
        )
        b.store(b.or_(b.load(flags, typ=I8), bits), flags)

    def _walk_flags(self, ip6: ir.Value) -> ir.Value:
        """The EXT_* flags (u8) of the extension headers after the ipv6 header at ``ip6``
        (walked like skip_ext, the cursor left where it was); when the walk gives up
        (packet cut short, more than IPV6_EXT_MAX headers) what it passed until then."""
        flags = self.alloca(I8, "ext.flags", 1)
        self.b.store(ir.Constant(I8, 0), flags)
        saved = self.b.load(self.f.cursor, typ=PTR)
        self.b.store(self.gep(ip6, 40), self.f.cursor)
        end = self.new_block("ext.end")
        self.ext_walk(ip6, end, flags)
        self.b.branch(end)
        self.start(end)
        self.b.store(saved, self.f.cursor)
        return self.b.load(flags, typ=I8)

    def resize(self, e: ast.Call) -> ir.Value:
        """adjust_head/tail/meta, msg_pull/push/pop_data: the helper call, then cursor = data
        (every earlier packet pointer is invalid: bpf_helper_changes_pkt_data)."""
        from .sema_expr import BUILTINS, PKT_RESIZE

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

    def _words(self, base: ir.Value, lo: int, hi: int) -> list[ir.Value]:
        return [self.b.load(self.gep(base, o), typ=I16, align=2) for o in range(lo, hi, 2)]

    def _related_l4(self, ip_obj: ast.Expr, kinds: tuple[str, ...]) -> list | None:
        """L4 headers in scope parsed after the IP header ``ip_obj`` whose checksum covers
        a pseudo-header field of kind ``kinds``: [(layout, pointer)]; None if no L4 header
        parsed after it is in scope (the L4 header is then found at run time)."""
        from .sema import Local

        ip = self.c.sym.get(ip_obj) if isinstance(ip_obj, ast.Name) else None
        out, seen = [], False
        for scope in self.env if ip is not None else ():
            for loc, slot in scope.items():
                if isinstance(loc, Local) and loc.header_parent is ip and loc.ty.layout.l4:
                    seen = True
                    if loc.ty.layout.name in kinds:
                        out.append((loc.ty.layout, self.b.load(slot, typ=PTR)))
        return out if seen else None

    def _rh_test(self, flags: ir.Value, mask: int, rh: bool | None) -> ir.Value:
        """i1: ``flags & mask`` is what an update of rule ``rh`` needs (see pseudo_update)."""
        want = self.EXT_RH_ACTIVE if rh else 0
        mask |= self.EXT_RH_ACTIVE if rh is not None else 0
        masked = self.b.and_(flags, ir.Constant(I8, mask))
        return self.b.icmp_unsigned("==", masked, ir.Constant(I8, want))

    def pseudo_update(
        self,
        l4: list | None,
        hdr: ir.Value,
        v6: bool,
        kinds: tuple[str, ...],
        old_w,
        new_w,
        rh: bool | None = None,
    ) -> None:
        """Update the checksums of the L4 headers (of ``kinds``) after the IP header ``hdr``
        for pseudo-header words ``old_w`` -> ``new_w``: those in scope, ``l4`` (from
        _related_l4), or if None the one found at run time.  ``rh``: None,
        always; False, only when no Routing header with segments_left != 0 follows (IPv6
        ``daddr``: RFC 8200 8.1, the pseudo-header then holds the final destination, the
        last address of the Routing header, which the write does not change); True, only
        when one does."""
        if l4 is None:
            self._runtime_l4(hdr, v6, kinds, old_w, new_w, rh)
            return
        if not l4:
            return
        done = None
        if rh is not None:
            go, done = self.new_block("pseudo.rh"), self.new_block("pseudo.done")
            self.b.cbranch(self._rh_test(self._walk_flags(hdr), 0, rh), go, done)
            self.start(go)
        for l4layout, l4ptr in l4:
            self.csum_update(self.gep(l4ptr, l4layout.csum), old_w, new_w, l4layout.zero_ok)
        if done is not None:
            self.b.branch(done)
            self.start(done)

    def _runtime_l4(
        self, ip: ir.Value, v6: bool, kinds: tuple[str, ...], old_w, new_w, rh: bool | None
    ) -> None:
        """Pseudo-header update when no L4 header of this IP header is in scope: find it
        from the packet (IPv4: protocol, not a later fragment, ihl*4 on; IPv6: walk the
        extension headers like skip_ext, not in a later fragment, ``rh`` as in
        pseudo_update) and update its checksum if it is one of ``kinds`` and lies inside
        the packet.  Beyond IPV6_EXT_MAX extension headers: no update."""
        from .headers import HEADERS, L4_PROTO

        done = self.new_block("pseudo.done")
        if v6:
            saved = self.b.load(self.f.cursor, typ=PTR)
            self.b.store(self.gep(ip, 40), self.f.cursor)
            flags = self.alloca(I8, "ext.flags", 1)
            self.b.store(ir.Constant(I8, 0), flags)
            proto = self.ext_walk(ip, done, flags)
            l4 = self.b.load(self.f.cursor, typ=PTR)
            go = self.new_block("pseudo.l4")
            test = self._rh_test(self.b.load(flags, typ=I8), self.EXT_LATER_FRAG, rh)
            self.b.cbranch(test, go, done)
            self.start(go)
        else:
            proto = self.b.load(self.gep(ip, 9), typ=I8, align=1)
            frag = self.b.load(self.gep(ip, 6), typ=I16, align=2)  # be16 loaded as le
            first = self.new_block("pseudo.first")
            later = self.b.icmp_unsigned(
                "!=", self.b.and_(frag, ir.Constant(I16, 0xFF1F)), ir.Constant(I16, 0)
            )
            self.b.cbranch(later, done, first)
            self.start(first)
            ihl = self.b.and_(self.b.load(ip, typ=I8, align=1), ir.Constant(I8, 0xF))
            l4 = self.gep(ip, self.b.shl(self.b.zext(ihl, I64), ir.Constant(I64, 2)))
        for k in kinds:
            h = HEADERS[k]
            hit, nxt = self.new_block(f"pseudo.{k}"), self.new_block("pseudo.next")
            self.b.cbranch(
                self.b.icmp_unsigned("==", proto, ir.Constant(I8, L4_PROTO[k])), hit, nxt
            )
            self.start(hit)
            self.bounds(l4, h.csum + 2, done, f"pseudo.{k}")
            self.csum_update(self.gep(l4, h.csum), old_w, new_w, h.zero_ok)
            self.b.branch(done)
            self.start(nxt)
        self.b.branch(done)
        self.start(done)
        if v6:
            self.b.store(saved, self.f.cursor)

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
            self.pseudo_update(l4, hdr, v6, kinds, old_w, new_w, rh)

    def csum_update(
        self, cp: ir.Value, old: list[ir.Value], new: list[ir.Value], zero_ok: bool
    ) -> None:
        """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') over 16-bit words (byte-order neutral)."""
        b = self.b
        hc = b.load(cp, typ=I16, align=2)
        skip = None
        if zero_ok:
            do, skip = self.new_block("csum.do"), self.new_block("csum.done")
            b.cbranch(b.icmp_unsigned("==", hc, ir.Constant(I16, 0)), skip, do)
            self.start(do)
        s = b.zext(b.not_(hc), I32)
        for w in old:
            s = b.add(s, b.zext(b.not_(w), I32))
        for w in new:
            s = b.add(s, b.zext(w, I32))
        for _ in range(2):
            s = b.add(b.and_(s, ir.Constant(I32, 0xFFFF)), b.lshr(s, ir.Constant(I32, 16)))
        r = b.trunc(b.not_(s), I16)
        if zero_ok:
            r = b.select(b.icmp_unsigned("==", r, ir.Constant(I16, 0)), ir.Constant(I16, 0xFFFF), r)
        b.store(r, cp, align=2)
        if skip is not None:
            b.branch(skip)
            self.start(skip)
