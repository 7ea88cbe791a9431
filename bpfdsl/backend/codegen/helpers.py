"""Typed kernel helpers lowering (back end mixin of
:class:`bpfdsl.backend.codegen.generator.CodeGen`; see bpfdsl.lang.sema.helpers): each call is
made as clang makes it from C.

``fib_lookup(fib, flags)`` is ``bpf_fib_lookup(ctx, &fib, sizeof(fib), flags)`` on the
variable's own stack memory (64 bytes), so the kernel's result is in ``fib`` afterwards;
``csum_diff(a, b, seed)`` is ``bpf_csum_diff(&a, sizeof(a), &b, sizeof(b), seed)`` on the
values' memory (packet bytes for a header field), ``NULL, 0`` for a side that is ``none``;
``xdp_load_bytes(off, v)`` / ``xdp_store_bytes(off, v)`` are
``bpf_xdp_load_bytes(ctx, off, &v, sizeof(v))`` / ``bpf_xdp_store_bytes`` on the local's own
stack memory (or the map value ``v`` refers to); ``bpf_NAME(args)`` passes the context
first where the prototype takes it.
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.abi.fib import BPF_FIB_LOOKUP_SIZE
from bpfdsl.abi.helpers import HELPERS, ArgKind, RetKind
from bpfdsl.backend.codegen.host import GenHost
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import Local

I32, I64 = ir.IntType(32), ir.IntType(64)

TYPED_HELPERS = frozenset(
    {
        "fib_lookup",
        "csum_diff",
        "xdp_get_buff_len",
        "ktime_get_boot_ns",
        "xdp_load_bytes",
        "xdp_store_bytes",
    }
)
"""The builtins this mixin lowers (besides ``bpf_NAME`` calls)."""


class HelperGen(GenHost):
    def typed_helper(self, e: ast.Call) -> ir.Value:
        """Lower a call of :data:`TYPED_HELPERS` or ``bpf_NAME(...)``."""
        if e.name == "fib_lookup":
            params = self.gen(e.args[0])  # the variable's (or map value's) memory
            size = ir.Constant(I64, BPF_FIB_LOOKUP_SIZE)
            flags = self.rv(e.args[1], T.U64)
            return self.helper(HELPERS["fib_lookup"].id, I64, [self.f.ctx, params, size, flags])
        if e.name == "csum_diff":
            args: list[ir.Value] = []
            for a in e.args[:2]:
                if a.ty is T.VOID:  # `none` (sema): no bytes on this side
                    args += [ir.Constant(ir.PointerType(), None), ir.Constant(I64, 0)]
                    continue
                t = a.ty.inner if isinstance(a.ty, T.RefType) else a.ty
                args += [self._mem_ptr(a, t), ir.Constant(I64, t.size)]
            seed = self.b.zext(self.rv(e.args[2], T.U32), I64)
            return self.helper(HELPERS["csum_diff"].id, I64, [*args, seed])
        if e.name in ("xdp_load_bytes", "xdp_store_bytes"):
            off = self.b.zext(self.rv(e.args[0], T.U32), I64)
            v = e.args[1]
            if isinstance(v.ty, T.RefType):  # a map value (sema): the memory it refers to
                slot, n = self.gen(v), v.ty.inner.size
            else:
                loc = self.c.sym[v]
                assert isinstance(loc, Local) and v.ty is not None  # sema: a fixed-size local
                slot, n = self.var(loc), v.ty.size  # the local's own stack memory (bind)
            size = ir.Constant(I64, n)
            return self.helper(HELPERS[e.name].id, I64, [self.f.ctx, off, slot, size])
        if e.name == "xdp_get_buff_len":
            return self.helper(HELPERS["xdp_get_buff_len"].id, I64, [self.f.ctx])  # a u64
        if e.name == "ktime_get_boot_ns":
            return self.helper(HELPERS["ktime_get_boot_ns"].id, I64, [])
        h = HELPERS[e.name[len("bpf_") :]]
        assert h.args is not None  # sema: a helper callable by name
        vals = [self.rv(a, T.U64) for a in e.args]
        if h.args[:1] == (ArgKind.PTR_TO_CTX,):
            vals = [self.f.ctx, *vals]
        if h.ret is RetKind.VOID:
            self.helper(h.id, ir.VoidType(), vals)
            return ir.Constant(I64, 0)
        return self.conv(self.helper(h.id, I64, vals), T.U64, e.ty)  # r0 as the prototype's type

    def _mem_ptr(self, e: ast.Expr, t: T.Type) -> ir.Value:
        """Address of the bytes of ``e`` as stored (a header field: in the packet; a constant
        or another scalar is put on the stack)."""
        if isinstance(t, T.IntType) and not (
            isinstance(e, ast.Field) and isinstance(e.obj.ty, T.HeaderType)
        ):
            p = self.alloca_mem(t.size, filled=[(0, t.size)])
            self.b.store(self.rv(e, t), p, align=t.size)
            return p
        mem = self.mem_of(e)
        if isinstance(mem, (bytes, bytearray)):
            p = self.alloca_mem(t.size, filled=[(0, t.size)])
            self.store_const_bytes(p, bytes(mem), 8)
            return p
        return mem
