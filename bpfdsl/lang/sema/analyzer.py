"""Semantic analysis (front end, last stage): ast.Program -> :class:`Checked`.

Resolves names, gives every expression a type (``expr.ty``) and folds constants
(``Checked.cval``: the raw value as stored in memory, so a be16 literal 53 is 0x3500),
checks byte order, map keys and values, program-kind return values, optional handling,
loop bounds and the invalidation of header views by packet-resizing helpers (B06).
All diagnostics are collected; :func:`check` raises one DiagnosticError with all of them.
Expression typing lives in :mod:`bpfdsl.lang.sema.expr`; this module holds declarations and
statements.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from bpfdsl.abi.prog_types import PROGRAM_KINDS, ProgramKind, kind_for_keyword
from bpfdsl.diagnostics import Diagnostic, DiagnosticError, Span, error
from bpfdsl.lang import ast, c_names
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import HEADERS
from bpfdsl.lang.sema.csum import payload_warnings
from bpfdsl.lang.sema.decls import DeclChecker
from bpfdsl.lang.sema.expr import ExprChecker
from bpfdsl.lang.sema.meta import start as meta_start
from bpfdsl.lang.sema.params import written_params
from bpfdsl.lang.sema.refs import check_refs
from bpfdsl.lang.sema.resize import LoopPaths, pkt_changing_fns
from bpfdsl.lang.sema.run_config import check_run_config
from bpfdsl.lang.sema.stmt import StmtChecker
from bpfdsl.lang.sema.subprog_ctx import check_subprog_ctx
from bpfdsl.lang.sema.symbols import (
    BUILTIN_STRUCTS,
    CURSOR_UNKNOWN,
    NULLABLE_ARG,
    Checked,
    Config,
    Const,
    FnInfo,
    Local,
    MetaState,
    const_int,
    is_builtin_constant,
)


class Sema(StmtChecker, DeclChecker):
    """One pass over declarations, then over each function and program body."""

    def __init__(self, prog: ast.Program, filename: str):
        self.c = Checked(prog, filename)
        self.diags: list[Diagnostic] = []
        self.scopes: list[dict[str, object]] = []
        self.kind: ProgramKind | None = None
        self.fn: FnInfo | None = None
        self.prog: ast.ProgDecl | None = None  # the program being checked
        self.ctx_name: str | None = None
        self.stale: dict[Local, int] = {}
        self.resized: frozenset[ast.Node] = frozenset()  # resize calls on this path (resize.py)
        self.loop_paths: list[LoopPaths] = []  # per enclosing loop: its continue/break states
        self.view_uses: list[tuple[Local, Span]] = []  # header views read, in order
        self.meta = MetaState()  # metadata bytes reserved on every path here (sema.meta)
        self.loop_depth = 0
        # what the parse cursor is just past on every path to here (see symbols.CURSOR_UNKNOWN)
        self.cursor: object = None
        self.parse_from: dict[ast.Parse, object] = {}  # parse -> the cursor it started at
        self.follows: dict[Local, object] = {}  # parsed header -> the cursor it started at
        self.pushed: dict[Local, int] = {}  # view a push made -> its offset (sema.encap)
        # (span, L4 header Local) of payload byte writes; span None: the L4 checksum written
        self.payload_writes: list[tuple[Span | None, Local]] = []
        self.gone: dict[str, tuple[Local, int]] = {}  # out of scope: name -> (local, end line)

    # ---- helpers ----
    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None:
        if code == "type-mismatch" and T.ERR.name in msg:
            # An operand whose type is the error type already has its error: any rule that
            # names it ("found <error>") is a follow-up, never news to the user.
            return
        self.diags.append(error(code, msg, span, hint=hint))

    def source_text(self, span: Span) -> str:
        """The source text ``span`` covers (its first line when it spans several)."""
        lines = self.c.program.source.split("\n")
        if not 1 <= span.line <= len(lines):
            return ""
        line = lines[span.line - 1]
        end = span.end_col if span.end_line == span.line and span.end_col else len(line) + 1
        return line[span.col - 1 : end - 1]

    def suggest(self, name: str, options: Iterable[str]) -> str | None:

        m = difflib.get_close_matches(name, list(options), n=1)
        return f"did you mean `{m[0]}`?" if m else None

    def resolve_type(self, t: ast.TypeRef) -> T.Type:
        if isinstance(t, ast.ArrayType):
            n = const_int(self, t.length)
            if n is None or not 0 < n <= 4096:
                self.err(
                    "array-size", "array length must be a constant from 1 to 4096", t.length.span
                )
                n = 1
            return T.ArrayType(self.value_type(t.elem, "an array element"), n)
        if t.name in T.BUILTIN_TYPES:
            return T.BUILTIN_TYPES[t.name]
        if t.name in self.c.structs:
            return self.c.structs[t.name]
        if t.name in self.c.headers or t.name in HEADERS:
            h = self.c.header(t.name)
            return T.HeaderType(t.name, h) if h is not None else T.ERR
        names = list(T.BUILTIN_TYPES) + list(self.c.structs)
        header = c_names.header_of(t.name)
        self.err(
            "unknown-type",
            f"unknown type `{t.name}`",
            t.span,
            c_names.type_hint(t.name)
            or (f"the kernel's `struct {t.name}` is the header `{header}`" if header else None)
            or self.suggest(t.name, names)
            or "types: " + ", ".join(names[:12]),
        )
        return T.U64

    def value_type(self, t: ast.TypeRef, what: str) -> T.Type:
        """:meth:`resolve_type` for a place that holds a value (struct field, map key or
        value, array element): a header is a view of packet bytes, not a value, so it is
        refused there (it may only be a `fn` parameter)."""
        ty = self.resolve_type(t)
        if isinstance(ty, T.HeaderType):
            self.err(
                "header-not-value",
                f"`{ty.name}` is a packet header view, not a value: it cannot be {what}",
                t.span,
                "store the fields you need (e.g. `saddr: be32`), or pass the header to a "
                "`fn` parameter",
            )
            return T.U64
        return ty

    def lookup(self, name: str) -> object:
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, sym: Local) -> None:
        """Bind a local (let, param, loop variable); built-in constant names are refused
        (``let XDP_PASS = 1`` would silently change what ``return XDP_PASS`` means)."""
        if is_builtin_constant(name):
            self.err(
                "reserved-name",
                f"`{name}` is a built-in constant and cannot be redefined",
                sym.span,
                "pick another name",
            )
        self.scopes[-1][name] = sym

    # ---- declarations ----
    def run(self) -> Checked:
        self.ex = ExprChecker(self)
        items = self.c.program.items
        self.check_names(items)
        for it in items:
            if isinstance(it, ast.HeaderDecl):
                self.header_decl(it)
        self.c.structs.update(BUILTIN_STRUCTS)  # kernel structs (bpf_fib_lookup)
        for it in items:
            if isinstance(it, ast.StructDecl):
                members = [(f.name, self.value_type(f.type, "a struct field")) for f in it.fields]
                self.c.structs[it.name] = T.make_struct(it.name, members)
        rodata_off = 0
        for it in items:
            if isinstance(it, ast.License):
                self.c.license = it.text
                if not it.text.strip() or "\0" in it.text:
                    self.err(
                        "bad-license",
                        "the license string is empty",
                        it.span,
                        'write e.g. `license "GPL"` (GPL-only helpers need a GPL-'
                        "compatible license)",
                    )
            elif isinstance(it, ast.ConstDecl):
                ty = self.resolve_type(it.type)
                self.scopes = [dict(self.c.consts)]  # `const B: u32 = A + 4`: earlier consts
                self.ex.expect(it.value, ty)
                v = self.ex.const_as(it.value, ty)  # `const B: i64 = (1 as i32) - 2` is -1
                data = self.c.cbytes.get(it.value)
                if v is None and data is None:
                    self.err(
                        "not-constant", f"`{it.name}` needs a compile-time value", it.value.span
                    )
                    v = 0
                self.c.consts[it.name] = Const(it.name, ty, v or 0, data)
            elif isinstance(it, ast.ConfigDecl):
                n_diags = len(self.diags)
                ty = self.resolve_type(it.type)
                self.scopes = [dict(self.c.consts)]  # a default from consts: `= BASE * 3`
                if len(self.diags) > n_diags or not isinstance(ty, T.IntType):
                    if len(self.diags) == n_diags:
                        self.err(
                            "config-type",
                            "a config value must be an integer type",
                            it.type.span,
                            "use an integer type: u8..u64 or i8..i64 (0 or 1 for a flag), "
                            "be16/be32 for a port or an address in network order, e.g. "
                            f"`config {it.name}: u8 = 0`",
                        )
                    self.ex.expr(it.value)  # errors in the value still count
                    # declared anyway, with the error type: its uses add no further errors
                    self.c.configs[it.name] = Config(it.name, T.ERR, 0, rodata_off)
                    continue
                self.ex.expect(it.value, ty)
                rodata_off = (rodata_off + ty.align - 1) // ty.align * ty.align
                self.c.configs[it.name] = Config(
                    it.name, ty, self.ex.const_as(it.value, ty) or 0, rodata_off
                )
                rodata_off += ty.size
            elif isinstance(it, ast.MapDecl):
                self.map_decl(it)
        for it in items:
            if isinstance(it, ast.FnDecl):
                self.c.fns[it.name] = self.fn_info(it)
        self.c.packet_fns, self.c.packet_reach = self.find_packet_fns()
        self.c.pkt_changing_fns = pkt_changing_fns(self.c.fns)
        check_subprog_ctx(self)
        self.check_subprog_packet()
        for it in items:
            if isinstance(it, ast.FnDecl):
                self.body_fn(self.c.fns[it.name])
            elif isinstance(it, ast.ProgDecl):
                self.body_prog(it)
        self.check_recursion()
        self.check_tail_calls()
        self.c.written_params = written_params(self.c.fns)
        if not any(isinstance(it, ast.ProgDecl) for it in items):
            self.err(
                "no-programs",
                "no programs: the object would hold nothing to load",
                Span(self.c.filename, 1, 1),
                "declare e.g. `xdp fn name(ctx) { ... }`",
            )
        self.check_license(items)
        if self.diags:
            raise DiagnosticError(self.diags, self.c.program.source)
        return self.c

    def check_license(self, items: list[ast.Node]) -> None:
        """A program needs a ``license``: without one the object has no ``license``
        section, which libbpf and the kernel take as proprietary (bpf_prog_load's
        license_is_gpl_compatible("") is false), refusing every GPL-only helper
        ("cannot call GPL-restricted function from non-GPL compatible program").  The
        error is at the first program (the file start when there is none)."""
        if any(isinstance(it, ast.License) for it in items):
            return
        progs = [it for it in items if isinstance(it, ast.ProgDecl)]
        if not progs:
            return  # no-programs says what is missing first
        self.err(
            "missing-license",
            "the file declares no `license`: the kernel would take the program as proprietary",
            progs[0].span,
            'add `license "GPL"` at the top of the file (or another GPL-compatible license '
            'such as "Dual BSD/GPL"): GPL-only helpers need a GPL-compatible license (the '
            "`perf_event_output` builtin's bpf_xdp_event_output is one), and without a "
            "license libbpf and the kernel load the program as proprietary",
        )

    def globals_scope(self) -> dict[str, object]:
        g: dict[str, object] = {}
        g.update(self.c.consts)
        g.update(self.c.configs)
        g.update(self.c.maps)
        return g

    def body_fn(self, info: FnInfo) -> None:
        self.fn, self.kind = info, None
        self.scopes, self.gone = [self.globals_scope(), {}], {}
        # where the caller's cursor is, the fn cannot know: no L4 view it parses gets an IP
        # parent from a header parsed before the call (see symbols.CURSOR_UNKNOWN)
        self.cursor, self.stale, self.resized = CURSOR_UNKNOWN, {}, frozenset()
        self.meta = meta_start(None)
        for (name, ty), p in zip(info.params, info.decl.params, strict=True):
            if info.linkage == "global" and not isinstance(
                ty, (T.IntType, T.BoolType, T.ErrorType)
            ):
                # the kernel verifies a global fn for any caller: a pointer may be NULL
                ty = T.OptionalType(ty, NULLABLE_ARG)
            loc = Local(name, ty, p.span)
            self.c.sym[p] = loc
            self.bind(name, loc)
        self.block(info.decl.body, new_scope=False)
        check_refs(self, info.decl.body)
        if info.ret != T.VOID and not self.diverges(info.decl.body):
            self.err(
                "missing-return",
                f"not every path of `{info.decl.name}` returns a value",
                info.decl.body.span,
                f"end every path with `return <{info.ret}>`",
            )
        self.fn = None

    def body_prog(self, p: ast.ProgDecl) -> None:
        kind = kind_for_keyword(p.keyword)
        if kind is None:
            kws = [k.keyword for k in PROGRAM_KINDS if k.keyword]
            self.err(
                "unknown-program-kind",
                f"unknown program kind `{p.keyword}`",
                p.span,
                "program kinds: " + ", ".join(kws),
            )
            return
        self.c.progs.append((p, kind))
        self.prog = p
        self.kind, self.ctx_name, self.stale, self.cursor = kind, p.ctx, {}, None
        self.resized = frozenset()
        self.meta = meta_start(kind.keyword)
        self.scopes, self.gone = [self.globals_scope(), {p.ctx: T.CTX}], {}
        rc = check_run_config(self, p, kind)
        if rc is not None:
            self.c.run_configs[p.name] = rc
        self.payload_writes = []
        resizes = len(self.c.pkt_reset)
        self.block(p.body, new_scope=False)
        if len(self.c.pkt_reset) != resizes:
            self.c.resizing_progs.add(p)
        check_refs(self, p.body)
        if self.payload_writes:
            payload_warnings(self, p)
        if not self.diverges(p.body):
            self.err(
                "missing-return",
                f"program `{p.name}` can reach its end without a return",
                p.body.span,
                "end every path with `return ACTION`",
            )
        self.kind, self.prog = None, None


def check(prog: ast.Program, filename: str = "<input>") -> Checked:
    """Check ``prog``; returns :class:`Checked`.  Raises DiagnosticError with all errors."""
    return Sema(prog, filename).run()
