"""Debug-info adapter (back end): connects codegen to :class:`bpfdsl.backend.debuginfo.DebugInfo`.

Codegen calls six hooks (``license_global``, ``config_global``, ``map_global``, ``records_global``,
``program``, ``set_location``) and reads configs through ``load_config``; this module
translates language types (:mod:`bpfdsl.lang.types`) to debug types so LLVM emits ``.BTF``
(maps with typed keys/values, B07 layouts, .rodata VARs) and ``.BTF.ext`` line info that
names the ``.bpfd`` file, line and column.  Integers are the uapi typedefs (``__u32``,
``__be32``...); ``mac_addr``/``ipv6_addr`` are typedefs of ``__u8[6]``/``__u8[16]`` by
those names.
"""

from __future__ import annotations

from llvmlite import ir

from bpfdsl.abi.btf.records import RECORDS_SECTION, RECORDS_VAR
from bpfdsl.abi.btf.run_config import RUN_CONFIG_SECTION, RunConfig, run_config_var
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import ProgramKind
from bpfdsl.backend.debuginfo import DebugInfo, DIType, FunctionDebug, load_config
from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import Config, FnInfo


class DebugAdapter:
    def __init__(self, module: ir.Module, filename: str, source: str, map_lines: dict[str, int]):
        self.di = DebugInfo(module, filename, source=source)
        self.fn: FunctionDebug | None = None
        self.map_lines = map_lines
        self._structs: dict[str, DIType] = {}
        self._bytes: dict[str, DIType] = {}

    def dtype(self, t: T.Type) -> DIType:
        di = self.di
        if isinstance(t, T.IntType):
            return di.int_type(t.name)
        if isinstance(t, T.BoolType):
            return di.int_type("bool")
        if isinstance(t, T.BytesType):
            # typedef __u8 mac_addr[6] / ipv6_addr[16]: the name tells bpftool users and
            # bpfdsl map (btf_values) that the bytes are an address, not a byte list
            if t.name not in self._bytes:
                arr = di.array_type(di.int_type("u8"), t.size)
                self._bytes[t.name] = di.typedef(t.name, arr)
            return self._bytes[t.name]
        if isinstance(t, T.ArrayType):
            return di.array_type(self.dtype(t.elem), t.count)
        if isinstance(t, T.StructType):
            if t.name not in self._structs:
                fields = [(n, self.dtype(ft), off) for n, (off, ft) in t.fields.items()]
                self._structs[t.name] = di.struct_type(t.name, fields, size=t.size)
            return self._structs[t.name]
        if isinstance(t, T.HeaderType):
            return self.header_type(t)
        raise ValueError(f"no debug type for {t}")

    def header_type(self, t: T.HeaderType) -> DIType:
        """The kernel struct of a header view (``struct iphdr``: its fixed part, with the
        fields that are whole bytes; bit fields are left out, the size is the kernel's)."""
        h = t.layout
        if h.name == "byte":
            return self.di.int_type("u8")
        key = "header " + h.c_name
        if key not in self._structs:
            fields = [(n, self.dtype(f.type), f.offset) for n, f in h.fields.items() if not f.width]
            self._structs[key] = self.di.struct_type(h.c_name, fields, size=h.size)
        return self._structs[key]

    def param_type(self, t: T.Type) -> DIType:
        """The BTF type of a subprogram parameter: a scalar, else a pointer to the memory
        (struct, address, header) the caller passes (OptionalType: a nullable pointer)."""
        if isinstance(t, T.OptionalType):
            t = t.inner
        if isinstance(t, (T.IntType, T.BoolType)):
            return self.dtype(t)
        return self.di.pointer_type(self.dtype(t))

    def license_global(self, text: str) -> ir.GlobalVariable:
        return self.di.license(text)

    def config_global(self, name: str, cfg: Config, line: int) -> ir.GlobalVariable:
        return self.di.config_global(name, self.dtype(cfg.ty), cfg.value, line=line)

    def load_config(self, builder: ir.IRBuilder, gv: ir.GlobalVariable) -> ir.Value:
        return load_config(builder, gv)

    def map_global(self, name: str, mt: T.MapType) -> ir.GlobalVariable:
        sizes = {}
        if mt.record is not None and mt.map_type == MapType.PERF_EVENT_ARRAY:
            sizes = {"key_size": 4, "value_size": 4}  # u32 index -> perf event fd
        return self.di.map_global(
            name,
            mt.map_type,
            max_entries=mt.max_entries,
            key=self.dtype(mt.key) if mt.key is not None else None,
            value=self.dtype(mt.value) if mt.value is not None else None,
            map_flags=mt.flags,
            pinning=mt.pinning,
            line=self.map_lines.get(name, 0),
            **sizes,
        )

    def records_global(self, maps: dict[str, T.MapType]) -> ir.GlobalVariable | None:
        """The BTF description of the records of every event map (bpfdsl.abi.btf.records)."""
        recs = [
            (n, self.dtype(m.record)) for n, m in maps.items() if isinstance(m.record, T.StructType)
        ]
        if not recs:
            return None
        return self.di.records_global(RECORDS_VAR, RECORDS_SECTION, recs)

    def run_config_global(self, prog: str, rc: RunConfig, line: int) -> ir.GlobalVariable:
        """libxdp's ``XDP_RUN_CONFIG(prog)``: priority and every action's chain-call bit."""
        fields = [(m, self.di.uint_member(v)) for m, v in rc.members()]
        return self.di.pointer_struct_global(run_config_var(prog), RUN_CONFIG_SECTION, fields, line)

    def program(self, func: ir.Function, decl: ast.ProgDecl, kind: ProgramKind) -> None:
        self.fn = self.di.function(func, line=decl.span.line, ctx=kind.ctx, arg_name=decl.ctx)

    def subprogram(
        self, func: ir.Function, info: FnInfo, ctx_kind: str | None = None, pos: bool = False
    ) -> None:
        """The DISubprogram of a fn emitted as a BPF subprogram (``noinline``/``global``
        fn, loop callback): BTF FUNC (linkage static for ``internal``, global otherwise)
        with a FUNC_PROTO naming its parameters, as clang writes ``static __noinline`` and
        global functions; its body then gets line info.  ``ctx_kind``: the fn takes the
        context first (``struct ctx_kind *ctx``), and with ``pos`` then the caller's parse
        cursor (``void *pos``): its hidden arguments (CodeGen.hidden_args).  A global fn's
        context carries the decl tag ``arg:ctx`` (the kernel's ``__arg_ctx``): the kernel
        verifies it alone and knows the argument is the context by its BTF only."""
        params = [(n, self.param_type(t)) for n, t in info.params]
        tags = {0: "arg:ctx"} if ctx_kind is not None and info.linkage == "global" else None
        if ctx_kind is not None:
            di = self.di
            hidden = [("ctx", di.pointer_type(di.ctx_type(ctx_kind)))]
            if pos:
                hidden.append(("pos", di.pointer_type(None)))
            params = [*hidden, *params]
        void = info.ret == T.VOID
        ret = None if void else self.dtype(info.ret)
        self.fn = self.di.function(
            func, line=info.decl.span.line, ctx=None, program=False, params=params, ret=ret,
            void=void, arg_tags=tags,
        )  # fmt: skip

    def loop_trampoline(self, func: ir.Function, info: FnInfo) -> None:
        """The DISubprogram of the loop subprogram of packet callback ``info``
        (CodeGen.declare_loop_trampoline): ``static long NAME__loop(__u64 i, void *frame)``,
        the bpf_callback_t shape of bpf_loop, BTF linkage static."""
        di = self.di
        params = [("i", di.int_type("u64")), ("frame", di.pointer_type(None))]
        self.fn = di.function(
            func, line=info.decl.span.line, ctx=None, program=False, params=params,
            ret=di.int_type("i64"),
        )  # fmt: skip

    def prog_array(self, name: str, mt: T.MapType, slots: int) -> ir.GlobalVariable:
        return self.di.prog_array_global(
            name, max_entries=mt.max_entries, slots=slots, line=self.map_lines.get(name, 0)
        )

    def end_program(self) -> None:
        self.fn = None

    def set_location(self, builder: ir.IRBuilder, span: Span) -> None:
        if self.fn is not None:
            builder.debug_metadata = self.fn.loc(span.line, span.col)
        else:
            builder.debug_metadata = None

    def finalize(self) -> None:
        self.di.finalize()
