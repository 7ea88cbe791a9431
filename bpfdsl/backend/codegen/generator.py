"""Code generation (back end): sema's :class:`~bpfdsl.lang.sema.analyzer.Checked` -> ``llvmlite.ir.Module``.

One ``ir.Function`` per program, ``section`` = the PROGRAM_KINDS section (``xdp``,
``xdp/cpumap``...), ``nounwind``; a plain ``fn`` becomes an ``internal alwaysinline``
function, a ``noinline fn`` (or loop callback) an ``internal noinline`` one (a static BPF
subprogram in ``.text``) and a ``global fn`` an external ``noinline`` one (a global
function), both with debug info so LLVM writes their BTF FUNC and line info.  A prog_array
is a ``.maps`` global whose ``values`` point at the programs of its slots.
Maps are BTF-defined globals in ``.maps``, configs are globals in ``.rodata`` (not
``constant``, so LLVM cannot fold them: the loader patches them), the license is a char
array in ``license``.  Helpers are called through ``inttoptr (i64 ID to ptr)`` like clang.
Statements are here; expressions, packet access and map access are the mixins in
codegen.expr, codegen.pkt and codegen.maps.  Debug info goes through ``self.dbg``
(:mod:`bpfdsl.backend.debuginfo` when present, else nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.prog_types import ProgramKind
from bpfdsl.backend.codegen.calls import CallGen
from bpfdsl.backend.codegen.debug import DebugAdapter
from bpfdsl.backend.codegen.expr import ExprGen
from bpfdsl.backend.codegen.helpers import HelperGen
from bpfdsl.backend.codegen.maps import MapGen
from bpfdsl.backend.codegen.pkt import PktGen
from bpfdsl.backend.debuginfo import compiler_used
from bpfdsl.backend.target import ALU32_MCPUS
from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import CTX_DATA
from bpfdsl.lang.sema.analyzer import Checked
from bpfdsl.lang.sema.symbols import FnInfo, Local

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
PTR = ir.PointerType()
DATALAYOUT = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"


class _Fn:
    """Per-function state: the ir function, entry block for allocas, ctx, cursor, loops.
    ``ctx_kind``: the context struct (``xdp_md``, ``sk_msg_md``) data/data_end are read from
    (a program's, or the one a packet fn's copy is made for); ``info``: the FnInfo of a fn;
    ``volatile_end``: every bounds check reloads data_end (a packet fn: it may be inlined
    into a loop; a function after its first loop; see PktGen.bounds)."""

    def __init__(
        self,
        func: ir.Function,
        kind: ProgramKind | None,
        ctx: ir.Value | None,
        ctx_kind: str | None = None,
        info: FnInfo | None = None,
    ) -> None:
        self.func = func
        self.kind = kind
        self.ctx = ctx
        self.ctx_kind = kind.ctx if kind is not None else ctx_kind
        self.info = info
        self.volatile_end = False
        self.ret_mem: ir.Value | None = None  # where a fn returning an aggregate writes it
        self.entry: ir.Block = func.append_basic_block("entry")
        self.cursor: ir.Value | None = None  # alloca holding the parse cursor (ptr)
        self.loops: list[tuple[ir.Block, ir.Block]] = []  # (continue target, break target)
        self.ret_block: ir.Block | None = None
        self.pending: list[ir.Block] = []  # blocks made by new_block
        self.placed: set[int] = set()  # id() of the blocks in func.blocks, if put by start()
        self.temps: list[ir.Value] = []  # live key/value temporaries (codegen.maps.temp_mem)
        self.rets: list[tuple[ir.Value, ir.Block]] = []  # (value, predecessor) of ret_block
        # ipv6 view -> the i8 slot of the EXT_* flags skip_ext left (CsumGen.ext_flags_slot)
        self.ext_flag_slots: dict[Local, ir.Value] = {}


class CodeGen(ExprGen, CallGen, PktGen, MapGen, HelperGen):
    def __init__(
        self,
        checked: Checked,
        dbg: DebugAdapter | None = None,
        module: ir.Module | None = None,
        mcpu: str = "v3",
    ) -> None:
        self.c = checked
        self.alu32 = mcpu in ALU32_MCPUS
        self.m = module if module is not None else ir.Module(name=checked.filename)
        self.m.triple = "bpfel"
        self.m.data_layout = DATALAYOUT
        self.dbg = dbg
        self.b: ir.IRBuilder  # these two are set by begin() for each function
        self.f: _Fn
        self.env: list[dict[Local, ir.Value]] = []
        self.globals: dict[str, ir.GlobalVariable] = {}
        self.kept: list[ir.Function] = []  # static subprograms whose signature LLVM keeps
        self.fn_ir: dict[tuple[str, str | None], ir.Function] = {}  # (fn, ctx kind): see fn_copies
        # (packet callback, ctx kind) -> the loop's subprogram (declare_loop_trampoline)
        self.loop_ir: dict[tuple[str, str | None], ir.Function] = {}
        self.prog_ir: dict[str, ir.Function] = {}  # program functions by name

    # ---- module level ----
    def generate(self) -> ir.Module:
        self.emit_license()
        lines = {
            it.name: it.span.line for it in self.c.program.items if isinstance(it, ast.ConfigDecl)
        }
        for name, cfg in self.c.configs.items():
            if self.dbg:
                self.globals[name] = self.dbg.config_global(name, cfg, lines.get(name, 0))
                continue
            g = ir.GlobalVariable(self.m, self.lt(cfg.ty), name)
            g.initializer = ir.Constant(self.lt(cfg.ty), cfg.value)
            g.section = ".rodata"
            g.align = cfg.ty.align
            self.globals[name] = g
        for name, mt in self.c.maps.items():
            self.globals[name] = self.emit_map_global(name, mt)
        self.loop_fns = self.fns_in_loops()
        if self.dbg:
            self.dbg.records_global(self.c.maps)
        for name, info in self.c.fns.items():  # declared first: a fn may call a later one
            for ctx_kind in self.fn_copies(name):
                self.declare_fn(name, info, ctx_kind)
        for name in sorted(self.c.packet_callbacks):
            for ctx_kind in self.fn_copies(name):
                self.declare_loop_trampoline(name, ctx_kind)
        for name, info in self.c.fns.items():
            for ctx_kind in self.fn_copies(name):
                self.emit_fn(name, info, ctx_kind)
        for name in sorted(self.c.packet_callbacks):
            for ctx_kind in self.fn_copies(name):
                self.emit_loop_trampoline(name, ctx_kind)
        for decl, kind in self.c.progs:
            self.emit_prog(decl, kind)
            rc = self.c.run_configs.get(decl.name)
            if rc is not None and self.dbg:  # (compiler.py refuses it without BTF)
                self.dbg.run_config_global(decl.name, rc, decl.span.line)
        self.fill_prog_arrays()
        if self.dbg:
            self.dbg.di.keep(*self.kept)
            self.dbg.finalize()
        else:
            compiler_used(self.m, self.kept)
        return self.m

    def emit_license(self) -> None:
        if self.dbg:
            self.dbg.license_global(self.c.license)
            return
        data = self.c.license.encode() + b"\0"
        ty = ir.ArrayType(I8, len(data))
        g = ir.GlobalVariable(self.m, ty, "LICENSE")  # as with debug info: a reserved name
        g.initializer = ir.Constant(ty, bytearray(data))
        g.section = "license"
        g.align = 1

    def emit_map_global(self, name: str, mt: T.MapType) -> ir.GlobalVariable:
        if mt.kind == "prog_array":
            slots = self.c.prog_array_init.get(name, {})
            n = max(slots, default=-1) + 1
            if self.dbg:
                return self.dbg.prog_array(name, mt, n)
            ty = ir.LiteralStructType([PTR, PTR, PTR, ir.ArrayType(PTR, n)])
            g = ir.GlobalVariable(self.m, ty, name)
            g.initializer = ir.Constant(ty, None)
            g.section, g.align = ".maps", 8
            return g
        if self.dbg:
            return self.dbg.map_global(name, mt)
        n = 5 if mt.flags else 4
        ty = ir.LiteralStructType([PTR] * n)
        g = ir.GlobalVariable(self.m, ty, name)
        g.initializer = ir.Constant(ty, None)
        g.section = ".maps"
        g.align = 8
        return g

    def fill_prog_arrays(self) -> None:
        """Point the ``values`` of each prog_array at the programs of its slots (the
        initializer clang writes for ``.values = { [k] = (void *)&prog }``)."""
        progs = self.prog_ir
        for name, slots in self.c.prog_array_init.items():
            g = self.globals[name]
            arr_t = g.value_type.elements[3]
            vals = [
                progs[_name(slots[k])] if k in slots else ir.Constant(PTR, None)
                for k in range(arr_t.count)
            ]
            g.initializer = ir.Constant(
                g.value_type,
                [ir.Constant(PTR, None)] * 3 + [ir.Constant(arr_t, vals)],
            )

    def lt(self, t: T.Type) -> ir.Type:
        """LLVM type of a scalar language type (bool is i1 in registers)."""
        if isinstance(t, T.BoolType):
            return I1
        if isinstance(t, T.IntType):
            return ir.IntType(t.bits)
        if isinstance(t, T.RefType):
            return self.lt(t.inner)
        return I64

    # ---- functions ----
    def begin(
        self,
        func: ir.Function,
        kind: ProgramKind | None,
        ctx: ir.Value | None,
        ctx_kind: str | None = None,
        info: FnInfo | None = None,
    ) -> None:
        self.f = _Fn(func, kind, ctx, ctx_kind, info)
        body = func.append_basic_block("body")
        self.f.placed.update((id(self.f.entry), id(body)))
        self.b = ir.IRBuilder(body)
        self.env = [{}]

    def finish(self) -> None:
        for blk in self.f.pending:  # branched to but never started: unreachable code
            if id(blk) not in self.f.placed:
                self.f.placed.add(id(blk))
                self.f.func.blocks.append(blk)
                ir.IRBuilder(blk).unreachable()
        ir.IRBuilder(self.f.entry).branch(self.f.func.basic_blocks[1])

    def fn_copies(self, name: str) -> Sequence[str | None]:
        """The context kinds fn ``name`` is made for: [None] for a fn that does not touch the
        packet; for a packet fn one copy per context struct of the programs (xdp_md has
        32-bit data/data_end, sk_msg_md pointers), which it takes as hidden parameters with
        the caller's cursor."""
        if name not in self.c.packet_fns:
            if self.takes_ctx(name):  # a plain fn calling perf_event_output, msg_cork_bytes...
                return sorted({k.ctx for _d, k in self.c.progs})
            return [None]
        return sorted({k.ctx for _d, k in self.c.progs if k.ctx in CTX_DATA})

    def takes_ctx(self, name: str) -> bool:
        """Whether fn ``name`` takes its caller's context (and cursor) as hidden parameters:
        a packet fn, or a fn calling a builtin whose helper takes the context or a fn that
        takes it (bpfdsl.lang.sema.subprog_ctx; sema refuses those in loop callbacks)."""
        if name in self.c.packet_fns:
            return True
        return name in self.c.ctx_calls

    def fns_in_loops(self) -> set[str]:
        """The fns called inside a ``for`` body, directly or through the fns called there:
        inlined into a loop, their bounds checks reload data_end (PktGen.bounds)."""
        calls: dict[str, set[str]] = {n: set() for n in self.c.fns}
        looped: set[str] = set()
        bodies: list[tuple[str | None, ast.Block]] = [(None, d.body) for d, _k in self.c.progs]
        bodies += [(n, i.decl.body) for n, i in self.c.fns.items()]
        for owner, body in bodies:
            stack = [(body, False)]
            while stack:
                node, in_loop = stack.pop()
                if isinstance(node, ast.Call) and node.name in calls:
                    if owner is not None:
                        calls[owner].add(node.name)
                    if in_loop:
                        looped.add(node.name)
                if isinstance(node, list):
                    stack.extend((x, in_loop) for x in node)
                elif isinstance(node, dict):
                    stack.extend((x, in_loop) for x in node.values())
                elif isinstance(node, (ast.Node, ast.MatchArm)):
                    inner = in_loop or isinstance(node, ast.For)
                    stack.extend(
                        (v, inner) for k, v in vars(node).items() if k not in ("span", "ty")
                    )
        todo = list(looped)
        while todo:
            for callee in calls[todo.pop()]:
                if callee not in looped:
                    looped.add(callee)
                    todo.append(callee)
        return looped

    def ret_type(self, t: T.Type) -> ir.Type:
        """LLVM type a fn returns for ``t``: header views are pointers; an aggregate (struct,
        address, array) is written to memory the caller passes and that pointer returned; an
        optional T is ``{i1 present, T}``."""
        if isinstance(t, T.OptionalType):
            return ir.LiteralStructType([I1, self.ret_type(t.inner)])
        if t == T.VOID:
            return ir.VoidType()
        return PTR if isinstance(t, T.HeaderType) or _aggregate(t) else self.lt(t)

    def declare_fn(self, name: str, info: FnInfo, ctx_kind: str | None = None) -> None:
        """The ir.Function of a fn (``fn_ir[name, ctx_kind]``), before any body is emitted:
        inlined (plain fn; a packet fn takes the context and the caller's cursor slot
        first), a static subprogram (``internal noinline``; see :meth:`hidden_args`) or a
        global function (external ``noinline``).  Subprogram parameters and results narrower than 32 bits are
        ``zeroext``/``signext``, as clang marks them for BPF (the caller extends)."""
        params = [
            PTR if not T.is_int(t) and not isinstance(t, T.BoolType) else self.lt(t)
            for _n, t in info.params
        ]
        if info.linkage == "inline":
            if _aggregate(_inner(info.ret)):  # the caller's memory for the value returned
                params = [PTR, *params]
            ret = self.ret_type(info.ret)
        else:
            ret = ir.VoidType() if info.ret == T.VOID else self.lt(info.ret)
        hidden = self.hidden_args(name) if ctx_kind is not None else 0
        params = [PTR] * hidden + params
        fname = name if ctx_kind is None else f"{name}.{ctx_kind}"
        if info.linkage != "inline" and ctx_kind is not None:  # a BTF FUNC: an identifier
            fname = name if len(self.fn_copies(name)) == 1 else f"{name}__{ctx_kind}"
        func = ir.Function(self.m, ir.FunctionType(ret, params), fname)
        func.attributes.add("nounwind")
        if info.linkage == "inline":
            func.linkage = "internal"
            func.attributes.add("alwaysinline")
        else:
            if info.linkage == "static":
                func.linkage = "internal"
            func.attributes.add("noinline")
            for arg, (_n, t) in zip(func.args[hidden:], info.params, strict=True):
                ext = _ext_attr(t)
                if ext:
                    arg.add_attribute(ext)
            ext = _ext_attr(info.ret)
            if ext:
                func.return_value.add_attribute(ext)
        self.fn_ir[name, ctx_kind] = func

    def hidden_args(self, name: str) -> int:
        """How many arguments fn ``name`` takes before its own (when :meth:`takes_ctx`): a
        plain fn the context and the address of the caller's cursor slot (it moves the
        caller's cursor); a ``noinline`` packet fn the context and the caller's cursor, a
        packet pointer it parses on from there, as C's ``f(ctx, pos)`` (the caller's cursor
        stays where it was); a ``noinline`` fn that only calls a builtin taking the context,
        the context.  A static subprogram may take PTR_TO_CTX and PTR_TO_PACKET arguments:
        the kernel verifies it at each call with the caller's registers (set_callee_state
        copies r1-r5, a packet pointer with its checked range).  A ``global`` fn takes the
        context only (``__arg_ctx``): the kernel verifies it alone, and no BTF argument is
        a packet pointer, so one that parses starts at the packet's first byte
        (data, from its own context)."""
        linkage = self.c.fns[name].linkage
        if linkage == "inline" or (name in self.c.packet_fns and linkage != "global"):
            return 2
        return 1

    def declare_loop_trampoline(self, name: str, ctx_kind: str | None) -> None:
        """The static subprogram ``long NAME__loop(u64 i, void *frame)`` whose address goes
        to bpf_loop for packet callback ``name`` (``loop_ir[name, ctx_kind]``): the kernel
        passes a bpf_loop callback the index and the callback_ctx only (r1, r2), so the
        context and the cursor come through the loop frame (see CallGen.loop_frame), as C
        passes ``struct xdp_md *`` in its callback context and re-derives data/data_end."""
        copies = self.fn_copies(name)
        fname = f"{name}__loop" if len(copies) == 1 else f"{name}__loop__{ctx_kind}"
        func = ir.Function(self.m, ir.FunctionType(I64, [I64, PTR]), fname)
        func.linkage = "internal"
        func.attributes.add("nounwind")
        func.attributes.add("noinline")
        func.args[0].name, func.args[1].name = "i", "frame"
        self.loop_ir[name, ctx_kind] = func

    def emit_loop_trampoline(self, name: str, ctx_kind: str | None) -> None:
        """The body of ``NAME__loop``: the context from the frame, the cursor at the frame's
        offset (a call past CallGen.LOOP_CURSOR_MAX stops the loop), the plain fn ``name`` inlined
        on it (it moves this cursor), the cursor's offset back to the frame for the next
        call, and the fn's bool as the callback's 0 (go on) / 1 (stop)."""
        func = self.loop_ir[name, ctx_kind]
        info = self.c.fns[name]
        i, frame = func.args
        self.begin(func, None, None, ctx_kind, info)
        if self.dbg:
            self.dbg.loop_trampoline(func, info)
        self.loc(info.decl.span)
        self.f.ctx = self.b.load(self.gep(frame, self.LOOP_CTX), typ=PTR, align=8)
        off = self.b.load(self.gep(frame, self.LOOP_OFF), typ=I64, align=8)
        far = self.b.icmp_unsigned(">", off, ir.Constant(I64, self.LOOP_CURSOR_MAX))
        stop, go = self.new_block("loop.far"), self.new_block("loop.on")
        self.b.cbranch(far, stop, go)
        self.start(stop)
        self.b.ret(ir.Constant(I64, 1))
        self.start(go)
        self.f.cursor = self.alloca_ptr("cursor")
        data = self.pkt_data()
        self.b.store(self.gep(data, off), self.f.cursor, align=8)
        args = [self.f.ctx, self.f.cursor]
        pt = info.params[0][1]
        args.append(i if self.lt(pt).width == 64 else self.b.trunc(i, self.lt(pt)))
        if len(info.params) == 2:
            args.append(self.b.load(self.gep(frame, self.LOOP_STATE), typ=PTR, align=8))
        r = self.b.call(self.fn_ir[name, ctx_kind], args)
        self.b.store(self.cursor_offset(data), self.gep(frame, self.LOOP_OFF), align=8)
        self.b.ret(self.b.zext(r, I64))
        self.finish()
        if self.dbg:
            self.dbg.end_program()

    def keep_result(self, func: ir.Function) -> None:
        """Called at each call of ``func``: a static subprogram with a result is kept as
        address-taken (``llvm.compiler.used``), else, when no caller uses its result or the
        result is a constant, LLVM drops it from the callee and the exit leaves r0 holding
        whatever was last there; a stack pointer is one the kernel refuses ("cannot return
        stack pointer to the caller", prepare_func_exit).  Only called ones: an uncalled
        one stays dropped."""
        if (
            func.linkage == "internal"
            and "noinline" in func.attributes
            and not isinstance(func.function_type.return_type, ir.VoidType)
            and func not in self.kept
        ):
            self.kept.append(func)

    def emit_fn(self, name: str, info: FnInfo, ctx_kind: str | None = None) -> None:
        func = self.fn_ir[name, ctx_kind]
        ret = func.function_type.return_type
        args = list(func.args)
        ctx = cursor = out = None
        if ctx_kind is not None:
            ctx, *args = args
            if self.hidden_args(name) == 2:
                cursor, *args = args
        if info.linkage == "inline" and _aggregate(_inner(info.ret)):
            out, *args = args
        self.begin(func, None, ctx, ctx_kind, info)
        self.f.cursor = cursor
        if info.linkage != "inline" and cursor is not None:
            # a subprogram parses on a cursor of its own from the one it is given
            self.f.cursor = self.alloca_ptr("cursor")
            self.b.store(cursor, self.f.cursor, align=8)
        elif info.linkage == "global" and name in self.c.packet_fns:
            # a global fn gets no packet pointer: it parses from data, from its context
            self.f.cursor = self.alloca_ptr("cursor")
            self.b.store(self.pkt_data(), self.f.cursor, align=8)
        self.f.ret_mem = out
        self.f.volatile_end = ctx_kind is not None and name in self.loop_fns
        if info.linkage != "inline":
            for arg, (pname, _t) in zip(args, info.params, strict=True):
                arg.name = pname
            if ctx is not None:
                ctx.name = "ctx"
            if cursor is not None:
                cursor.name = "pos"
        if self.dbg:
            if info.linkage == "inline":
                self.dbg.end_program()
            else:
                self.dbg.subprogram(func, info, ctx_kind, cursor is not None)
        for arg, p in zip(args, info.decl.params, strict=True):
            loc = self.c.sym[p]
            assert isinstance(loc, Local)
            self.bind(loc, arg)
        self.loc(info.decl.span)
        if info.linkage == "global" and func.args:
            self.keep_args(func)
        if info.linkage != "inline":  # a subprogram: one return block, last, as clang's
            self.f.ret_block = self.new_block("return")
        self.block(info.decl.body, new_scope=False)
        if not self.b.block.is_terminated:
            if self.f.ret_block is not None:
                if info.ret != T.VOID:
                    self.f.rets.append((ir.Constant(ret, 0), self.b.block))
                self.b.branch(self.f.ret_block)
            elif info.ret == T.VOID:
                self.b.ret_void()
            else:
                self.b.ret(ir.Constant(ret, 0 if isinstance(ret, ir.IntType) else None))
        if self.f.ret_block is not None:
            self.start(self.f.ret_block)
            if info.ret == T.VOID:
                self.b.ret_void()
            else:
                phi = self.b.phi(ret, "retval")
                for v, blk in self.f.rets:
                    phi.add_incoming(v, blk)
                self.b.ret(phi)
        self.finish()
        if self.dbg and info.linkage != "inline":
            self.dbg.end_program()

    def keep_args(self, func: ir.Function) -> None:
        """An empty ``asm sideeffect`` reading every argument of a global function.  A
        parameter the body does not read would otherwise let LLVM pass poison for it at
        the calls (dead argument elimination keeps the signature of an external function
        but not what its callers put in the register), and the kernel checks every
        register against the BTF prototype: "R2 is not a scalar", "Caller passes invalid
        args into func#1".  It emits no instruction."""
        fake_use = self.m.globals.get("llvm.fake.use") or ir.Function(
            self.m, ir.FunctionType(ir.VoidType(), [], var_arg=True), "llvm.fake.use"
        )
        for a in func.args:
            self.b.call(fake_use, [a])

    def emit_prog(self, decl: ast.ProgDecl, kind: ProgramKind) -> None:
        func = ir.Function(self.m, ir.FunctionType(I32, [PTR]), decl.name)
        self.prog_ir[decl.name] = func
        func.section = kind.section
        func.attributes.add("nounwind")
        func.args[0].name = decl.ctx
        if self.dbg:
            self.dbg.program(func, decl, kind)
        self.begin(func, kind, func.args[0])
        # a resize may sit in a branch: a data_end kept across the join would be a phi of
        # the 32-bit context loads (a w-register move of pkt_end); load it at every check
        self.f.volatile_end = decl in self.c.resizing_progs
        self.loc(decl.span)
        if kind.ctx in CTX_DATA:  # programs with packet / message data have a parse cursor
            self.f.cursor = self.alloca_ptr("cursor")
            self.b.store(self.pkt_data(), self.f.cursor)
        self.f.ret_block = self.new_block("return")
        self.block(decl.body, new_scope=False)
        if not self.b.block.is_terminated:
            self.b.unreachable()
        self.start(self.f.ret_block)  # the return block goes last, where clang puts it
        if self.f.rets:
            phi = self.b.phi(I32, "retval")
            for v, blk in self.f.rets:
                phi.add_incoming(v, blk)
            self.b.ret(phi)
        else:
            self.b.unreachable()
        self.finish()
        if self.dbg:
            self.dbg.end_program()

    # ---- locals ----
    def alloca(self, ty: ir.Type, name: str = "", align: int | None = None) -> ir.Value:
        eb = ir.IRBuilder(self.f.entry)
        if self.f.entry.instructions:
            eb.position_before(self.f.entry.instructions[0])
        a = eb.alloca(ty, name=name)
        a.type = PTR  # opaque pointer (LLVM >= 17 IR has no typed pointers)
        if align:
            a.align = align
        return a

    def alloca_ptr(self, name: str = "") -> ir.Value:
        return self.alloca(PTR, name, 8)

    def alloca_mem(
        self,
        size: int,
        name: str = "",
        filled: Sequence[tuple[int, int]] = (),
        lifetime: bool = False,
    ) -> ir.Value:
        """An 8-aligned stack area of ``size`` bytes (B07).  Every byte not in ``filled``
        ((offset, size) ranges the caller stores next) is zeroed here, so padding is zero.
        ``lifetime``: its life starts here (``llvm.lifetime.start``; the caller ends it)."""
        n = (size + 7) // 8
        a = self.alloca(ir.ArrayType(I64, n), name, 8)
        if lifetime:
            fty = ir.FunctionType(ir.VoidType(), [PTR])
            self.b.call(self.m.declare_intrinsic("llvm.lifetime.start", [PTR], fty), [a])
        covered = bytearray(size)
        for off, sz in filled:
            covered[off : off + sz] = b"\1" * sz
        off = 0
        while off < size:
            if covered[off]:
                off += 1
                continue
            w = 8
            while w > 1 and (off % w or off + w > size or any(covered[off : off + w])):
                w //= 2
            self.b.store(ir.Constant(ir.IntType(8 * w), 0), self.gep(a, off), align=w)
            off += w
        return a

    def bind(self, loc: Local, val: ir.Value) -> None:
        """Give ``loc`` storage initialised with ``val`` (scalars/pointers: an alloca)."""
        t = loc.ty
        if isinstance(t, (T.StructType, T.BytesType, T.ArrayType)):
            self.env[-1][loc] = val  # val is already private memory
            return
        ty = PTR if isinstance(t, (T.HeaderType, T.RefType, T.OptionalType)) else self.lt(t)
        a = self.alloca(ty, loc.name, 8 if ty is PTR else max(1, t.size))
        self.b.store(val, a)
        self.env[-1][loc] = a

    def var(self, loc: Local) -> ir.Value:
        for s in reversed(self.env):
            if loc in s:
                return s[loc]
        raise KeyError(loc.name)

    def gep(self, p: ir.Value, off: int | ir.Value) -> ir.Value:
        if isinstance(off, int):
            if off == 0:
                return p
            off = ir.Constant(I64, off)
        return self.b.gep(p, [off], source_etype=I8)

    def loc(self, span: Span) -> None:
        if self.dbg:
            self.dbg.set_location(self.b, span)

    # ---- statements ----
    def block(self, b: ast.Block, new_scope: bool = True) -> None:
        if new_scope:
            self.env.append({})
        for s in b.stmts:
            if self.b.block.is_terminated:
                break
            self.loc(s.span)
            getattr(self, "s_" + type(s).__name__)(s)
            if s in self.c.cursor_reset and not self.b.block.is_terminated:
                self.reset_cursor()  # some path through s resized the packet (sema.resize)
        if new_scope:
            self.env.pop()

    def new_block(self, name: str) -> ir.Block:
        """A block that joins the function's layout only when code starts in it
        (:meth:`start`), so blocks are laid out in source order as clang does."""
        blk = ir.Block(parent=self.f.func, name=name)
        self.f.pending.append(blk)
        return blk

    def start(self, blk: ir.Block) -> None:
        """Continue emitting at the end of ``blk`` (appending it to the layout if new)."""
        if id(blk) not in self.f.placed:  # a set: `in func.blocks` made codegen quadratic
            self.f.placed.add(id(blk))
            self.f.func.blocks.append(blk)
        self.b.position_at_end(blk)

    def s_ExprStmt(self, s: ast.ExprStmt) -> None:
        self.gen(s.expr)

    def s_Let(self, s: ast.Let) -> None:
        loc = self.c.sym[s]
        assert isinstance(loc, Local)
        if s.orelse is not None and isinstance(s.value.ty, T.OptionalType):
            fail = self.new_block(f"{s.name}.missing")
            val = self.gen_optional(s.value, fail)
            ok = self.b.block
            self.start(fail)
            self.block(s.orelse)
            if not self.b.block.is_terminated:
                self.b.unreachable()
            self.start(ok)
            self.bind(loc, val)
            return
        self.bind(loc, self.value_for(s.value, loc.ty))

    def value_for(self, e: ast.Expr, ty: T.Type) -> ir.Value:
        """``e`` as a value of ``ty``: scalars converted, aggregates copied to new memory."""
        if isinstance(ty, (T.StructType, T.BytesType, T.ArrayType)):
            if isinstance(e, ast.Call) and e.name in self.c.structs:
                return self.gen(e)  # fresh memory already
            dst = self.alloca_mem(ty.size)
            self.store_bytes(dst, e, ty)
            return dst
        if isinstance(ty, (T.HeaderType, T.RefType)):
            return self.gen(e)
        return self.rv(e, ty)

    def s_If(self, s: ast.If) -> None:
        then, merge = self.new_block("if.then"), self.new_block("if.end")
        other = self.new_block("if.else") if s.orelse else merge
        self.branch_cond(s.cond, then, other)
        for blk, body in ((then, s.then), (other, s.orelse)):
            if body is None:
                continue
            self.start(blk)
            self.block(body)
            if not self.b.block.is_terminated:
                self.b.branch(merge)
        self.start(merge)

    def s_IfLet(self, s: ast.IfLet) -> None:
        merge = self.new_block("iflet.end")
        other = self.new_block("iflet.else") if s.orelse else merge
        val = self.gen_optional(s.value, other)
        self.env.append({})
        loc = self.c.sym[s]
        assert isinstance(loc, Local)
        self.bind(loc, val)
        self.block(s.then, new_scope=False)
        self.env.pop()
        if not self.b.block.is_terminated:
            self.b.branch(merge)
        if s.orelse:
            self.start(other)
            self.block(s.orelse)
            if not self.b.block.is_terminated:
                self.b.branch(merge)
        self.start(merge)

    def s_Match(self, s: ast.Match) -> None:
        subj = self.rv(s.subject, s.subject.ty)
        merge = self.new_block("match.end")
        default = merge
        blocks = []
        for arm in s.arms:
            blk = self.new_block("match.arm")
            blocks.append((blk, arm))
            if None in arm.patterns:
                default = blk
        sw = self.b.switch(subj, default)
        for blk, arm in blocks:
            for p in arm.patterns:
                if p is not None:
                    sw.add_case(ir.Constant(subj.type, self.c.cval[p]), blk)
        for blk, arm in blocks:
            self.start(blk)
            self.block(arm.body)
            if not self.b.block.is_terminated:
                self.b.branch(merge)
        self.start(merge)

    def s_For(self, s: ast.For) -> None:
        loc = self.c.sym[s]
        assert isinstance(loc, Local) and isinstance(loc.ty, T.IntType)
        ty = self.lt(loc.ty)
        i = self.alloca(ty, s.var, max(1, loc.ty.size))
        self.b.store(self.rv(s.start, loc.ty), i)
        end = self.rv(s.end, loc.ty)
        head, body, latch, done = (
            self.new_block(n) for n in ("for.head", "for.body", "for.next", "for.end")
        )
        self.b.branch(head)
        self.start(head)
        cmp = self.b.icmp_signed if loc.ty.signed else self.b.icmp_unsigned
        self.b.cbranch(cmp("<", self.b.load(i), end), body, done)
        self.start(body)
        self.env.append({loc: i})
        self.f.loops.append((latch, done))
        self.block(s.body, new_scope=False)
        self.f.loops.pop()
        # the checks after a loop reload data_end too: GVN would otherwise reuse the i32 of
        # the loop's last (volatile) load through a phi, whose zero-extension LLVM emits as
        # a 32-bit mov that makes the pointer a scalar for the verifier (found by fuzzing:
        # ~100 `parse` in a loop body)
        self.f.volatile_end = True
        self.env.pop()
        if not self.b.block.is_terminated:
            self.b.branch(latch)
        self.start(latch)
        if s in self.c.latch_reset:  # a path round the loop resized the packet (sema.resize)
            self.reset_cursor()
        self.b.store(self.b.add(self.b.load(i), ir.Constant(ty, 1)), i)
        self.b.branch(head)
        self.start(done)

    def s_Break(self, s: ast.Break) -> None:
        self.b.branch(self.f.loops[-1][1])

    def s_Continue(self, s: ast.Continue) -> None:
        self.b.branch(self.f.loops[-1][0])

    def s_Return(self, s: ast.Return) -> None:
        rt = self.f.func.function_type.return_type
        if self.f.kind is not None:  # one return block with a phi, the shape clang emits
            assert s.value is not None  # sema: a program returns a verdict
            v = self.rv(s.value, T.U32, allow_narrow=True)
            self.f.rets.append((v, self.b.block))
            self.b.branch(self.f.ret_block)
            return
        info = self.f.info
        assert info is not None  # begin(): a fn's state carries its FnInfo
        if isinstance(info.ret, T.OptionalType):
            assert s.value is not None  # sema: `return none`
            self.b.ret(self.optional_value(s.value, info.ret, rt))
        else:
            if s.value is None:  # a bare `return` of a fn without a result (sema)
                if self.f.ret_block is not None:
                    self.b.branch(self.f.ret_block)
                else:
                    self.b.ret_void()
                return
            if self.f.ret_block is not None:  # a subprogram's one return block
                v = self.rv(s.value, info.ret) if rt != ir.VoidType() else None
                if v is not None:
                    self.f.rets.append((v, self.b.block))
                self.b.branch(self.f.ret_block)
                return
            ret = self.gen(s.value) if isinstance(info.ret, T.HeaderType) else None
            if _aggregate(info.ret):
                ret = self.ret_aggregate(s.value, info.ret)
            elif ret is None and rt != ir.VoidType():
                ret = self.rv(s.value, info.ret)
            self.b.ret(ret)

    def ret_aggregate(self, e: ast.Expr, ty: T.Type, mem: ir.Value | None = None) -> ir.Value:
        """Copy the aggregate ``e`` (or the one at ``mem``) into the caller's memory; its
        pointer (what the fn returns)."""
        out = self.f.ret_mem
        if mem is not None:
            self.copy_bytes(out, mem, ty.size, min(8, max(1, ty.align)))
        else:
            self.store_bytes(out, e, ty)
        return out

    def optional_value(self, e: ast.Expr, ty: T.OptionalType, rt: ir.Type) -> ir.Value:
        """What ``return e`` gives back from a fn returning ``ty`` (LLVM ``rt``,
        ``{i1, T}``): ``none`` is ``{0, zero}``; a call of a fn returning the same optional
        passes its result on; any other value is ``{1, value}``."""
        none = ir.Constant(rt, None)
        if _aggregate(ty.inner):  # the pointer is the caller's memory even when missing
            none = self.b.insert_value(none, self.f.ret_mem, 1)
        if isinstance(e, ast.Name) and e.ty == T.VOID:
            return none
        if isinstance(e.ty, T.OptionalType) and isinstance(e, ast.Call) and e.name in self.c.fns:
            r = self.gen(e)
            if _aggregate(ty.inner):  # into this fn's caller's memory
                self.ret_aggregate(e, ty.inner, self.b.extract_value(r, 1))
                r = self.b.insert_value(r, self.f.ret_mem, 1)
            return r
        if isinstance(e.ty, T.OptionalType):  # parse, skip_ext, load ...: {0} when missing
            fail, done = self.new_block("ret.none"), self.new_block("ret.some")
            v = self.gen_optional(e, fail)
            if isinstance(e.ty.inner, T.RefType) and not _aggregate(e.ty.inner.inner):
                v = self.b.load(
                    v, typ=self.lt(e.ty.inner.inner), align=max(1, e.ty.inner.inner.size)
                )
            if _aggregate(ty.inner):
                v = self.ret_aggregate(e, ty.inner, v)
            elif not isinstance(ty.inner, T.HeaderType):
                v = self.conv(v, e.ty.inner, ty.inner)
            some = self.b.insert_value(ir.Constant(rt, None), ir.Constant(I1, 1), 0)
            some = self.b.insert_value(some, v, 1)
            here = self.b.block
            self.b.branch(done)
            self.start(fail)
            self.b.branch(done)
            self.start(done)
            phi = self.b.phi(rt)
            phi.add_incoming(some, here)
            phi.add_incoming(none, fail)
            return phi
        if _aggregate(ty.inner):
            v = self.ret_aggregate(e, ty.inner)
        else:
            v = self.gen(e) if isinstance(ty.inner, T.HeaderType) else self.rv(e, ty.inner)
        out = self.b.insert_value(ir.Constant(rt, None), ir.Constant(I1, 1), 0)
        return self.b.insert_value(out, v, 1)

    def s_Assign(self, s: ast.Assign) -> None:
        self.assign(s)

    def s_CallElse(self, s: ast.CallElse) -> None:
        """``tail_call(map, index) else { ... }``: bpf_tail_call(ctx, map, index) (helper
        12); it returns only when the tail call fails, and then the else block runs."""
        e = s.call
        args = [self.f.ctx, self.gen(e.args[0]), self.rv(e.args[1], T.U32)]
        self.helper(HELPERS["tail_call"].id, I64, args)
        self.block(s.orelse)
        if not self.b.block.is_terminated:
            self.b.unreachable()


def _ext_attr(t: T.Type) -> str | None:
    """``zeroext``/``signext`` for a subprogram value narrower than 32 bits (bool, 8 and
    16 bits): clang's BPF ABI extends such arguments and results in the 64-bit register."""
    if isinstance(t, T.BoolType):
        return "zeroext"
    if isinstance(t, T.IntType) and t.bits < 32:
        return "signext" if t.signed else "zeroext"
    return None


def _inner(t: T.Type) -> T.Type:
    return t.inner if isinstance(t, T.OptionalType) else t


def _name(e: ast.Expr) -> str:
    """The name an ``ast.Name`` spells (a prog_array slot's program)."""
    assert isinstance(e, ast.Name)
    return e.id


def _aggregate(t: T.Type) -> bool:
    """Values kept in memory (structs, addresses, arrays), not in a register."""
    return isinstance(t, (T.StructType, T.BytesType, T.ArrayType))


def generate(
    checked: Checked,
    dbg: DebugAdapter | None = None,
    module: ir.Module | None = None,
    mcpu: str = "v3",
) -> ir.Module:
    """Lower ``checked`` to an LLVM module (triple ``bpfel``).  ``dbg``: the debug-info
    adapter (:class:`~bpfdsl.backend.codegen.debug.DebugAdapter`: BTF and line info) or
    None.  ``mcpu``: the BPF ISA level the module is
    emitted for (``target.MCPUS``); it picks the width of 8- to 32-bit divisions
    (``ExprGen.bpf_div``: ALU32 at v3 and v4)."""
    return CodeGen(checked, dbg, module, mcpu).generate()
