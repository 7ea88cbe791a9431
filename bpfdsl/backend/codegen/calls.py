"""Calls lowering (back end mixin of :class:`bpfdsl.backend.codegen.generator.CodeGen`): helper calls the way
clang makes them (through ``inttoptr (i64 ID to ptr)``), struct constructors, inlined fns,
byte-order conversions, redirect/resize/socket helpers, ``swap`` and the FNV-1a ``hash``.
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.abi.flags import BPF_F_CURRENT_CPU
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.kfuncs import BY_BUILTIN as KFUNC_BUILTINS
from bpfdsl.abi.limits import MAX_PACKET_OFF
from bpfdsl.backend.codegen.expr import copy_chunks
from bpfdsl.backend.codegen.helpers import TYPED_HELPERS
from bpfdsl.backend.codegen.host import GenHost
from bpfdsl.backend.llvm_ext import KsymDecl
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import PSEUDO_FIELDS
from bpfdsl.lang.sema.symbols import BUILTINS, Local

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()


def _padded_width(st: T.StructType, name: str) -> int:
    """The bytes a constructor stores for integer field ``name`` of ``st``: its size, or
    2/4/8 when the field is followed by padding up to that aligned width (the field
    zero-extended fills the padding too: BPF is little-endian, so the value's bytes come
    first; B07 wants padding zero, and one store is fewer instructions than two)."""
    off, ft = st.fields[name]
    if not isinstance(ft, (T.IntType, T.BoolType)) or ft.size >= 8:
        return ft.size
    end = min([o for o, _t in st.fields.values() if o > off], default=st.size)
    w = ft.size
    for cand in (2, 4, 8):
        if cand > ft.size and off % cand == 0 and off + cand <= end:
            w = cand
    return w


class CallGen(GenHost):
    # ---- calls ----
    def helper(self, hid: int, ret: ir.Type, args: list[ir.Value]) -> ir.Value:
        """Call BPF helper ``hid`` like clang: through ``inttoptr (i64 hid to ptr)``."""
        fnty = ir.FunctionType(ret, [a.type for a in args])
        callee = ir.Constant(I64, hid).inttoptr(PTR)
        callee.function_type = fnty
        return self.b.call(callee, args)

    def kfunc_call(self, e: ast.Call) -> ir.Value:
        """A kfunc (abi.kfuncs) as clang calls an ``extern int f(...) __ksym``: a direct call
        of a declaration in section ``.ksyms`` with a DISubprogram (LLVM then emits the
        relocated ``call -1``, the extern BTF FUNC and the ``.ksyms`` DATASEC); the ctx
        first, then the addresses of the locals it writes (sema: program locals)."""
        k = KFUNC_BUILTINS[e.name]
        fn = self.m.globals.get(k.name)
        if fn is None:
            fn = KsymDecl(self.m, ir.FunctionType(I32, [PTR] * (1 + len(k.outs))), k.name)
            fn.section = ".ksyms"
            if self.dbg:
                self.dbg.di.kfunc(fn, k.btf_outs(), ctx=self.f.ctx_kind or "xdp_md")
        slots = []
        for a in e.args:
            loc = self.c.sym[a]
            assert isinstance(loc, Local)  # sema.kfuncs: the arguments are locals
            slots.append(self.var(loc))
        return self.b.call(fn, [self.f.ctx, *slots])

    def g_Call(self, e: ast.Call) -> ir.Value:

        c = self.c
        if e.name in KFUNC_BUILTINS and e.name not in c.fns:
            return self.kfunc_call(e)
        if e.name in c.structs:
            st = c.structs[e.name]
            widths = {k: _padded_width(st, k) for k in e.kwargs}
            filled = [(st.fields[k][0], widths[k]) for k in e.kwargs]
            p = self.alloca_mem(st.size, e.name, filled)
            for k, v in e.kwargs.items():
                off, ft = st.fields[k]
                if isinstance(ft, (T.IntType, T.BoolType)):
                    x, w = self.rv(v, ft), widths[k]
                    if w > ft.size:  # the padding after it in one store: its zero-extension
                        x = self.b.zext(x, ir.IntType(8 * w))
                    self.b.store(x, self.gep(p, off), align=max(1, ft.align, w))
                else:
                    # p is 8-aligned (alloca_mem): the field is aligned as its offset is
                    self.store_bytes(self.gep(p, off), v, ft, min(8, off & -off) if off else 8)
            return p
        if e.name in c.fns:
            return self.fn_call(e)
        if e.name in TYPED_HELPERS or (e.name.startswith("bpf_") and e.name not in BUILTINS):
            return self.typed_helper(e)
        if e.name in ("raw", "as_be"):  # the same bits: no byte swap
            return self.rv(e.args[0], e.args[0].ty)
        if e.name == "csum_fold":
            return self.csum_fold(e)
        if e.name == "csum_replace":
            return self.csum_replace(e)
        if e.name == "host" or e.name.startswith("be"):
            at = e.args[0].ty
            assert isinstance(e.ty, T.IntType)
            v = self.rv(e.args[0], at if isinstance(at, T.IntType) else T.IntType(e.ty.bits))
            return self.bswap(self.conv(v, at, T.IntType(e.ty.bits)))
        if e.name in ("ktime_get_ns", "get_prandom_u32", "get_smp_processor_id"):
            r = self.helper(HELPERS[e.name].id, I64, [])
            return self.conv(r, T.U64, e.ty)
        if e.name == "redirect":
            return self.helper(
                HELPERS["redirect"].id, I64, [self.rv(e.args[0], T.U32), self.rv(e.args[1], T.U64)]
            )
        if e.name == "redirect_map":
            m = self.gen(e.args[0])
            return self.helper(
                HELPERS["redirect_map"].id,
                I64,
                [m, self.rv(e.args[1], T.U32), self.rv(e.args[2], T.U64)],
            )
        if e.name == "swap":
            return self.swap(e.args[0], e.args[1])
        if e.name == "offset":
            return self.view_offset(e.args[0])
        if e.name == "loop":
            return self.bpf_loop(e)
        if e.name == "hash":
            return self.flow_hash(e.args)
        if e.name in (
            "adjust_head",
            "adjust_tail",
            "adjust_meta",
            "msg_pull_data",
            "msg_push_data",
            "msg_pop_data",
        ):
            return self.resize(e)
        if e.name in (
            "msg_redirect_hash",
            "msg_redirect_map",
            "sock_hash_update",
            "sock_map_update",
        ):
            m = e.args[0].ty
            assert isinstance(m, T.MapType)
            key = (
                self.rv(e.args[1], T.U32)
                if e.name == "msg_redirect_map"
                else self.key_ptr(m, e.args[1])
            )
            return self.helper(
                HELPERS[e.name].id,
                I64,
                [self.f.ctx, self.gen(e.args[0]), key, self.rv(e.args[2], T.U64)],
            )
        if e.name in ("ringbuf_output", "perf_event_output", "ringbuf_submit", "ringbuf_discard"):
            return self.event_call(e)
        if e.name in ("msg_apply_bytes", "msg_cork_bytes", "sock_ops_cb_flags_set"):
            sig = BUILTINS[e.name]
            assert sig is not None
            args = [self.rv(a, t) for a, t in zip(e.args, sig[0], strict=True)]
            return self.helper(HELPERS[e.name].id, I64, [self.f.ctx, *args])
        raise AssertionError(f"codegen: call {e.name}")

    def _fold16(self, s: ir.Value, wide: bool) -> ir.Value:
        """One's-complement fold of the i64 sum ``s`` (under 2^32 unless ``wide``) to 16
        bits, complemented (i16): the kernel's ``csum_fold`` (``from64to32`` first when
        ``wide``)."""
        b = self.b
        m16 = ir.Constant(I64, 0xFFFF)
        if wide:
            s = b.add(b.and_(s, ir.Constant(I64, 0xFFFFFFFF)), b.lshr(s, ir.Constant(I64, 32)))
        for _ in range(3 if wide else 2):
            s = b.add(b.and_(s, m16), b.lshr(s, ir.Constant(I64, 16)))
        return b.trunc(b.not_(s), ir.IntType(16))

    def csum_fold(self, e: ast.Call) -> ir.Value:
        """``csum_fold(sum)``: bpfdsl.lang.sema.bitcast; the be16 as stored (no swap)."""
        at = e.args[0].ty
        assert isinstance(at, T.IntType)
        v = self.rv(e.args[0], at)
        v = self.b.zext(v, I64) if at.bits < 64 else v
        return self._fold16(v, at.bits > 32)

    def csum_replace(self, e: ast.Call) -> ir.Value:
        """``csum_replace(check, old, new)``: RFC 1624 eqn. 3 over the 16-bit words of
        ``old``/``new`` as stored (byte-order neutral, as ``csum_update``)."""
        b = self.b
        ot = e.args[1].ty
        assert isinstance(ot, T.IntType)
        hc = self.rv(e.args[0], T.BE16)
        old, new = self.rv(e.args[1], ot), self.rv(e.args[2], ot)
        s = b.zext(b.xor(hc, ir.Constant(hc.type, 0xFFFF)), I64)
        for i in range(0, ot.bits, 16):
            wo, wn = (self._word16(v, i) for v in (old, new))
            s = b.add(s, b.zext(b.xor(wo, ir.Constant(wo.type, 0xFFFF)), I64))
            s = b.add(s, b.zext(wn, I64))
        return self._fold16(s, False)  # at most 9 words of 16 bits: under 2^20

    def _word16(self, v: ir.Value, bit: int) -> ir.Value:
        """The 16 bits of ``v`` from bit ``bit`` up, as an i16."""
        if bit:
            v = self.b.lshr(v, ir.Constant(v.type, bit))
        return v if v.type.width == 16 else self.b.trunc(v, ir.IntType(16))

    def fn_call(self, e: ast.Call) -> ir.Value:
        """A call of fn ``e.name``.  An aggregate argument is passed by reference to memory
        holding its value (by value for the language, see bpfdsl.lang.sema.params): the
        caller's own variable when the callee only reads that parameter (one stack copy for
        every call, as C's ``const struct key *``), else a temporary copy that lives for the
        call only (``llvm.lifetime``: the copies of successive calls share a stack slot)."""
        info = self.c.fns[e.name]
        written = self.c.written_params.get(e.name, frozenset())
        mark = len(self.f.temps)
        args = []
        for k, (a, (_n, t)) in enumerate(zip(e.args, info.params, strict=True)):
            if isinstance(t, T.HeaderType):
                args.append(self.gen(a))
            elif not isinstance(t, (T.StructType, T.BytesType, T.ArrayType)):
                args.append(self.value_for(a, t))
            else:
                own = None if k in written else self.own_memory(a)
                if own is None:
                    own = self.temp_mem(t.size)
                    self.store_bytes(own, a, t)
                args.append(own)
        ret = info.ret.inner if isinstance(info.ret, T.OptionalType) else info.ret
        if isinstance(ret, (T.StructType, T.BytesType, T.ArrayType)):  # returned in memory
            args = [self.alloca_mem(ret.size, e.name), *args]
        if self.takes_ctx(e.name):  # the packet and the cursor it moves are the caller's
            cursor = self.f.cursor if self.f.cursor is not None else ir.Constant(PTR, None)
            callee = self.fn_ir[e.name, self.f.ctx_kind]
            hidden = [self.f.ctx, cursor][: self.hidden_args(e.name)]
            if info.linkage != "inline" and len(hidden) == 2:  # a subprogram: where to start
                hidden[1] = self.b.load(cursor, typ=PTR, align=8)
            r = self.b.call(callee, [*hidden, *args])
        else:
            callee = self.fn_ir[e.name, None]
            r = self.b.call(callee, args)
        self.keep_result(callee)
        self.end_temps(mark)
        return r

    def own_memory(self, a: ast.Expr) -> ir.Value | None:
        """The memory of aggregate variable ``a`` when it is the current function's own (a
        stack variable, or a parameter: the caller's memory, which this fn only reads),
        else None (a map value, a packet view, an expression: copied)."""
        if not isinstance(a, ast.Name):
            return None
        loc = self.c.sym.get(a)
        if not isinstance(loc, Local) or not isinstance(
            loc.ty, (T.StructType, T.BytesType, T.ArrayType)
        ):
            return None
        p = self.var(loc)
        return p if isinstance(p, (ir.AllocaInstr, ir.Argument)) else None

    def record_ptr(self, m: T.MapType, e: ast.Expr) -> ir.Value:
        """Address of record ``e`` of event map ``m`` (fresh zero-padded stack memory, a
        local's own memory, or a map value), as for map values."""
        return self.key_ptr(T.MapType(m.name, "record", 0, m.record, None, 0), e)

    def ringbuf_reserve(self, e: ast.Call) -> ir.Value:
        """``bpf_ringbuf_reserve(&map, sizeof(record), 0)``: the record's memory or NULL."""
        m = e.args[0].ty
        assert isinstance(m, T.MapType) and m.record is not None  # sema: an event map
        size = ir.Constant(I64, m.record.size)
        return self.helper(
            HELPERS["ringbuf_reserve"].id, PTR, [self.gen(e.args[0]), size, ir.Constant(I64, 0)]
        )

    def zero_record(self, p: ir.Value, e: ast.Call) -> None:
        """Zero the record ``ringbuf_reserve`` gave (bpf_ringbuf_reserve does not: its bytes
        are what an earlier record left at that place of the ring), so a field or padding
        byte the program does not write reads 0 and reaches user space as 0, on the kernel
        as in the interpreter (found by tests/fuzz/subprograms.py: ``r.w += 1`` read an old
        record header).  8-byte stores over the record (the ring's records are 8-aligned),
        which LLVM's dead-store elimination drops where the program writes the bytes
        before submitting: a record written whole costs nothing."""
        m = e.args[0].ty
        assert isinstance(m, T.MapType) and m.record is not None  # sema: an event map
        size, off = m.record.size, 0
        for width, ty in ((8, I64), (4, I32), (2, I16), (1, I8)):
            while size - off >= width:
                self.b.store(ir.Constant(ty, 0), self.gep(p, off), align=width)
                off += width

    def event_call(self, e: ast.Call) -> ir.Value:
        """ringbuf_output / perf_event_output / ringbuf_submit / ringbuf_discard (see
        bpfdsl.lang.sema.events): perf_event_output's flags are BPF_F_CURRENT_CPU with the
        number of packet bytes to append in the upper 32 bits (BPF_F_CTXLEN_MASK)."""
        hid = HELPERS[e.name].id
        if e.name in ("ringbuf_submit", "ringbuf_discard"):
            flags = self.rv(e.args[1], T.U64) if len(e.args) > 1 else ir.Constant(I64, 0)
            self.helper(hid, ir.VoidType(), [self.gen(e.args[0]), flags])
            return ir.Constant(I64, 0)
        m = e.args[0].ty
        assert isinstance(m, T.MapType) and m.record is not None  # sema: an event map
        mark = len(self.f.temps)
        rec = self.record_ptr(m, e.args[1])
        size = ir.Constant(I64, m.record.size)
        if e.name == "ringbuf_output":
            flags = self.rv(e.args[2], T.U64) if len(e.args) > 2 else ir.Constant(I64, 0)
            r = self.helper(hid, I64, [self.gen(e.args[0]), rec, size, flags])
        else:
            flags = ir.Constant(I64, BPF_F_CURRENT_CPU)
            if len(e.args) > 2:
                n = self.b.zext(self.rv(e.args[2], T.U32), I64)
                flags = self.b.or_(flags, self.b.shl(n, ir.Constant(I64, 32)))
            r = self.helper(hid, I64, [self.f.ctx, self.gen(e.args[0]), flags, rec, size])
        self.end_temps(mark)
        return r

    def bpf_loop(self, e: ast.Call) -> ir.Value:
        """``loop(n, f[, state])``: bpf_loop(n, &f, &state or NULL, 0) (helper 181); the
        callback is the subprogram ``f`` (its address: an ld_imm64 the loader marks
        BPF_PSEUDO_FUNC), the state the caller's own stack memory (by reference).

        A count of 0 skips the call (the helper's answer is 0 calls made, as bpf_loop's):
        the kernel never walks the callback of a bpf_loop whose count it knows to be 0 (a
        config set to 0: frozen .rodata), removes the callback as dead code and then
        refuses the program for the function address left behind ("verifier bug: No
        program to jit", checker ``dead-subprog``).  Behind the test, the call and the
        address are dead too when the count is known to be 0, and the callback is walked
        with a count of at least 1 otherwise."""
        n = self.rv(e.args[0], T.U32)
        name = e.args[1]
        assert isinstance(name, ast.Name)
        st = self.gen(e.args[2]) if len(e.args) == 3 else ir.Constant(PTR, None)
        if name.id in self.c.packet_callbacks:
            cb = self.loop_ir[name.id, self.f.ctx_kind]
            st = self.loop_frame(st)
        else:
            cb = self.fn_ir[name.id, None]
        zero = ir.Constant(I64, 0)
        if isinstance(n, ir.Constant) and n.constant == 0:
            return zero
        before = self.b.block
        call, done = self.new_block("loop.call"), self.new_block("loop.done")
        self.b.cbranch(self.b.icmp_unsigned("==", n, ir.Constant(n.type, 0)), done, call)
        self.start(call)
        r = self.helper(HELPERS["loop"].id, I64, [n, cb, st, zero])
        after = self.b.block
        self.b.branch(done)
        self.start(done)
        calls = self.b.phi(I64, "loop.calls")
        calls.add_incoming(zero, before)
        calls.add_incoming(r, after)
        return calls

    # A packet callback's loop frame, on the caller's stack (bpf_loop's callback_ctx):
    # the context (PTR_TO_CTX, spilled: the callback reads it back through r2 with its
    # type), the cursor as an offset from the packet's first byte, the user's state.
    LOOP_CTX, LOOP_OFF, LOOP_STATE, LOOP_FRAME = 0, 8, 16, 24
    # The largest cursor offset a packet callback parses on from; past it the call stops
    # the loop.  The verifier proves a packet range only for a pointer whose variable part
    # plus its fixed offset is at most MAX_PACKET_OFF (find_good_pkt_pointers), and the
    # offset read back from the frame is a scalar the callback bounds first; this leaves
    # the callback's own parsing 32 KiB (XDP's linear data is one page).
    LOOP_CURSOR_MAX = MAX_PACKET_OFF // 2

    def cursor_offset(self, data: ir.Value | None = None) -> ir.Value:
        """The cursor's offset from the packet's first byte: a 64-bit pointer difference as
        an opaque scalar (B04); ``data``: the packet start the cursor was made from (LLVM
        may then fold the difference into the lengths that moved the cursor, as C's
        ``off + len``), else data loaded afresh."""
        cur = self.b.ptrtoint(self.b.load(self.f.cursor, typ=PTR, align=8), I64)
        d = self.b.ptrtoint(self._ctx_ptr(0, volatile=True) if data is None else data, I64)
        return self.opaque(self.b.sub(cur, d))

    def loop_frame(self, state: ir.Value) -> ir.Value:
        """The loop frame of a ``loop`` whose callback reads the packet, filled from the
        caller: its context, its cursor's offset and the state (or NULL)."""
        frame = self.alloca_mem(self.LOOP_FRAME, "loop.frame", [(0, self.LOOP_FRAME)])
        self.b.store(self.f.ctx, self.gep(frame, self.LOOP_CTX), align=8)
        self.b.store(self.cursor_offset(), self.gep(frame, self.LOOP_OFF), align=8)
        self.b.store(state, self.gep(frame, self.LOOP_STATE), align=8)
        return frame

    def g_MethodCall(self, e: ast.MethodCall) -> ir.Value:
        return self.map_method(e)

    def lvalue_ptr(self, e: ast.Expr) -> tuple[ir.Value, int]:
        """Address and alignment of a header field, struct field or local."""
        if isinstance(e, ast.Field) and isinstance(e.obj.ty, T.HeaderType):
            return self.header_field_ptr(e), self.align_of(e)
        if isinstance(e, ast.Field):
            return self.field_ptr(e), max(1, e.ty.align)
        loc = self.c.sym[e]
        assert isinstance(loc, Local)
        return self.var(loc), 8

    def swap(self, a: ast.Expr, b: ast.Expr) -> None:
        """Exchange two values in memory (no checksum change: see lang.sema.calls._swap), except
        ``swap(ip6.saddr, ip6.daddr)`` behind a Routing header with segments_left != 0:
        the L4 pseudo-header then holds the final destination, not ip6.daddr (RFC 8200
        8.1), so only its source changes, and the L4 checksum is updated for that."""
        rh_words = None
        if (
            isinstance(a, ast.Field)
            and isinstance(a.obj.ty, T.HeaderType)
            and a.obj.ty.layout.name == "ipv6"
            and isinstance(b, ast.Field)
            and {a.name, b.name} == {"saddr", "daddr"}
        ):
            hdr = self.gen(a.obj)
            rh_words = self._words(hdr, 8, 24)
        pa, aa = self.lvalue_ptr(a)
        pb, ab = self.lvalue_ptr(b)
        ty = a.ty
        if isinstance(ty, (T.IntType, T.BoolType)):
            pieces = [(0, max(1, ty.size))]
            align = max(1, ty.size)
        else:
            align = min(aa, ab, 8)
            pieces = copy_chunks(ty.size, align)
        for off, w in pieces:
            it = self.lt(ty) if isinstance(ty, (T.IntType, T.BoolType)) else ir.IntType(8 * w)
            x = self.b.load(self.gep(pa, off), typ=it, align=min(w, align))
            y = self.b.load(self.gep(pb, off), typ=it, align=min(w, align))
            self.b.store(y, self.gep(pa, off), align=min(w, align))
            self.b.store(x, self.gep(pb, off), align=min(w, align))
        if rh_words is not None:
            assert isinstance(a, ast.Field)
            kinds = PSEUDO_FIELDS["ipv6"]["saddr"]
            l4 = self._related_l4(a.obj, kinds)
            new = self._words(hdr, 8, 24)
            self.pseudo_update(a.obj, l4, hdr, True, kinds, rh_words, new, True)

    FNV_OFFSET, FNV_PRIME = 2166136261, 16777619  # FNV-1a, 32-bit (IETF draft-eastlake-fnv)
    FMIX = (0x85EBCA6B, 0xC2B2AE35)  # MurmurHash3 fmix32 multipliers

    def flow_hash(self, args: list[ast.Expr]) -> ir.Value:
        """``hash(a, b, ...)``: 32-bit FNV-1a over one 32-bit word per argument (the value as
        it is stored: network-order fields are hashed without a swap), then MurmurHash3's
        fmix32 finalizer.  FNV-1a alone only moves bits upwards (xor, multiply by an odd
        prime), so ``h % 2**k`` would depend on the low k bits of each word only -- for a
        be32 address, its first octet: all flows of one /8 on one CPU.  The finalizer
        (``h ^= h >> 16; h *= 0x85ebca6b; h ^= h >> 13; h *= 0xc2b2ae35; h ^= h >> 16``) mixes
        every input bit into the low bits.  Deterministic: a flow always picks the same slot;
        cost: 2 instructions per word + 8.

        An address (``ipv6_addr``, 16 bytes; ``mac_addr``, 6) counts as its bytes in 32-bit
        words the same way, the last one zero-filled: ``hash(ip6.saddr)`` equals ``hash`` of
        the address's four be32 words, so IPv6 flows steer like IPv4 ones."""
        h = ir.Constant(I32, self.FNV_OFFSET)
        for a in args:
            t = a.ty.inner if isinstance(a.ty, T.RefType) else a.ty
            if isinstance(t, T.BytesType):
                words = self.bytes_words(a, t.size)
            else:
                words = [self.rv(a, T.U32 if not isinstance(t, T.IntType) else T.IntType(32))]
            for w in words:
                h = self.b.mul(self.b.xor(h, w), ir.Constant(I32, self.FNV_PRIME))
        for shift, mul in ((16, self.FMIX[0]), (13, self.FMIX[1]), (16, None)):
            h = self.b.xor(h, self.b.lshr(h, ir.Constant(I32, shift)))
            if mul is not None:
                h = self.b.mul(h, ir.Constant(I32, mul))
        return h

    def bytes_words(self, e: ast.Expr, size: int) -> list[ir.Value]:
        """The ``size`` bytes (a multiple of 2: mac_addr 6, ipv6_addr 16) of aggregate ``e``
        as little-endian u32 loads, one per 4 bytes, a trailing 2 bytes zero-extended: each
        word is the value a be32 (be16) field with those bytes holds, so hashing them
        matches hashing such fields."""
        mem = self.mem_of(e)
        out = []
        for off in range(0, size, 4):
            n = min(4, size - off)
            if isinstance(mem, (bytes, bytearray)):
                out.append(ir.Constant(I32, int.from_bytes(mem[off : off + n], "little")))
                continue
            align = min(n, self.align_of(e))
            v = self.b.load(self.gep(mem, off), typ=ir.IntType(8 * n), align=align)
            out.append(v if n == 4 else self.b.zext(v, I32))
        return out
