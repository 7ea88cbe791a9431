"""Declaration checks for sema (front end mixin of ``sema.Sema``): map declarations (kinds,
key/value types, kernel map flags, prog_array entries), the one namespace of top-level
names, fn modifiers and the signatures BPF subprograms can have, the ban on recursive fns
(the kernel refuses recursive BPF calls), and the rule that a tail call only reaches
programs of its own kind."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.records import RECORDS_VAR
from bpfdsl.abi.flags import BPF_F_NO_PREALLOC
from bpfdsl.abi.limits import MAX_BPF_FUNC_REG_ARGS
from bpfdsl.abi.map_types import BTF_MAX_ENTRIES, MapType, is_array, map_create_problems
from bpfdsl.abi.prog_types import PROGRAM_KINDS, ProgramKind, kind_for_keyword
from bpfdsl.diagnostics import Diagnostic, Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import CORE_HEADERS
from bpfdsl.lang.layout import header_layout
from bpfdsl.lang.sema.symbols import (
    BUILTIN_STRUCTS,
    FN_MODIFIERS,
    Checked,
    ExprHost,
    FnInfo,
    const_int,
    const_int_arg,
    is_builtin_constant,
)

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
    # slots hold programs (the kernel: u32 program fds); filled from `= { 0: prog, ... }`
    "prog_array": (MapType.PROG_ARRAY, T.U32, T.U32),
}
# event maps (to user space): kind -> kernel map type; declared `KIND<RECORD>(...)`
EVENT_KINDS: dict[str, MapType] = {
    "ringbuf": MapType.RINGBUF,
    "perf_event_array": MapType.PERF_EVENT_ARRAY,
}
MAP_ARGS = ("max_entries", "no_prealloc", "pinning")  # the arguments of a map declaration
PIN_VALUES = {"LIBBPF_PIN_NONE": 0, "LIBBPF_PIN_BY_NAME": 1}  # libbpf enum libbpf_pin_type


def unknown_map_kind(
    kind: str, suggest: Callable[[str, Iterable[str]], str | None]
) -> tuple[str, str]:
    """(message, hint) for a map kind the language does not have.  A kernel map type
    (``prog_array``, ``BPF_MAP_TYPE_RINGBUF``) is named as not supported rather than matched
    to a similar-looking kind; ``suggest(name, options)`` gives a did-you-mean or None."""
    every = [*MAP_KINDS, *EVENT_KINDS]
    kinds = "map kinds: " + ", ".join(every)
    plain = kind.lower().removeprefix("bpf_map_type_")
    if plain in every:
        return f"unknown map kind `{kind}`", f"write `{plain}`"
    if plain.upper() in MapType.__members__ and plain != "unspec":
        return (
            f"map kind `{kind}` (BPF_MAP_TYPE_{plain.upper()}) is not supported by bpfdsl",
            kinds,
        )
    return f"unknown map kind `{kind}`", suggest(kind, every) or kinds


class DeclChecker:
    # What this mixin uses of its host, analyzer.Sema, declared for the type checker (the
    # analyzer imports this module, so Sema cannot be named here; symbols.SemaHost is the
    # part the other sema modules use).
    c: Checked
    ex: ExprHost
    diags: list[Diagnostic]

    if TYPE_CHECKING:

        def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None: ...
        def resolve_type(self, t: ast.TypeRef) -> T.Type: ...
        def value_type(self, t: ast.TypeRef, what: str) -> T.Type: ...
        def suggest(self, name: str, options: Iterable[str]) -> str | None: ...

    def map_decl(self, d: ast.MapDecl) -> None:
        if d.kind in EVENT_KINDS:
            return self.event_map_decl(d)
        if d.kind not in MAP_KINDS:
            msg, hint = unknown_map_kind(d.kind, self.suggest)
            self.err("unknown-map-kind", msg, d.kind_span, hint)
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
        elif len(targs) == 1 and is_array(mt):
            val = targs[0]
        elif len(targs) == 2 and is_array(mt):
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
        meant = self.unknown_map_args(d, MAP_ARGS)
        skip = "max_entries" in meant and "max_entries" not in d.args
        n = None if skip else self.map_max_entries(d)
        if "no_prealloc" in d.args:
            e = d.args["no_prealloc"]
            v, t = const_int(self, e), e.ty
            if v not in (0, 1) or not isinstance(t, (T.BoolType, T.UntypedInt, T.ErrorType)):
                self.err(
                    "map-args",
                    "no_prealloc takes true or false",
                    e.span,
                    "write `no_prealloc: true` (BPF_F_NO_PREALLOC) or leave it out",
                )
            elif v:
                flags |= BPF_F_NO_PREALLOC
        if n is not None:
            self.check_map_limits(d, mt, key, val, n, flags)
        pinning = self.map_pinning(d)
        self.c.maps[d.name] = T.MapType(d.name, d.kind, int(mt), key, val, n or 1, flags, pinning)
        self.c.map_decls[d.name] = d
        if d.init is not None:
            self.map_init(d, mt, n)

    def unknown_map_args(self, d: ast.MapDecl, allowed: tuple[str, ...]) -> set[str]:
        """Errors for the arguments of ``d`` not in ``allowed``; returns the allowed ones
        an unknown one is close to (no second error for those)."""
        meant: set[str] = set()
        for k in d.args:
            if k not in allowed:
                hint = self.suggest(k, allowed)
                meant.update(a for a in allowed if hint == f"did you mean `{a}`?")
                self.err(
                    "map-args",
                    f"unknown map argument `{k}`",
                    d.arg_spans.get(k, d.args[k].span),
                    hint or "map arguments: " + ", ".join(allowed),
                )
        return meant

    def map_pinning(self, d: ast.MapDecl) -> int:
        """``pinning: LIBBPF_PIN_BY_NAME`` (or ``LIBBPF_PIN_NONE``): libbpf's pinning of a
        BTF map definition (the loader pins the map at PIN_ROOT/NAME and reuses a map
        pinned there whose definition matches).  0 when absent or after an error."""
        e = d.args.get("pinning")
        if e is None:
            return 0
        if isinstance(e, ast.Name) and e.id in PIN_VALUES:
            return PIN_VALUES[e.id]
        self.err(
            "map-args",
            "pinning takes LIBBPF_PIN_BY_NAME or LIBBPF_PIN_NONE",
            e.span,
            "write `pinning: LIBBPF_PIN_BY_NAME` to keep the map at /sys/fs/bpf/"
            f"{d.name} across loads (libbpf's LIBBPF_PIN_BY_NAME)",
        )
        return 0

    def event_map_decl(self, d: ast.MapDecl) -> None:
        """``ringbuf<RECORD>(max_entries: BYTES)`` / ``perf_event_array<RECORD>()``: maps
        programs send records of the struct RECORD through (bpf_ringbuf_output/reserve,
        bpf_perf_event_output).  The kernel map has no key/value types (ringbuf: key and
        value size 0, max_entries the ring's bytes, a power of 2 and a multiple of the page
        size; perf_event_array: u32 keys and values, the perf event fd of each CPU, and
        without max_entries one slot per possible CPU, filled in by the loader as libbpf
        does).  RECORD is described in BTF (backend/debuginfo) for the events reader."""
        mt = EVENT_KINDS[d.kind]
        targs = [self.value_type(t, "an event record") for t in d.type_args]
        example = (
            f"`map {d.name}: {d.kind}<event>(max_entries: 65536)`"
            if mt == MapType.RINGBUF
            else f"`map {d.name}: {d.kind}<event>()`"
        )
        record = targs[0] if len(targs) == 1 else None
        if len(targs) != 1:
            self.err(
                "map-types",
                f"map kind `{d.kind}` takes one type: the struct of its records",
                d.type_args[1].span if len(targs) > 1 else d.kind_span,
                f"declare the record as a struct, e.g. {example}",
            )
        elif not isinstance(record, T.StructType):
            self.err(
                "map-types",
                f"the records of `{d.kind}` are structs, not {record}",
                d.type_args[0].span,
                f"declare a struct for the record: `struct event {{ value: {record} }}`",
            )
            record = None
        meant = self.unknown_map_args(d, ("max_entries", "pinning"))
        key, val = (0, 0) if mt == MapType.RINGBUF else (4, 4)
        if mt == MapType.PERF_EVENT_ARRAY and "max_entries" not in d.args:
            n = 0  # one slot per possible CPU, filled in by the loader
        elif "max_entries" in meant and "max_entries" not in d.args:
            n = None
        else:
            n = self.map_max_entries(d)
        if n is not None:
            spans = {
                "max_entries": d.args["max_entries"].span if "max_entries" in d.args else d.span
            }
            hint = (
                "give the ring's size in bytes as a power of 2 of at least 4096, e.g. 65536"
                if mt == MapType.RINGBUF
                else "declare fewer entries"
            )
            for what, msg in map_create_problems(mt, key, val, n, 0):
                self.err("map-limit", f"map `{d.name}`: {msg}", spans.get(what, d.span), hint)
        pinning = self.map_pinning(d)
        self.c.maps[d.name] = T.MapType(
            d.name, d.kind, int(mt), None, None, n or 0, 0, pinning, record or T.ERR
        )
        self.c.map_decls[d.name] = d
        if d.init is not None:
            self.map_init(d, mt, n)

    def map_init(self, d: ast.MapDecl, mt: MapType, n: int | None) -> None:
        """``= { KEY: PROGRAM, ... }`` of a prog_array: constant keys below max_entries,
        each once; the programs are checked when all are known (:meth:`check_tail_calls`)."""
        if mt != MapType.PROG_ARRAY:
            self.err(
                "map-init",
                f"a {d.kind} map takes no initial entries",
                d.init[0][0].span if d.init else d.span,
                "only prog_array maps are filled from the object (`= { 0: prog, ... }`); "
                "fill other maps from the program or with `bpfdsl map update`",
            )
            return
        slots: dict[int, tuple[ast.Expr, Span]] = {}
        for key, value in d.init or []:
            k = const_int(self, key)
            if k is None or not isinstance(key.ty, (T.IntType, T.UntypedInt)):
                if not isinstance(key.ty, T.ErrorType):
                    self.err("map-init", "a prog_array slot must be a constant integer",
                             key.span, "write e.g. `0: parse_v4`")  # fmt: skip
                continue
            if n is not None and not 0 <= k < n:
                self.err(
                    "map-init",
                    f"slot {k} is outside `{d.name}` (max_entries {n}: slots 0..{n - 1})",
                    key.span,
                    "use a smaller slot or declare more entries",
                )
                continue
            if k in slots:
                self.err(
                    "map-init",
                    f"slot {k} of `{d.name}` is given twice",
                    key.span,
                    f"keep one (the first is at column {slots[k][1].col})",
                )
                continue
            slots[k] = (value, key.span)
        self.c.prog_array_init[d.name] = {k: v for k, (v, _s) in slots.items()}

    def map_max_entries(self, d: ast.MapDecl) -> int | None:
        """The ``max_entries`` of ``d`` (a constant of 1 to BTF_MAX_ENTRIES); None after an
        error.  Above BTF_MAX_ENTRIES the BTF map definition (``int (*max_entries)[N]``, as
        libbpf's ``__uint``) would be 4 GiB or more, which the kernel refuses."""

        if "max_entries" not in d.args:
            self.err(
                "map-args",
                f"map `{d.name}` needs max_entries",
                d.span,
                f"add `(max_entries: N)` after the {d.kind} kind",
            )
            return None
        e = d.args["max_entries"]
        n = const_int_arg(self, e, "map-args", "max_entries", "max_entries: 1024")
        if n is None:
            return None
        if n < 1:
            self.err("map-args", f"max_entries must be at least 1, not {n}", e.span,
                     "a map holds at least one entry")  # fmt: skip
            return None
        if n > BTF_MAX_ENTRIES:
            self.err(
                "map-args",
                f"max_entries must be from 1 to {BTF_MAX_ENTRIES} (2**30 - 1), not {n}",
                e.span,
                "a BTF map definition cannot state more: the kernel refuses BTF whose "
                "`max_entries` array is 4 GiB or more",
            )
            return None
        return n

    def check_map_limits(
        self, d: ast.MapDecl, mt: MapType, key: T.Type | None, val: T.Type, n: int, flags: int
    ) -> None:
        """The one check of a map declaration against the kernel's BPF_MAP_CREATE rules
        (:data:`bpfdsl.abi.map_types.MAP_LIMITS`): flags, key and value sizes (bytes), max_entries;
        each error points at the part of the declaration that breaks the rule."""
        targs = d.type_args
        _mt, fixed_key, fixed_value = MAP_KINDS[d.kind]
        spans = {
            "flags": d.args["no_prealloc"].span if "no_prealloc" in d.args else d.kind_span,
            "key": targs[0].span if targs and fixed_key is None else d.kind_span,
            "value": targs[-1].span if targs and fixed_value is None else d.kind_span,
            "max_entries": d.args["max_entries"].span,
        }
        hints = {
            "flags": "remove `no_prealloc`",
            "key": "use a key type of an accepted size",
            "value": "use a smaller value type (e.g. fewer or narrower fields)",
            "max_entries": "declare fewer entries",
        }
        key_size = key.size if key is not None else 0
        for what, msg in map_create_problems(mt, key_size, val.size, n, flags):
            self.err("map-limit", f"map `{d.name}`: {msg}", spans[what], hints[what])

    def header_decl(self, d: ast.HeaderDecl) -> None:
        """Lay out a header the program declares (bpfdsl.lang.layout); it replaces a library
        header of the same name.  After an error it is recorded as None: its uses add none."""
        if d.name in CORE_HEADERS or d.name in T.BUILTIN_TYPES:
            return  # reserved-name (check_names): `parse` keeps the compiler's own

        def resolve(t: ast.TypeRef) -> T.Type | None:
            n = len(self.diags)
            ty = self.resolve_type(t)
            return None if len(self.diags) > n else ty

        self.c.headers[d.name] = header_layout(d, resolve, self.err)

    def optional_ret(self, d: ast.FnDecl, ret: T.Type) -> T.Type:
        """The return type of ``fn ... -> T?``: an optional T (header views, integers, bool)."""
        if isinstance(ret, (T.HeaderType, T.IntType, T.BoolType, T.ErrorType)) or isinstance(
            ret, (T.StructType, T.BytesType, T.ArrayType)
        ):
            return T.OptionalType(ret, "value")
        assert d.ret is not None  # `-> T?` is parsed with its T
        self.err(
            "return-value",
            f"a fn may return an optional header view, integer or struct, not an optional {ret}",
            d.ret.span,
            "return the value itself (`-> T`), or an integer telling what was found",
        )
        return T.OptionalType(T.ERR, "value")  # its `return none` adds no second error

    def unsupported_ret(self, d: ast.FnDecl, ret: T.Type) -> T.Type:
        """A fn returns an integer, a bool, a struct, an address, an array or a header view;
        anything else is refused where it is declared."""
        if ret is not T.ERR:
            assert d.ret is not None  # without `-> T` the fn returns void, which is supported
            self.err(
                "return-value",
                f"a fn returns a value or a header view, not {ret}",
                d.ret.span,
                "return an integer, a struct or a header view",
            )
        return T.ERR

    def find_packet_fns(self) -> tuple[set[str], set[str]]:
        """Names of the fns that touch the packet: they parse, call skip_ext or offset, load
        or store bytes, take a header view with conditional (``if``) fields, or call such a
        fn other than a ``global`` one (which reads the packet through its own context; its
        callers pass the context, bpfdsl.lang.sema.subprog_ctx) (found without recursion; a
        fixed point over the calls; ``loop(n, f, ...)`` counts as a call of ``f``: the
        loop's subprogram of a packet callback takes the caller's context and cursor); and
        the fns that reach the packet through any calls, ``global`` ones too (a program
        calling one must have packet data, ``parse-no-data``)."""
        calls: dict[str, set[str]]
        direct, calls = set(), {n: set() for n in self.c.fns}
        globals_: dict[str, set[str]] = {n: set() for n in self.c.fns}
        for name, info in self.c.fns.items():
            if any(
                isinstance(t, T.HeaderType)
                and any(f.cond is not None for f in t.layout.fields.values())
                for _, t in info.params
            ):
                direct.add(name)  # reading an `if` field bounds-checks it against data_end
            stack = [info.decl.body]
            while stack:
                node = stack.pop()
                if isinstance(node, (ast.Parse, ast.Load, ast.Store)) or (
                    isinstance(node, ast.Call) and node.name in ("skip_ext", "offset")
                ):
                    direct.add(name)
                if (
                    isinstance(node, ast.Call)
                    and node.name in calls
                    and self.c.fns[node.name].decl.modifier != "global"
                ):  # a global fn reads the packet through its own context, not the caller's
                    calls[name].add(node.name)
                elif isinstance(node, ast.Call) and node.name in calls:
                    globals_[name].add(node.name)
                cb = _loop_callback(node)
                if cb is not None and cb in calls:  # the loop's subprogram takes the ctx
                    calls[name].add(cb)
                if isinstance(node, list):
                    stack.extend(node)
                elif isinstance(node, (ast.Node, ast.MatchArm)):
                    stack.extend(v for k, v in vars(node).items() if k not in ("span", "ty"))
                elif isinstance(node, dict):
                    stack.extend(node.values())
        out = set(direct)
        changed = True
        while changed:
            changed = False
            for name, callees in calls.items():
                if name not in out and callees & out:
                    out.add(name)
                    changed = True
        reach = set(out)
        changed = True
        while changed:
            changed = False
            for name, callees in calls.items():
                if name not in reach and (callees | globals_[name]) & reach:
                    reach.add(name)
                    changed = True
        return out, reach

    # ---- bodies ----

    def check_names(self, items: list) -> None:
        """Top-level names are one namespace (they become ELF symbols); ``LICENSE``,
        ``bpfdsl_records`` (the record types of event maps), ``llvm*`` and the program sections that are names (``xdp``, ``sk_msg``, ``sockops``:
        their ELF section symbols) are taken by the object format."""

        sections = {k.section for k in PROGRAM_KINDS if k.keyword and k.section.isidentifier()}
        seen: dict[str, Span] = {}
        for it in items:
            name = getattr(it, "name", None)
            if name is None:
                continue
            if isinstance(it, ast.StructDecl) and (
                name in T.BUILTIN_TYPES or name in CORE_HEADERS or name in BUILTIN_STRUCTS
            ):
                self.err(
                    "reserved-name",
                    f"`{name}` is a built-in type",
                    it.span,
                    "pick another name for the struct",
                )
            elif isinstance(it, ast.HeaderDecl) and (
                name in T.BUILTIN_TYPES or name in CORE_HEADERS
            ):
                what = "header the compiler knows" if name in CORE_HEADERS else "type"
                self.err(
                    "reserved-name",
                    f"`{name}` is a built-in {what}: it cannot be redeclared",
                    it.span,
                    "pick another name for the header (library headers such as gre or vxlan "
                    "may be replaced, the ones with checksum rules may not)",
                )
            elif is_builtin_constant(name):
                self.err(
                    "reserved-name",
                    f"`{name}` is a built-in constant and cannot be redefined",
                    it.span,
                    "pick another name",
                )
            elif name in ("LICENSE", RECORDS_VAR) or name.startswith("llvm"):
                self.err(
                    "reserved-name",
                    f"`{name}` is reserved in the object file",
                    it.span,
                    "pick another name",
                )
            elif name in sections:
                self.err(
                    "reserved-name",
                    f"`{name}` is the name of a program section (and its symbol) in the object",
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

    def fn_info(self, d: ast.FnDecl) -> FnInfo:
        """The FnInfo of ``d``: parameter and return types and the linkage its modifier asks
        for; a BPF subprogram (``noinline``/``global``) has at most 5 parameters (r1-r5) of
        the kinds a register carries (an integer, or a pointer to a struct, header or
        address), and a global one returns an integer (the kernel: "Global function f()
        doesn't return scalar")."""
        params = [(p.name, self.resolve_type(p.type)) for p in d.params]
        ret = self.resolve_type(d.ret) if d.ret else T.VOID
        if d.optional:
            ret = self.optional_ret(d, ret)
        elif not isinstance(ret, (T.IntType, T.BoolType, T.HeaderType, T.VoidType)) and (
            not isinstance(ret, (T.StructType, T.BytesType, T.ArrayType))
        ):
            ret = self.unsupported_ret(d, ret)
        linkage = "inline"
        if d.modifier is not None:
            linkage = FN_MODIFIERS.get(d.modifier, "inline")
            if d.modifier not in FN_MODIFIERS:
                prog = kind_for_keyword(d.modifier) is not None
                hint = (
                    f"a program takes only its context: `{d.modifier} fn {d.name}(ctx)`"
                    if prog
                    else self.suggest(d.modifier, FN_MODIFIERS)
                    or "write `noinline fn` (a BPF subprogram), `global fn` (a global "
                    "function) or plain `fn` (inlined)"
                )
                self.err("fn-modifier", f"unknown fn modifier `{d.modifier}`",
                         d.modifier_span or d.span, hint)  # fmt: skip
        if linkage != "inline":
            self.check_subprog_signature(d, params, ret, linkage)
        return FnInfo(d, params, ret, linkage)

    def check_subprog_packet(self) -> None:
        """A ``noinline`` (static) fn that parses, calls skip_ext or offset, or loads/stores
        packet bytes takes the program's context and the caller's cursor (a packet pointer)
        as two hidden arguments first (r1, r2), and one that only calls a builtin taking
        the context the context (r1); the kernel verifies it at each call with the
        caller's registers (a packet pointer keeps its checked range), so it has 3 (or 4)
        registers left for its own parameters (CodeGen.hidden_args).  A ``global`` fn takes
        the context only (r1, ``__arg_ctx``) and parses from the packet's first byte: the
        kernel verifies it alone, for arguments of its BTF types, and a BTF argument is
        never a packet pointer (btf_prepare_func_args), so a header view parameter is
        memory the caller passes, whose ``if`` fields (read against data_end) it cannot
        read (``subprog-packet``)."""
        for name in sorted(self.c.packet_fns | set(self.c.ctx_calls)):
            info = self.c.fns[name]
            d = info.decl
            if d.modifier == "global":
                for p, (_n, t) in zip(d.params, info.params, strict=True):
                    if isinstance(t, T.HeaderType) and any(
                        f.cond is not None for f in t.layout.fields.values()
                    ):
                        self.err(
                            "subprog-packet",
                            f"the header view `{p.name}` of global fn `{name}` is memory the "
                            "caller passes, not the packet: its `if` fields are found by "
                            "checks against the packet's end",
                            p.span,
                            f"make it `noinline fn {name}` (a static subprogram gets the "
                            "packet pointer), pass the field values, or parse the header "
                            "in the global fn",
                        )
            hidden = 2 if name in self.c.packet_fns and d.modifier != "global" else 1
            if d.modifier in ("noinline", "global") and (
                len(d.params) > MAX_BPF_FUNC_REG_ARGS - hidden
            ):
                what = "the context and the parse cursor" if hidden == 2 else "the context"
                self.err(
                    "too-many-params",
                    f"{d.modifier} fn `{name}` takes {what} in r1{'-r2' if hidden == 2 else ''} "
                    f"before its own parameters: at most {MAX_BPF_FUNC_REG_ARGS - hidden} "
                    f"(registers r{hidden + 1}-r5), not {len(d.params)}",
                    d.params[MAX_BPF_FUNC_REG_ARGS - hidden].span,
                    "pass a struct with the values instead, or make it a plain (inlined) `fn`",
                )

    def check_subprog_signature(
        self, d: ast.FnDecl, params: list[tuple[str, T.Type]], ret: T.Type, linkage: str
    ) -> None:
        what = "a global fn" if linkage == "global" else "a noinline fn"
        if len(params) > MAX_BPF_FUNC_REG_ARGS:
            self.err(
                "too-many-params",
                f"{what} takes at most {MAX_BPF_FUNC_REG_ARGS} parameters (registers r1-r5), "
                f"`{d.name}` has {len(params)}",
                d.params[MAX_BPF_FUNC_REG_ARGS].span,
                "pass a struct with the values instead, or make it a plain (inlined) `fn`",
            )
        for p, (_n, ty) in zip(d.params, params, strict=True):
            if not subprog_param_ok(ty):
                self.err(
                    "param-type",
                    f"a parameter of {what} cannot be a {ty}",
                    p.type.span,
                    "parameters are integers, bool, structs, addresses or header views",
                )
        ok = ret is T.VOID or isinstance(ret, (T.IntType, T.BoolType, T.ErrorType))
        if linkage == "global" and (ret is T.VOID or not ok):
            self.err(
                "global-return",
                f"global fn `{d.name}` must return an integer"
                + ("" if ret is T.VOID else f", not {ret}"),
                (d.ret or d).span,
                f"declare e.g. `global fn {d.name}(...) -> i32`: the kernel verifies a global "
                "function only when it returns a scalar",
            )
        elif not ok:
            self.err("return-type", f"a noinline fn returns an integer, bool or nothing, not {ret}",
                     (d.ret or d).span, "return a scalar, or write into a struct parameter")  # fmt: skip

    def check_tail_calls(self) -> None:
        """Every program a prog_array slot names exists, and a tail call through a map only
        reaches programs of the caller's kind: the kernel puts a program into a prog_array
        only if its type, expected attach type and frags flag match the map's (first) owner
        (kernel/bpf/core.c bpf_prog_map_compatible), so a mismatch would fail at load."""
        progs = {it.name: it for it in self.c.program.items if isinstance(it, ast.ProgDecl)}
        for name, slots in self.c.prog_array_init.items():
            for k, v in list(slots.items()):
                target = v.id if isinstance(v, ast.Name) else None
                if target in progs:
                    continue
                del slots[k]
                if target is None:
                    self.err("map-init", f"slot {k} of `{name}` must name a program", v.span,
                             f"write `{k}: PROGRAM_NAME`")  # fmt: skip
                elif target in self.c.fns:
                    self.err(
                        "unknown-program",
                        f"`{target}` is a fn, not a program: a prog_array slot holds a program",
                        v.span,
                        "declare it as a program (`xdp fn NAME(ctx)`) to tail-call it",
                    )
                else:
                    self.err(
                        "unknown-program",
                        f"no program named `{target}` for slot {k} of `{name}`",
                        v.span,
                        self.suggest(target, progs) or "programs: " + ", ".join(progs),
                    )
        kinds = {d.name: kind for d, kind in self.c.progs}
        for name in self.c.maps:
            uses: list[tuple[ProgramKind, str, Span, str]] = []  # (kind, program, span, role)
            for prog, mname, span in self.c.tail_calls:
                if mname == name and prog in kinds:
                    uses.append((kinds[prog], prog, span, "caller"))
            for v in self.c.prog_array_init.get(name, {}).values():
                if isinstance(v, ast.Name) and v.id in kinds:  # only programs are left
                    uses.append((kinds[v.id], v.id, v.span, "slot"))
            if not uses:
                continue
            owner = uses[0]
            for kind, prog, span, role in uses[1:]:
                if kind is owner[0]:
                    continue
                a = owner[0].keyword or owner[0].section
                b = kind.keyword or kind.section
                first = (
                    f"`{owner[1]}` tail-calls through it"
                    if owner[3] == "caller"
                    else f"its slots hold `{owner[1]}`"
                )
                what = (
                    f"`{prog}` ({b}) tail-calls through `{name}`"
                    if role == "caller"
                    else f"`{prog}` ({b}) is in a slot of `{name}`"
                )
                self.err(
                    "tail-call-kind",
                    f"{what}, but {first} ({a}): a tail call reaches only programs of the "
                    "caller's kind",
                    span,
                    "the kernel refuses programs of another type, attach type or frags "
                    f"setting in one prog_array; use a separate prog_array for {b} programs",
                )

    def check_recursion(self) -> None:
        """The kernel refuses recursive BPF calls (and plain fns are inlined): no call cycles.
        A ``loop(n, f, ...)`` counts as a call of its callback ``f``."""
        calls: dict[str, set[str]] = {n: set() for n in self.c.fns}
        for name, info in self.c.fns.items():
            stack = [info.decl.body]
            while stack:
                node = stack.pop()
                if isinstance(node, ast.Call) and node.name in calls:
                    calls[name].add(node.name)
                cb = _loop_callback(node)
                if cb is not None and cb in calls:
                    calls[name].add(cb)
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


def subprog_param_ok(ty: T.Type) -> bool:
    """A type a BPF subprogram parameter can have: a scalar in a register, or a pointer to
    memory (a struct, an address, an array: the caller's copy; a header: the packet)."""
    return isinstance(
        ty,
        (T.IntType, T.BoolType, T.StructType, T.BytesType, T.ArrayType, T.HeaderType, T.ErrorType),
    )


def _loop_callback(node: object) -> str | None:
    """The name of the callback of ``loop(n, f, ...)`` when ``node`` is such a call."""
    if (
        isinstance(node, ast.Call)
        and node.name == "loop"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Name)
    ):
        return node.args[1].id
    return None
