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

import difflib
from dataclasses import dataclass, field

from . import ast
from . import types as T
from .diagnostics import Diagnostic, DiagnosticError, Span, error
from .headers import HEADERS
from .sema_stmt import StmtChecker
from .uapi import PROGRAM_KINDS, MapType, ProgramKind, kind_for_keyword

# language map kind -> (kernel map type, fixed key type, fixed value type)
MAP_KINDS: dict[str, tuple[MapType, T.Type | None, T.Type | None]] = {
    "array": (MapType.ARRAY, T.U32, None),
    "hash": (MapType.HASH, None, None),
    "percpu_array": (MapType.PERCPU_ARRAY, T.U32, None),
    "percpu_hash": (MapType.PERCPU_HASH, None, None),
    "lru_hash": (MapType.LRU_HASH, None, None),
    "lru_percpu_hash": (MapType.LRU_PERCPU_HASH, None, None),
    "lpm_trie": (MapType.LPM_TRIE, None, None),
    "devmap": (
        MapType.DEVMAP,
        T.U32,
        T.make_struct("bpf_devmap_val", [("ifindex", T.U32), ("prog_fd", T.I32)]),
    ),
    "devmap_hash": (
        MapType.DEVMAP_HASH,
        T.U32,
        T.make_struct("bpf_devmap_val", [("ifindex", T.U32), ("prog_fd", T.I32)]),
    ),
    "cpumap": (
        MapType.CPUMAP,
        T.U32,
        T.make_struct("bpf_cpumap_val", [("qsize", T.U32), ("prog_fd", T.I32)]),
    ),
    # lookups give the kernel's struct bpf_xdp_sock: only queue_id is readable (B10)
    "xskmap": (MapType.XSKMAP, T.U32, T.make_struct("bpf_xdp_sock", [("queue_id", T.U32)])),
    "sockmap": (MapType.SOCKMAP, T.U32, T.U32),
    "sockhash": (MapType.SOCKHASH, None, T.U32),
}
PERCPU_KINDS = {"percpu_array", "percpu_hash", "lru_percpu_hash"}
BPF_F_NO_PREALLOC = 1


@dataclass(eq=False)
class Local:
    """A local variable (or parameter); ``ty`` its type; headers may go stale (B06)."""

    name: str
    ty: T.Type
    span: Span
    header_parent: Local | None = None  # L4 header -> the IP header it was parsed after
    bounds: tuple[int, int] | None = None  # loop variable: start..end (end exclusive)


@dataclass(eq=False)
class Const:
    name: str
    ty: T.Type
    value: int  # raw (memory) value
    data: bytes | None = None  # byte-string constants (mac_addr, ipv6_addr, prefixes)


@dataclass(eq=False)
class Config:
    """A load-time setting in .rodata; ``value`` raw default, ``offset`` in .rodata (bytes)."""

    name: str
    ty: T.Type
    value: int
    offset: int = 0


@dataclass(eq=False)
class FnInfo:
    decl: ast.FnDecl
    params: list[tuple[str, T.Type]]
    ret: T.Type


@dataclass
class Checked:
    """Result of sema: everything codegen needs, keyed by AST node where per-node."""

    program: ast.Program
    filename: str
    license: str = "GPL"
    structs: dict[str, T.StructType] = field(default_factory=dict)
    consts: dict[str, Const] = field(default_factory=dict)
    configs: dict[str, Config] = field(default_factory=dict)
    maps: dict[str, T.MapType] = field(default_factory=dict)
    map_decls: dict[str, ast.MapDecl] = field(default_factory=dict)
    fns: dict[str, FnInfo] = field(default_factory=dict)
    progs: list[tuple[ast.ProgDecl, ProgramKind]] = field(default_factory=list)
    cval: dict[ast.Expr, int] = field(default_factory=dict)  # folded scalar constants
    cbytes: dict[ast.Expr, bytes] = field(default_factory=dict)  # folded byte constants
    sym: dict[ast.Node, object] = field(default_factory=dict)  # Name/Let/For -> symbol
    optype: dict[ast.Expr, T.Type] = field(default_factory=dict)  # Compare operand type
    pkt_reset: set[ast.Node] = field(default_factory=set)  # calls that resize the packet


class Sema(StmtChecker):
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

    # ---- helpers ----
    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None:
        self.diags.append(error(code, msg, span, hint=hint))

    def suggest(self, name: str, options) -> str | None:
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
            return T.ArrayType(self.resolve_type(t.elem), n)
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

    def lookup(self, name: str):
        for s in reversed(self.scopes):
            if name in s:
                return s[name]
        return None

    def bind(self, name: str, sym: object) -> None:
        self.scopes[-1][name] = sym

    # ---- declarations ----
    def run(self) -> Checked:
        from .sema_expr import ExprChecker, const_int

        self.ex = ExprChecker(self)
        items = self.c.program.items
        self.check_names(items)
        for it in items:
            if isinstance(it, ast.StructDecl):
                members = [(f.name, self.resolve_type(f.type)) for f in it.fields]
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
                ty = self.resolve_type(it.type)
                if not isinstance(ty, T.IntType):
                    self.err("config-type", "a config value must be an integer type", it.type.span)
                    continue
                self.scopes = [{}]
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
        if self.diags:
            raise DiagnosticError(self.diags, self.c.program.source)
        return self.c

    def check_recursion(self) -> None:
        """fns are inlined, and the kernel refuses recursive BPF calls: no call cycles."""
        calls = {n: set() for n in self.c.fns}
        for name, info in self.c.fns.items():
            stack = [info.decl.body]
            while stack:
                node = stack.pop()
                if isinstance(node, ast.Call) and node.name in calls:
                    calls[name].add(node.name)
                if isinstance(node, list):
                    stack.extend(node)
                elif isinstance(node, (ast.Node, ast.MatchArm)):
                    stack.extend(v for k, v in vars(node).items() if k not in ("span", "ty"))
                elif isinstance(node, dict):
                    stack.extend(node.values())
        for start, info in self.c.fns.items():
            seen, todo = set(), [start]
            while todo:
                for callee in calls[todo.pop()]:
                    if callee == start:
                        self.err(
                            "recursion",
                            f"fn `{start}` calls itself (directly or through "
                            "other fns); BPF programs cannot recurse",
                            info.decl.span,
                            "use a bounded `for` loop",
                        )
                        todo = []
                        break
                    if callee not in seen:
                        seen.add(callee)
                        todo.append(callee)

    def check_names(self, items: list) -> None:
        """Top-level names are one namespace (they become ELF symbols); ``LICENSE`` and
        ``llvm*`` are taken by the object format."""
        seen: dict[str, Span] = {}
        for it in items:
            name = getattr(it, "name", None)
            if name is None:
                continue
            if isinstance(it, ast.StructDecl) and (name in T.BUILTIN_TYPES or name in HEADERS):
                self.err(
                    "reserved-name",
                    f"`{name}` is a built-in type",
                    it.span,
                    "pick another name for the struct",
                )
            elif name == "LICENSE" or name.startswith("llvm"):
                self.err(
                    "reserved-name",
                    f"`{name}` is reserved in the object file",
                    it.span,
                    "pick another name",
                )
            elif name in seen:
                self.err(
                    "duplicate-name",
                    f"`{name}` is already defined at line {seen[name].line}",
                    it.span,
                    "give each map, fn, program, struct, const and config its own name",
                )
            else:
                seen[name] = it.span
            if isinstance(it, ast.StructDecl) and not it.fields:
                self.err(
                    "empty-struct",
                    f"struct `{name}` has no fields",
                    it.span,
                    "maps and the kernel need values of at least one byte",
                )
            if isinstance(it, (ast.FnDecl, ast.StructDecl)):
                inner = (
                    [p.name for p in it.params]
                    if isinstance(it, ast.FnDecl)
                    else [f.name for f in it.fields]
                )
                dups = {n for n in inner if inner.count(n) > 1}
                if dups:
                    self.err(
                        "duplicate-name", f"`{sorted(dups)[0]}` appears twice in `{name}`", it.span
                    )

    def map_decl(self, d: ast.MapDecl) -> None:
        from .sema_expr import const_int

        if d.kind not in MAP_KINDS:
            self.err(
                "unknown-map-kind",
                f"unknown map kind `{d.kind}`",
                d.kind_span,
                self.suggest(d.kind, MAP_KINDS) or "map kinds: " + ", ".join(MAP_KINDS),
            )
            return
        mt, fkey, fval = MAP_KINDS[d.kind]
        targs = [self.resolve_type(t) for t in d.type_args]
        key, val = fkey, fval
        if fkey is None or fval is None:
            need = [x for x, f in (("key", fkey), ("value", fval)) if f is None]
            if len(targs) == 2:
                key, val = (targs[0] if fkey is None else fkey), targs[1]
            elif len(targs) == 1 and len(need) == 1:
                key, val = (targs[0], fval) if need == ["key"] else (fkey, targs[0])
            else:
                self.err(
                    "map-types",
                    f"map kind `{d.kind}` needs <{', '.join(need)}> types",
                    d.kind_span,
                    f"e.g. `map {d.name}: {d.kind}<u32, u64>(max_entries: 16)`",
                )
                return
        elif len(targs) == 1 and d.kind in ("array", "percpu_array"):
            val = targs[0]
        elif len(targs) == 2 and d.kind in ("array", "percpu_array"):
            if targs[0] != T.U32:
                self.err(
                    "key-type",
                    f"`{d.kind}` keys are u32 (the kernel requires 4 bytes)",
                    d.type_args[0].span,
                    "declare it as <u32, VALUE>",
                )
            val = targs[1]
        elif targs:
            self.err(
                "map-types",
                f"map kind `{d.kind}` has fixed key/value types; remove <...>",
                d.type_args[0].span,
            )
        if val is None:
            self.err(
                "map-types",
                f"map kind `{d.kind}` needs a value type",
                d.kind_span,
                f"e.g. `map {d.name}: {d.kind}<u32, u64>(max_entries: 16)`",
            )
            return
        flags = 0
        if d.kind == "lpm_trie":
            flags |= BPF_F_NO_PREALLOC
            if not (
                isinstance(key, T.StructType)
                and key.fields
                and next(iter(key.fields.values())) == (0, T.U32)
            ):
                self.err(
                    "key-type",
                    "lpm_trie keys are ipv4_prefix, ipv6_prefix or a struct "
                    "starting with `prefixlen: u32`",
                    d.type_args[0].span,
                )
        if "max_entries" not in d.args:
            self.err(
                "map-args",
                f"map `{d.name}` needs max_entries",
                d.span,
                f"add `(max_entries: N)` after the {d.kind} kind",
            )
            n = 1
        else:
            n = const_int(self, d.args["max_entries"])
            if n is None or not 1 <= n < 1 << 32:
                self.err(
                    "map-args",
                    "max_entries must be a constant from 1 to 2**32-1",
                    d.args["max_entries"].span,
                )
                n = 1
        for k in d.args:
            if k not in ("max_entries", "no_prealloc"):
                self.err(
                    "map-args",
                    f"unknown map argument `{k}`",
                    d.args[k].span,
                    "known: max_entries, no_prealloc",
                )
        if "no_prealloc" in d.args and const_int(self, d.args["no_prealloc"]):
            flags |= BPF_F_NO_PREALLOC
        self.c.maps[d.name] = T.MapType(d.name, d.kind, int(mt), key, val, n, flags)
        self.c.map_decls[d.name] = d

    # ---- bodies ----
    def globals_scope(self) -> dict[str, object]:
        g: dict[str, object] = {}
        g.update(self.c.consts)
        g.update(self.c.configs)
        g.update(self.c.maps)
        return g

    def body_fn(self, info: FnInfo) -> None:
        self.fn, self.kind, self.ctx_name = info, None, None
        self.scopes = [self.globals_scope(), {}]
        for (name, ty), p in zip(info.params, info.decl.params, strict=True):
            loc = Local(name, ty, p.span)
            self.c.sym[p] = loc
            self.bind(name, loc)
        self.block(info.decl.body, new_scope=False)
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
        self.scopes = [self.globals_scope(), {p.ctx: T.CTX}]
        self.block(p.body, new_scope=False)
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
