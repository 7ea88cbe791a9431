"""Declaration checks for sema (front end mixin of ``sema.Sema``): map declarations (kinds,
key/value types, kernel map flags), the one namespace of top-level names, and the ban on
recursive fns (they are inlined, and the kernel refuses recursive BPF calls)."""

from __future__ import annotations

from . import ast
from . import types as T
from .diagnostics import Span
from .headers import HEADERS
from .uapi import MapType


class _Plain:
    """Base of sema's records: plain ``__slots__`` classes (no dataclass exec() at import),
    compared by identity, repr listing the slots."""

    __slots__ = ()

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({args})"


class Local(_Plain):
    """A local variable (or parameter); ``ty`` its type; headers may go stale (B06).

    ``header_parent``: for an L4 header, the IP header it was parsed after; ``bounds``: for
    a loop variable, start..end (end exclusive)."""

    __slots__ = ("name", "ty", "span", "header_parent", "bounds")

    def __init__(
        self,
        name: str,
        ty: T.Type,
        span: Span,
        header_parent: Local | None = None,
        bounds: tuple[int, int] | None = None,
    ) -> None:
        self.name = name
        self.ty = ty
        self.span = span
        self.header_parent = header_parent
        self.bounds = bounds


class Const(_Plain):
    """A ``const``: ``value`` the raw (memory) value; ``data`` for byte-string constants
    (mac_addr, ipv6_addr, prefixes)."""

    __slots__ = ("name", "ty", "value", "data")

    def __init__(self, name: str, ty: T.Type, value: int, data: bytes | None = None) -> None:
        self.name = name
        self.ty = ty
        self.value = value
        self.data = data


class Config(_Plain):
    """A load-time setting in .rodata; ``value`` raw default, ``offset`` in .rodata (bytes)."""

    __slots__ = ("name", "ty", "value", "offset")

    def __init__(self, name: str, ty: T.Type, value: int, offset: int = 0) -> None:
        self.name = name
        self.ty = ty
        self.value = value
        self.offset = offset


class FnInfo(_Plain):
    """An inlined function: its declaration, ``params`` (name, type) and return type."""

    __slots__ = ("decl", "params", "ret")

    def __init__(self, decl: ast.FnDecl, params: list[tuple[str, T.Type]], ret: T.Type) -> None:
        self.decl = decl
        self.params = params
        self.ret = ret


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


class DeclChecker:
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
        targs = [self.value_type(t, "a map key or value") for t in d.type_args]
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
            elif is_builtin_constant(name):
                self.err(
                    "reserved-name",
                    f"`{name}` is a built-in constant and cannot be redefined",
                    it.span,
                    "pick another name",
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


def is_builtin_constant(name: str) -> bool:
    """True for names the language predefines (actions, header constants, map flags)."""
    from .sema_expr import ACTIONS, CONSTANTS, FLAG_CONSTANTS

    return name in CONSTANTS or name in ACTIONS or name in FLAG_CONSTANTS
