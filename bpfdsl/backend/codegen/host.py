"""What the code generation mixins use of the class they are mixed into (back end).

:class:`~bpfdsl.backend.codegen.generator.CodeGen` joins the mixins of :mod:`.expr`,
:mod:`.calls`, :mod:`.csum` / :mod:`.pkt` and :mod:`.maps`; each calls methods and reads
state that CodeGen or another mixin defines.  The mixins cannot import generator.py (it
imports them, and imports have no cycles), so :class:`GenHost`, their common base, declares
that shared part for the type checker.  At run time it adds nothing: attributes are only
annotated and the methods exist only under ``TYPE_CHECKING``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

    from llvmlite import ir

    from bpfdsl.abi.uapi import ProgramKind
    from bpfdsl.backend.codegen.debug import DebugAdapter
    from bpfdsl.lang import ast
    from bpfdsl.lang import types as T
    from bpfdsl.lang.sema.analyzer import Checked
    from bpfdsl.lang.sema.symbols import Local


class FnState(Protocol):
    """The function being generated (generator._Fn, made by CodeGen.begin)."""

    func: ir.Function
    kind: ProgramKind | None  # None for a user fn
    ctx: ir.Value | None
    entry: ir.Block
    cursor: ir.Value | None
    loops: list[tuple[ir.Block, ir.Block]]
    ret_block: ir.Block | None
    pending: list[ir.Block]
    temps: list[ir.Value]
    rets: list[tuple[ir.Value, ir.Block]]


class GenHost:
    """State and methods of CodeGen and its mixins that the mixins share."""

    c: Checked
    m: ir.Module
    b: ir.IRBuilder
    f: FnState
    dbg: DebugAdapter | None
    env: list[dict[Local, ir.Value]]
    globals: dict[str, ir.GlobalVariable]
    fn_ir: dict[tuple[str, str | None], ir.Function]

    if TYPE_CHECKING:

        def gen(self, e: ast.Expr): ...
        def rv(self, e: ast.Expr, ty: T.Type, allow_narrow: bool = False) -> ir.Value: ...
        def conv(
            self, v: ir.Value, frm: T.Type, to: T.Type, allow_narrow: bool = True
        ) -> ir.Value: ...
        def bswap(self, v: ir.Value) -> ir.Value: ...
        def binop(
            self, op: str, a: ir.Value, b: ir.Value, signed: bool, const_b: bool
        ) -> ir.Value: ...
        def field_ptr(self, e: ast.Field) -> ir.Value: ...
        def mem_of(self, e: ast.Expr): ...
        def align_of(self, e: ast.Expr) -> int: ...
        def store_bytes(
            self, dst: ir.Value, e: ast.Expr, ty: T.Type, dst_align: int = 8
        ) -> None: ...
        def store_const_bytes(self, dst: ir.Value, data: bytes, align: int) -> None: ...
        def store_scalar(
            self, slot, ty: T.Type, op: str, value: ast.Expr, atomic: bool
        ) -> None: ...
        def helper(self, hid: int, ret: ir.Type, args: list[ir.Value]) -> ir.Value: ...
        def _words(self, base: ir.Value, lo: int, hi: int) -> list[ir.Value]: ...
        def _related_l4(self, ip_obj: ast.Expr, kinds: tuple[str, ...]) -> list | None: ...
        def pseudo_update(
            self,
            ip_obj: ast.Expr,
            l4: list | None,
            hdr: ir.Value,
            v6: bool,
            kinds: tuple[str, ...],
            old_w,
            new_w,
            rh: bool | None = None,
        ) -> None: ...
        def ctx_field(self, name: str) -> ir.Value: ...
        def bounds(self, p: ir.Value, size: int, fail: ir.Block, name: str) -> None: ...
        def ext_walk(
            self,
            ip6: ir.Value,
            fail: ir.Block,
            flags: ir.Value | None = None,
            stop: int = 0,
            stop_to: ir.Block | None = None,
        ) -> ir.Value: ...
        def resize(self, e: ast.Call) -> ir.Value: ...
        def header_field_ptr(self, e: ast.Field) -> ir.Value: ...
        def load_header_field(self, e: ast.Field) -> ir.Value: ...
        def store_header_field(self, tgt: ast.Field, op: str, value: ast.Expr) -> None: ...
        def key_ptr(self, m: T.MapType, k: ast.Expr) -> ir.Value: ...
        def map_lookup(self, e: ast.MethodCall) -> ir.Value: ...
        def map_method(self, e: ast.MethodCall) -> ir.Value: ...
        def map_assign(self, s: ast.Assign) -> None: ...
        def lt(self, t: T.Type) -> ir.Type: ...
        def alloca(self, ty: ir.Type, name: str = "", align: int | None = None) -> ir.Value: ...
        def alloca_mem(
            self, size: int, name: str = "", filled: Sequence[tuple[int, int]] = (), lifetime=False
        ) -> ir.Value: ...
        def var(self, loc: Local) -> ir.Value: ...
        def gep(self, p: ir.Value, off) -> ir.Value: ...
        def new_block(self, name: str) -> ir.Block: ...
        def start(self, blk: ir.Block) -> None: ...
        def value_for(self, e: ast.Expr, ty: T.Type) -> ir.Value: ...
