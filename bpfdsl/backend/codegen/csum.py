"""Checksum updates of header writes (back end mixin of :class:`bpfdsl.backend.codegen.generator.CodeGen`,
base of :class:`bpfdsl.backend.codegen.pkt.PktGen`): RFC 1624 eqn. 3 incremental updates, and the
L4 pseudo-header (RFC 768, RFC 793, RFC 8200 8.1) -- the L4 header in scope or found in
the packet at run time, IPv6 extension headers walked for a Routing header with segments
left (the pseudo-header then holds its final destination, not ``ip6.daddr``) and later
fragments (no L4 header in them).
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.backend.codegen.host import GenHost
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import HEADERS, L4_PROTO
from bpfdsl.lang.layout import Header
from bpfdsl.lang.sema.symbols import Local

I8, I16, I32, I64 = (ir.IntType(n) for n in (8, 16, 32, 64))
PTR = ir.PointerType()


def byte_delta_addends(offset: int, k: int) -> tuple[int, int]:
    """For ``f -= k`` (1 <= k <= 255) on a u8 header field at byte ``offset`` of the
    header, the addends ``(d, d_wrap)`` that turn its checksum into the updated one, without
    and with the byte wrapping (old value < k): ``HC' = HC + d`` in one's complement (RFC 1624
    eqn. 3: ``HC' = ~(~HC + ~m + m')`` is ``HC - (m' - m)``), on the checksum as loaded
    little-endian (the network-order addend byte-swapped: one's complement sums do not depend
    on byte order, RFC 1071 2.(B)).  The byte has weight 256 at an even offset (high byte of
    its network-order word), 1 at an odd one; m' - m is -k, or 256 - k when it wraps.  Both
    are in 1..0xfffe, so ``c = HC + d`` and ``c + ((c + 1) >> 16)`` (truncated to 16 bits)
    is the end-around-carry sum with zero as 0x0000, as eqn. 3 and a full recomputation give
    it (ip_decrease_ttl, include/net/ip.h: ttl - 1 at offset 8 is d = htons(0x0100))."""
    assert 1 <= k <= 255
    w = 256 if offset % 2 == 0 else 1

    def le(change: int) -> int:
        be = (-change * w) % 0xFFFF
        return ((be & 0xFF) << 8) | (be >> 8)

    return le(-k), le(256 - k)


class CsumGen(GenHost):
    EXT_RH_ACTIVE = 1  # a Routing header with segments_left != 0 (RFC 8200 4.4)
    EXT_LATER_FRAG = 2  # a Fragment header with a non-zero offset: no L4 header follows

    def _ext_bits(self, nh: ir.Value, cur: ir.Value, branch_free: bool) -> ir.Value:
        """The EXT_* bits (i8) of extension header ``cur`` (8 bytes checked, next header
        value ``nh``): a Routing header (43) whose segments_left (byte 3) is not 0, or a
        Fragment header (44) whose 13-bit offset (the be16 at byte 2 without its low 3
        bits) is not 0.  ``branch_free`` for bits carried on through the walk: BPF has no
        set-on-condition, so compares would split every verifier path per header walked;
        for 0 <= v <= 0xffff, ``(v + 0xffff) >> 16`` is ``v != 0``, and the inputs pass an
        opaque register so LLVM cannot turn that back into a compare.  Compares are
        cheaper where the bits only decide an exit from the walk (and let LLVM unroll it)."""
        b = self.b
        segs = b.load(self.gep(cur, 3), typ=I8, align=1)
        off = b.and_(b.load(self.gep(cur, 2), typ=I16, align=2), ir.Constant(I16, 0xF8FF))
        if not branch_free:  # (the be16 offset loaded as le: mask 0xfff8)
            bit = lambda c, v: b.select(c, ir.Constant(I8, v), ir.Constant(I8, 0))  # noqa: E731
            ne0 = lambda v: b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))  # noqa: E731
            is_ = lambda k: b.icmp_unsigned("==", nh, ir.Constant(I8, k))  # noqa: E731
            rh = bit(b.and_(is_(43), ne0(segs)), self.EXT_RH_ACTIVE)
            return b.or_(rh, bit(b.and_(is_(44), ne0(off)), self.EXT_LATER_FRAG))

        def nz(v: ir.Value) -> ir.Value:
            return b.lshr(b.add(v, ir.Constant(I64, 0xFFFF)), ir.Constant(I64, 16))

        one = ir.Constant(I64, 1)
        kind = self._pure_opaque(b.zext(nh, I64))
        is43 = b.xor(nz(b.xor(kind, ir.Constant(I64, 43))), one)
        is44 = b.xor(nz(b.xor(kind, ir.Constant(I64, 44))), one)
        rh = b.and_(is43, nz(self._pure_opaque(b.zext(segs, I64))))
        later = b.and_(is44, nz(self._pure_opaque(b.zext(off, I64))))
        return b.trunc(b.or_(rh, b.shl(later, one)), I8)  # EXT_RH_ACTIVE, EXT_LATER_FRAG

    def _pure_opaque(self, v: ir.Value) -> ir.Value:
        """``v`` (i64) through an empty inline asm without side effects: LLVM cannot see
        its value (so keeps the arithmetic on it) but drops it when unused."""
        return self.opaque(v, side_effect=False)

    def _rh_branch(self, ip6: ir.Value, rh: bool, yes: ir.Block, no: ir.Block) -> None:
        """Branch to ``yes`` if whether a Routing header with segments left follows the
        ipv6 header at ``ip6`` is ``rh``, else to ``no`` (walked like skip_ext, the cursor
        left where it was; a walk that gives up counts as none found).  The walk stops at
        such a header: no value is carried through it, so verifier states stay few."""
        saved = self.b.load(self.f.cursor, typ=PTR)
        self.b.store(self.gep(ip6, 40), self.f.cursor)
        found, none = self.new_block("rh.found"), self.new_block("rh.none")
        self.ext_walk(ip6, none, stop=self.EXT_RH_ACTIVE, stop_to=found)
        self.b.branch(none)
        for blk, to in ((found, yes if rh else no), (none, no if rh else yes)):
            self.start(blk)
            self.b.store(saved, self.f.cursor)
            self.b.branch(to)

    def _words(self, base: ir.Value, lo: int, hi: int) -> list[ir.Value]:
        return [self.b.load(self.gep(base, o), typ=I16, align=2) for o in range(lo, hi, 2)]

    def _related_l4(
        self, ip_obj: ast.Expr, kinds: tuple[str, ...]
    ) -> list[tuple[Header, ir.Value]] | None:
        """L4 headers in scope parsed after the IP header ``ip_obj`` whose checksum covers
        a pseudo-header field of kind ``kinds``: [(layout, pointer)]; None if no L4 header
        parsed after it is in scope (the L4 header is then found at run time)."""
        ip = self.c.sym.get(ip_obj) if isinstance(ip_obj, ast.Name) else None
        out: list[tuple[Header, ir.Value]] = []
        seen = False
        for scope in self.env if ip is not None else ():
            for loc, slot in scope.items():
                if (
                    isinstance(loc, Local)
                    and isinstance(loc.ty, T.HeaderType)
                    and loc.header_parent is ip
                    and loc.ty.layout.l4
                ):
                    seen = True
                    if loc.ty.layout.name in kinds:
                        out.append((loc.ty.layout, self.b.load(slot, typ=PTR)))
        return out if seen else None

    def _keep(self, flags: ir.Value, rh: bool | None) -> ir.Value:
        """csum_update's ``keep`` (opaque i64 0/1) for rule ``rh`` (see pseudo_update) and
        walk ``flags``: rh=False keeps the sum if EXT_RH_ACTIVE is set, rh=True if not; and
        always in a later fragment (EXT_LATER_FRAG: what follows is payload, no L4 header)."""
        f = self.b.zext(flags, I64)
        one = ir.Constant(I64, 1)
        keep = self.b.and_(self.b.lshr(f, one), one)  # EXT_LATER_FRAG (bit 1)
        if rh is not None:
            bit = self.b.and_(f, ir.Constant(I64, self.EXT_RH_ACTIVE))
            keep = self.b.or_(keep, self.b.xor(bit, one) if rh else bit)
        return self._pure_opaque(keep)

    def _ipv4_later_fragment(self, ip: ir.Value) -> ir.Value:
        """csum_update's ``keep`` (opaque i64 0/1) for the IPv4 header at ``ip``: 1 in a
        fragment other than the first (fragment offset != 0: the bytes after the header are
        payload, not an L4 header), without a branch: ``(off + 0xffff) >> 16`` is ``off != 0``
        for a 16-bit ``off``."""
        frag = self.b.load(self.gep(ip, 6), typ=I16, align=2)  # be16 loaded as le
        off = self._pure_opaque(self.b.zext(self.b.and_(frag, ir.Constant(I16, 0xFF1F)), I64))
        nz = self.b.lshr(self.b.add(off, ir.Constant(I64, 0xFFFF)), ir.Constant(I64, 16))
        return self._pure_opaque(nz)

    def ext_flags_slot(self, ip_obj: ast.Expr) -> ir.Value | None:
        """The i8 slot (0 at function entry) where ``skip_ext(ip_obj)`` leaves the EXT_*
        flags of the headers it walked, so a checksum update for an L4 header parsed after
        it need not walk them again; None if ``ip_obj`` is not a named ipv6 view."""
        loc = self.c.sym.get(ip_obj) if isinstance(ip_obj, ast.Name) else None
        if not isinstance(loc, Local):
            return None
        slots = self.f.ext_flag_slots
        if loc not in slots:
            slot = self.alloca(I8, "ext.flags." + loc.name, 1)
            eb = ir.IRBuilder(self.f.entry)
            eb.position_after(slot)
            eb.store(ir.Constant(I8, 0), slot)
            slots[loc] = slot
        return slots[loc]

    def pseudo_update(
        self,
        ip_obj: ast.Expr,
        l4: list[tuple[Header, ir.Value]] | None,
        hdr: ir.Value,
        v6: bool,
        kinds: tuple[str, ...],
        old_w: list[ir.Value],
        new_w: list[ir.Value],
        rh: bool | None = None,
    ) -> None:
        """Update the checksums of the L4 headers (of ``kinds``) after the IP header ``hdr``
        (the view ``ip_obj``) for pseudo-header words ``old_w`` -> ``new_w``: those in
        scope, ``l4`` (from _related_l4), or if None the one found at run time.  ``rh``: None,
        always; False, only when no Routing header with segments_left != 0 follows (IPv6
        ``daddr``: RFC 8200 8.1, the pseudo-header then holds the final destination, the
        last address of the Routing header, which the write does not change); True, only
        when one does."""
        if l4 is None:
            self._runtime_l4(hdr, v6, kinds, old_w, new_w, rh)
            return
        if not l4:
            return
        done = keep = None
        ip = self.c.sym.get(ip_obj)
        slot = self.f.ext_flag_slots.get(ip) if isinstance(ip, Local) else None
        if not v6:  # the view follows the header, but a later fragment holds no L4 header
            keep = self._ipv4_later_fragment(hdr)
        elif slot is not None:  # what skip_ext passed on the way to the L4 header; no
            keep = self._keep(self.b.load(slot, typ=I8), rh)  # branch: a path per outcome
        elif rh is not None:  # else a walk
            go, done = self.new_block("pseudo.rh"), self.new_block("pseudo.done")
            self._rh_branch(hdr, rh, go, done)
            self.start(go)
        for l4layout, l4ptr in l4:
            cp = self.gep(l4ptr, l4layout.csum)
            self.csum_update(cp, old_w, new_w, l4layout.zero_ok, keep)
        if done is not None:
            self.b.branch(done)
            self.start(done)

    def _runtime_l4(
        self,
        ip: ir.Value,
        v6: bool,
        kinds: tuple[str, ...],
        old_w: list[ir.Value],
        new_w: list[ir.Value],
        rh: bool | None,
    ) -> None:
        """Pseudo-header update when no L4 header of this IP header is in scope: find it
        from the packet (IPv4: protocol, not a later fragment, ihl*4 on; IPv6: walk the
        extension headers like skip_ext, not in a later fragment, ``rh`` as in
        pseudo_update) and update its checksum if it is one of ``kinds`` and lies inside
        the packet.  Beyond IPV6_EXT_MAX extension headers: no update."""
        done = self.new_block("pseudo.done")
        if v6:
            saved = self.b.load(self.f.cursor, typ=PTR)
            self.b.store(self.gep(ip, 40), self.f.cursor)
            # no L4 header in a later fragment; no update where ``rh`` rules it out: both
            # end the walk (no flag carried); only rh=True needs to remember a header
            stop = self.EXT_LATER_FRAG | (self.EXT_RH_ACTIVE if rh is False else 0)
            flags = self.alloca(I8, "ext.flags", 1) if rh else None
            if flags is not None:
                self.b.store(ir.Constant(I8, 0), flags)
            proto = self.ext_walk(ip, done, flags, stop, done)
            l4 = self.b.load(self.f.cursor, typ=PTR)
            if flags is not None:  # update only if a routing header was passed
                go = self.new_block("pseudo.l4")
                rh_bit = self.b.and_(
                    self.b.load(flags, typ=I8), ir.Constant(I8, self.EXT_RH_ACTIVE)
                )
                self.b.cbranch(self.b.icmp_unsigned("!=", rh_bit, ir.Constant(I8, 0)), go, done)
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
            assert h.csum is not None  # an L4 header with a pseudo-header checksum
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

    def csum_update(
        self,
        cp: ir.Value,
        old: list[ir.Value],
        new: list[ir.Value],
        zero_ok: bool,
        keep: ir.Value | None = None,
    ) -> None:
        """RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m') over 16-bit words (byte-order neutral).
        ``keep``: an opaque i64, 1 to leave HC as it is, 0 to update (chosen without a
        branch: ``HC' ^= (HC' ^ HC) & (-keep & 0xffff)``)."""
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
        if keep is not None:
            m = b.trunc(b.sub(ir.Constant(I64, 0), keep), I16)
            r = b.xor(r, b.and_(b.xor(r, hc), m))
        b.store(r, cp, align=2)
        if skip is not None:
            b.branch(skip)
            self.start(skip)

    def csum_byte_delta(self, cp: ir.Value, offset: int, k: int, old: ir.Value) -> ir.Value:
        """``f -= k`` on the u8 field at header byte ``offset`` whose value is ``old`` (i8),
        with the checksum at ``cp`` updated by ``byte_delta_addends``' short form (~9 insns
        where the general update takes ~18); returns the new value (i8) to store.  The byte
        wraps iff ``old - k`` is negative: bit 63 of the 64-bit difference, whose low byte
        is the new value, picks the addend without a branch (as ``select`` it would be a
        jump, and the verifier would walk the rest of the program twice)."""
        b = self.b
        d, dw = byte_delta_addends(offset, k)
        diff = b.sub(b.zext(old, I64), ir.Constant(I64, k))
        # opaque: else LLVM sees the bit is ``old < k`` and makes the mul a select (a jump)
        wrapped = self._pure_opaque(b.lshr(diff, ir.Constant(I64, 63)))
        add = b.add(ir.Constant(I64, d), b.mul(wrapped, ir.Constant(I64, dw - d)))
        c = b.add(b.zext(b.load(cp, typ=I16, align=2), I64), add)
        c = b.add(c, b.lshr(b.add(c, ir.Constant(I64, 1)), ir.Constant(I64, 16)))
        b.store(b.trunc(c, I16), cp, align=2)
        return b.trunc(diff, I8)
