"""Semantic analysis (front end, last stage): ast.Program -> :class:`Checked`.

Resolves names, gives every expression a type (``expr.ty``) and folds constants
(``Checked.cval``: the raw value as stored in memory, so a be16 literal 53 is 0x3500),
checks byte order, map keys and values, program-kind return values, optional handling,
loop bounds and the invalidation of header views by packet-resizing helpers (B06).
All diagnostics are collected; :func:`check` raises one DiagnosticError with all of them.
Expression typing lives in :mod:`bpfdsl.sema_expr`; this module holds declarations and
statements.
"""

from __future__ import annotations

from . import ast
from . import types as T
from .diagnostics import Diagnostic, DiagnosticError, Span, error
from .headers import HEADERS
from .sema_decls import (  # noqa: F401  (Local, Const, Config, FnInfo: bpfdsl.sema's names)
    BPF_F_NO_PREALLOC,
    MAP_KINDS,
    PERCPU_KINDS,
    Config,
    Const,
    DeclChecker,
    FnInfo,
    Local,
    _Plain,
    is_builtin_constant,
)
from .sema_stmt import StmtChecker
from .uapi import PROGRAM_KINDS, ProgramKind, kind_for_keyword


class Checked(_Plain):
    """Result of sema: everything codegen needs, keyed by AST node where per-node.

    ``cval``: folded scalar constants (raw memory value); ``cbytes``: folded byte
    constants; ``sym``: Name/Let/For -> symbol; ``optype``: Compare operand type;
    ``pkt_reset``: calls that resize the packet; ``warnings``: compile-time warnings."""

    __slots__ = (
        "program",
        "filename",
        "license",
        "structs",
        "consts",
        "configs",
        "maps",
        "map_decls",
        "fns",
        "progs",
        "cval",
        "cbytes",
        "sym",
        "optype",
        "pkt_reset",
        "warnings",
    )

    def __init__(self, program: ast.Program, filename: str, license: str = "GPL") -> None:
        self.program = program
        self.filename = filename
        self.license = license
        self.structs: dict[str, T.StructType] = {}
        self.consts: dict[str, Const] = {}
        self.configs: dict[str, Config] = {}
        self.maps: dict[str, T.MapType] = {}
        self.map_decls: dict[str, ast.MapDecl] = {}
        self.fns: dict[str, FnInfo] = {}
        self.progs: list[tuple[ast.ProgDecl, ProgramKind]] = []
        self.cval: dict[ast.Expr, int] = {}
        self.cbytes: dict[ast.Expr, bytes] = {}
        self.sym: dict[ast.Node, object] = {}
        self.optype: dict[ast.Expr, T.Type] = {}
        self.pkt_reset: set[ast.Node] = set()
        self.warnings: list[Diagnostic] = []


class Sema(StmtChecker, DeclChecker):
    """One pass over declarations, then over each function and program body."""

    def __init__(self, prog: ast.Program, filename: str):
        self.c = Checked(prog, filename)
        self.diags: list[Diagnostic] = []
        self.scopes: list[dict[str, object]] = []
        self.kind: ProgramKind | None = None
        self.fn: FnInfo | None = None
        self.ctx_name: str | None = None
        self.stale: dict[Local, int] = {}
        self.loop_depth = 0
        self.last_ip: Local | None = None
        self.payload_writes: list = []  # (span, L4 header Local) of payload byte writes
        self.gone: dict[str, tuple[Local, int]] = {}  # out of scope: name -> (local, end line)

    # ---- helpers ----
    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None:
        if code == "type-mismatch" and T.ERR.name in msg:
            # An operand whose type is the error type already has its error: any rule that
            # names it ("found <error>") is a follow-up, never news to the user.
            return
        self.diags.append(error(code, msg, span, hint=hint))

    def suggest(self, name: str, options) -> str | None:
        import difflib  # only on an error: ~2 ms of imports

        m = difflib.get_close_matches(name, list(options), n=1)
        return f"did you mean `{m[0]}`?" if m else None

    def resolve_type(self, t: ast.TypeRef) -> T.Type:
        if isinstance(t, ast.ArrayType):
            from .sema_expr import const_int

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
        if t.name in HEADERS:
            return T.HeaderType(t.name, HEADERS[t.name])
        names = list(T.BUILTIN_TYPES) + list(self.c.structs)
        self.err(
            "unknown-type",
            f"unknown type `{t.name}`",
            t.span,
            self.suggest(t.name, names) or "types: " + ", ".join(names[:12]),
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
                f"`{t.name}` is a packet header view, not a value: it cannot be {what}",
                t.span,
                "store the fields you need (e.g. `saddr: be32`), or pass the header to a "
                "`fn` parameter",
            )
            return T.U64
        return ty

    def lookup(self, name: str):
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, sym: object) -> None:
        """Bind a local (let, param, loop variable); built-in constant names are refused
        (``let XDP_PASS = 1`` would silently change what ``return XDP_PASS`` means)."""
        if is_builtin_constant(name):
            self.err(
                "reserved-name",
                f"`{name}` is a built-in constant and cannot be redefined",
                getattr(sym, "span", None),
                "pick another name",
            )
        self.scopes[-1][name] = sym

    # ---- declarations ----
    def run(self) -> Checked:
        from .sema_expr import ExprChecker, const_int

        self.ex = ExprChecker(self)
        items = self.c.program.items
        self.check_names(items)
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
                self.scopes = [{}]
                self.ex.expect(it.value, ty)
                v = self.c.cval.get(it.value)
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
                self.scopes = [{}]
                if len(self.diags) > n_diags or not isinstance(ty, T.IntType):
                    if len(self.diags) == n_diags:
                        self.err(
                            "config-type",
                            "a config value must be an integer type",
                            it.type.span,
                            f"use u8/u16/u32/u64 (0 or 1 for a flag), e.g. `config {it.name}: u8 = 0`",
                        )
                    self.ex.expr(it.value)  # errors in the value still count
                    # declared anyway, with the error type: its uses add no further errors
                    self.c.configs[it.name] = Config(it.name, T.ERR, 0, rodata_off)
                    continue
                self.ex.expect(it.value, ty)
                rodata_off = (rodata_off + ty.align - 1) // ty.align * ty.align
                self.c.configs[it.name] = Config(
                    it.name, ty, self.c.cval.get(it.value, 0), rodata_off
                )
                rodata_off += ty.size
            elif isinstance(it, ast.MapDecl):
                self.map_decl(it)
        for it in items:
            if isinstance(it, ast.FnDecl):
                params = [(p.name, self.resolve_type(p.type)) for p in it.params]
                ret = self.resolve_type(it.ret) if it.ret else T.VOID
                self.c.fns[it.name] = FnInfo(it, params, ret)
        for it in items:
            if isinstance(it, ast.FnDecl):
                self.body_fn(self.c.fns[it.name])
            elif isinstance(it, ast.ProgDecl):
                self.body_prog(it)
        del const_int
        self.check_recursion()
        if not any(isinstance(it, ast.ProgDecl) for it in items):
            self.err(
                "no-programs",
                "no programs: the object would hold nothing to load",
                Span(self.c.filename, 1, 1),
                "declare e.g. `xdp fn name(ctx) { ... }`",
            )
        if self.diags:
            raise DiagnosticError(self.diags, self.c.program.source)
        return self.c

    def globals_scope(self) -> dict[str, object]:
        g: dict[str, object] = {}
        g.update(self.c.consts)
        g.update(self.c.configs)
        g.update(self.c.maps)
        return g

    def body_fn(self, info: FnInfo) -> None:
        self.fn, self.kind, self.ctx_name = info, None, None
        self.scopes, self.gone = [self.globals_scope(), {}], {}
        for (name, ty), p in zip(info.params, info.decl.params, strict=True):
            loc = Local(name, ty, p.span)
            self.c.sym[p] = loc
            self.bind(name, loc)
        self.block(info.decl.body, new_scope=False)
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
        self.kind, self.ctx_name, self.stale, self.last_ip = kind, p.ctx, {}, None
        self.scopes, self.gone = [self.globals_scope(), {p.ctx: T.CTX}], {}
        self.payload_writes: list = []
        self.block(p.body, new_scope=False)
        if self.payload_writes:
            from .sema_csum import payload_warnings

            payload_warnings(self, p)
        if not self.diverges(p.body):
            self.err(
                "missing-return",
                f"program `{p.name}` can reach its end without a return",
                p.body.span,
                "end every path with `return ACTION`",
            )
        self.kind = None


def check(prog: ast.Program, filename: str = "<input>") -> Checked:
    """Check ``prog``; returns :class:`Checked`.  Raises DiagnosticError with all errors."""
    return Sema(prog, filename).run()
