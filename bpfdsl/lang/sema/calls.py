"""Calls, map methods and assignments for sema (front end); used by sema.expr only.

Map rules follow the kernel: which map kinds take lookups and redirects comes from
``bpfdsl.abi.helpers.map_fits_helper`` (check_map_func_compatibility); keys must have the
map's key type exactly (a literal takes it), lpm_trie keys may be a bare address (/32,
/128) or a prefix literal.
"""

from __future__ import annotations

from typing import TypeGuard

from bpfdsl.abi.helpers import map_fits_helper
from bpfdsl.abi.kfuncs import BY_BUILTIN as KFUNC_BUILTINS
from bpfdsl.abi.map_types import MapType, is_percpu, lookup_is_readonly
from bpfdsl.diagnostics import Diagnostic
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.c_names import C_CALLS, call_hint
from bpfdsl.lang.sema import bitcast, helpers, kfuncs, meta
from bpfdsl.lang.sema.csum import check_swap, check_write
from bpfdsl.lang.sema.events import EVENT_CALLS, EVENT_MAP_HINT, EVENT_MAP_USE, check_call
from bpfdsl.lang.sema.helpers import helper_kind as _helper_kind
from bpfdsl.lang.sema.subprog_ctx import LOOP_CTX_HINT, ctx_message
from bpfdsl.lang.sema.symbols import (
    BUILTINS,
    CURSOR_UNKNOWN,
    PKT_RESIZE,
    Config,
    Const,
    ExprHost,
    Local,
    bswap,
)


def _is_map(t: object) -> TypeGuard[T.MapType]:
    return isinstance(t, T.MapType)


def map_key(ex: ExprHost, m: T.MapType, k: ast.Expr) -> None:
    t = ex.expr(k)
    t = t.inner if isinstance(t, T.RefType) else t
    key = m.key
    if t is T.ERR:
        return
    if m.kind == "lpm_trie":  # a bare address is a full-length prefix (/32, /128)
        assert key is not None  # sema gives every lpm_trie its key type
        addr = {T.IPV4_PREFIX.name: T.BE32, T.IPV6_PREFIX.name: T.IPV6_ADDR}.get(key.name)
        if t == key or (addr is not None and t == addr):
            return
        if isinstance(t, T.UntypedInt) and addr == T.BE32:
            ex.coerce(k, T.BE32)
            return
    elif isinstance(t, T.UntypedInt) and isinstance(key, T.IntType):
        ex.coerce(k, key)
        return
    elif t == key:
        return
    hint = (
        f"convert it: `(...) as {key}`"
        if isinstance(key, T.IntType) and isinstance(t, T.IntType) and not key.be
        else f"build a `{key}` value"
    )
    if isinstance(key, T.StructType) and key.name not in ("ipv4_prefix", "ipv6_prefix"):
        hint = f"build the key with `{key.name}(field: value, ...)`"
    ex.err(
        "key-type",
        f"key of type {t} does not match the key type {key} of map `{m.name}`",
        k.span,
        hint,
    )


def _map_arg(ex: ExprHost, e: ast.Expr) -> T.MapType | None:
    t = ex.expr(e)
    if not _is_map(t):
        ex.err("type-mismatch", f"expected a map, found {t}", e.span)
        return None
    return t


def mark_stale(ex: ExprHost, e: ast.Node) -> None:

    for scope in ex.s.scopes:
        for sym in scope.values():
            if isinstance(sym, Local) and isinstance(sym.ty, (T.HeaderType, T.MetaRef)):
                ex.s.stale.setdefault(sym, e.span.line)
    ex.s.resized = ex.s.resized | {e}
    ex.c.pkt_reset.add(e)
    ex.s.cursor = None  # codegen resets the parse cursor to the packet's start


def c_call_hint(ex: ExprHost, e: ast.Call) -> str | None:
    """The bpfdsl form of the C call ``e`` (``htons(53)``: ``be16(53)``; lang.c_names), its
    own arguments put in; for ``sizeof(x)`` the size of ``x`` here."""
    args = [ex.s.source_text(a.span) for a in e.args]
    if e.name == "sizeof" and len(e.args) == 1:
        a = e.args[0]
        t: T.Type | None = None
        if isinstance(a, ast.Name) and ex.s.lookup(a.id) is None:
            if a.id in ex.c.structs or a.id in ex.c.headers or ex.c.header(a.id) is not None:
                t = ex.s.resolve_type(ast.NamedType(a.span, a.id))
        else:
            t = ex.expr(a)
        t = t.inner if isinstance(t, T.RefType) else t
        if isinstance(t, T.HeaderType):
            size = t.layout.size
        else:
            size = t.size if t is not None and t is not T.ERR and t.size else None
        if size:
            note = C_CALLS["sizeof"].note.replace("write it", f"write {size}")
            return f"`sizeof({args[0]})` is {size} here: {note}"
    return call_hint(e.name, args)


def call(ex: ExprHost, e: ast.Call) -> T.Type:
    c = ex.c
    if e.name in c.structs:
        st = c.structs[e.name]
        if e.args:
            ex.err(
                "struct-literal",
                "struct values take named fields",
                e.span,
                f"write `{e.name}({', '.join(f + ': ...' for f in st.fields)})`",
            )
        given: dict[int, str] = {}  # byte -> field: union members share bytes
        for k, val in e.kwargs.items():
            if k in st.fields:
                off, ft = st.fields[k]
                other = next((given[b] for b in range(off, off + ft.size) if b in given), None)
                if other is not None:
                    ex.err(
                        "struct-literal",
                        f"`{k}` and `{other}` of `{st.name}` share bytes (a union in the "
                        "kernel's struct): give one of them",
                        val.span,
                        f"remove `{k}` or `{other}`",
                    )
                given.update(dict.fromkeys(range(off, off + ft.size), k))
            if k not in st.fields:
                ex.err(
                    "unknown-field",
                    f"struct `{st.name}` has no field `{k}`",
                    val.span,
                    "fields: " + ", ".join(st.fields),
                )
                ex.expr(val)
                continue
            ex.expect(val, st.fields[k][1])
        return st
    if e.name in c.fns:
        info = c.fns[e.name]
        if len(e.args) != len(info.params) or e.kwargs:
            ex.err("arg-count", f"`{e.name}` takes {len(info.params)} argument(s)", e.span)
        for a, (_n, ty) in zip(e.args, info.params, strict=False):
            ex.expect(a, ty)
        kfuncs.check_fn_call(ex, e, e.name)
        if e.name in c.packet_reach:  # it reads the packet (and moves the caller's cursor)
            ex.packet_access(e.span, f"call `{e.name}` (it reads the packet)")
            if info.linkage == "inline" and e.name in c.packet_fns:  # a subprogram parses
                ex.s.cursor = CURSOR_UNKNOWN  # on a copy of the cursor or from data
        if e.name in c.pkt_changing_fns:  # it may resize: the views are invalid after it
            mark_stale(ex, e)
        return info.ret
    if e.name.startswith("bpf_") and e.name not in BUILTINS:  # any helper, by its name
        ht = helpers.by_name(ex, e)
        if ht is not None:
            return ht
    if e.name in KFUNC_BUILTINS:
        return kfuncs.call(ex, e)
    if e.name not in BUILTINS:
        names = list(BUILTINS) + list(KFUNC_BUILTINS) + list(c.fns) + list(c.structs)
        hint = c_call_hint(ex, e) or ex.s.suggest(e.name, names)
        ex.err("unknown-fn", f"unknown function `{e.name}`", e.span, hint)
        for a in e.args:
            ex.expr(a)
        return T.ERR
    sig = BUILTINS[e.name]
    args = e.args
    if e.name in ("host", "be16", "be32", "be64"):
        if len(args) != 1:
            ex.err("arg-count", f"`{e.name}` takes 1 argument", e.span)
            return T.ERR
        t = ex.expr(args[0])
        t = t.inner if isinstance(t, T.RefType) else t
        v = c.cval.get(args[0])
        if e.name == "host":
            if not (isinstance(t, T.IntType) and t.be):
                ex.err("type-mismatch", f"host() converts be16/be32/be64, found {t}", args[0].span)
                return T.ERR
            if v is not None:
                c.cval[e] = bswap(v, t.bits)
            return T.IntType(t.bits)
        to = {"be16": T.BE16, "be32": T.BE32, "be64": T.BE64}[e.name]
        if isinstance(t, T.UntypedInt):
            ex.coerce(args[0], T.IntType(to.bits))
            t = args[0].ty
            v = c.cval.get(args[0])
        if not (isinstance(t, T.IntType) and not t.be):
            ex.err(
                "type-mismatch",
                f"{e.name}() converts a host-order integer, found {t}",
                args[0].span,
            )
            return to
        raw = ex.const_as(args[0], T.IntType(to.bits))  # None exactly when v is
        if raw is not None:  # converted as codegen converts it: an i16 -2 is 0xfffffffe first
            c.cval[e] = bswap(raw, to.bits)
        return to
    if e.name in bitcast.BITCAST_BUILTINS:
        return bitcast.check(ex, e)
    if e.name in EVENT_CALLS:
        return check_call(ex, e)
    if e.name == "swap":
        return _swap(ex, e)
    if e.name == "fib_lookup":
        return helpers.fib_lookup(ex, e)
    if e.name == "csum_diff":
        return helpers.csum_diff(ex, e)
    if e.name in ("xdp_load_bytes", "xdp_store_bytes"):
        return helpers.xdp_bytes(ex, e)
    if e.name == "redirect":
        return helpers.redirect(ex, e)
    if e.name == "meta":
        return meta.view(ex, e)
    if e.name == "loop":
        return _loop(ex, e)
    if e.name == "tail_call":
        ex.err(
            "tail-call-else",
            "`tail_call` needs an else block: what runs when the tail call fails (the slot "
            "is empty, or 33 tail calls were made already)",
            e.span,
            "write `tail_call(progs, i) else { return XDP_PASS }`",
        )
        for a in args:
            ex.expr(a)
        return T.VOID
    if e.name == "hash":
        if not args:
            ex.err("arg-count", "hash() takes at least one value", e.span)
        for a in args:
            t = ex.expr(a)
            t = t.inner if isinstance(t, T.RefType) else t
            if isinstance(t, T.UntypedInt):
                ex.coerce(a, T.U32)
            elif not (
                isinstance(t, (T.IntType, T.BoolType, T.ErrorType)) and t.size <= 4
            ) and not isinstance(t, T.BytesType):  # ipv6_addr, mac_addr: 32-bit words
                msg, hint = _hash_refusal(t)
                ex.err("type-mismatch", msg, a.span, hint)
        return T.U32
    if e.name == "offset":  # a header view's byte offset from the packet's first byte
        vt = ex.expr(args[0]) if len(args) == 1 else None
        if not isinstance(vt, (T.HeaderType, T.ErrorType)):
            ex.err(
                "type-mismatch",
                "offset() takes a header view",
                e.span,
                "e.g. `adjust_head(offset(inner) as i32)` removes everything before `inner`",
            )
        fn = ex.s.fn
        arg = args[0] if len(args) == 1 and isinstance(args[0], ast.Name) else None
        sym = ex.c.sym.get(arg) if arg is not None else None
        if (
            fn is not None
            and arg is not None
            and fn.linkage == "global"
            and sym is not None
            and any(ex.c.sym.get(p) is sym for p in fn.decl.params)
        ):
            ex.err(
                "subprog-packet",
                f"`{arg.id}` is a parameter of global fn `{fn.decl.name}`: memory the "
                "caller passes, not the packet, so it has no offset in the packet",
                e.span,
                "pass the offset as a parameter (the caller's `offset(view)`), or make it a "
                "`noinline fn` (a static subprogram gets the packet pointer)",
            )
        return T.U32
    if e.name == "skip_ext":
        vt = ex.expr(args[0]) if args else None
        ip6 = ex.c.sym.get(args[0]) if args and isinstance(args[0], ast.Name) else None
        # the walk starts at the cursor: from just past that ipv6 header it ends at its
        # upper-layer header (which then follows it); from anywhere else, who knows
        ex.s.cursor = ip6 if ip6 is not None and ex.s.cursor is ip6 else CURSOR_UNKNOWN
        if len(args) != 1 or not (isinstance(vt, T.HeaderType) and vt.name == "ipv6"):
            ex.err(
                "type-mismatch",
                "skip_ext() takes an ipv6 header",
                e.span,
                "`let proto = skip_ext(ip6) else { return XDP_PASS }`",
            )
        return T.OptionalType(T.U8, "next header")
    if e.name in ("msg_redirect_hash", "msg_redirect_map", "sock_hash_update", "sock_map_update"):
        return _sock_redirect(ex, e)
    if e.name == "redirect_map":
        if len(args) != 3:
            ex.err(
                "arg-count",
                "redirect_map(map, key, fallback) takes 3 arguments: the "
                "fallback action is required",
                e.span,
                "e.g. `redirect_map(tx_ports, 0, XDP_PASS)`",
            )
        if args:
            m = _map_arg(ex, args[0])
            if m is not None and not map_fits_helper(MapType(m.map_type), "redirect_map"):
                ex.err(
                    "redirect-map-kind",
                    f"cannot redirect into a {m.kind} map",
                    args[0].span,
                    "redirect_map takes a devmap, devmap_hash, cpumap or xskmap",
                )
            for a, ty in zip(args[1:], (T.U32, T.U64), strict=False):
                ex.expect(a, ty)
        if len(args) == 3:
            _fallback_aborted(ex, args[0], args[2])
            if m is not None:
                helpers.redirect_map_fallback(ex, m, args[2])
        return T.ERR
    assert sig is not None  # the builtins without a signature are handled above
    params, ret = sig
    _helper_kind(ex, e, e.name)
    if len(args) != len(params):
        ex.err("arg-count", f"`{e.name}` takes {len(params)} argument(s)", e.span)
    for a, ty in zip(args, params, strict=False):
        ex.expect(a, ty)
    if e.name in PKT_RESIZE:
        if ex.s.kind is None:
            ex.err("resize-in-fn", f"`{e.name}` is only allowed in a program body", e.span)
        mark_stale(ex, e)
    if e.name == "adjust_meta":
        meta.reserve(ex, e)
    return ret


def _fallback_aborted(ex: ExprHost, m: ast.Expr, fb: ast.Expr) -> None:
    """Warn where redirect_map's fallback is a constant 0 not spelled XDP_ABORTED: on an
    empty slot the kernel returns the low two bits of the flags (``__bpf_xdp_redirect_map``,
    include/linux/filter.h, for devmap/cpumap/xskmap alike), so 0 -- libbpf C's usual
    flags -- turns every miss into XDP_ABORTED: dropped and reported as an error."""
    if ex.c.cval.get(fb) != 0 or (isinstance(fb, ast.Name) and fb.id == "XDP_ABORTED"):
        return
    name = m.id if isinstance(m, ast.Name) else "the map"
    ex.c.warnings.append(
        Diagnostic(
            "warning",
            "redirect-fallback-aborted",
            f"fallback 0 is XDP_ABORTED: a frame whose slot in `{name}` is empty is dropped "
            "and counted as an error (tracepoint xdp:xdp_exception), not passed on",
            fb.span,
            hints=[
                "write XDP_PASS to give such frames to the stack or XDP_DROP to drop them "
                "quietly; write XDP_ABORTED if aborting is what you mean"
            ],
        )
    )


def method_call(ex: ExprHost, e: ast.MethodCall) -> T.Type:
    t = ex.expr(e.obj)
    if t is T.ERR:
        return T.ERR
    if not _is_map(t):
        ex.err("unknown-method", f"{t} has no method `{e.name}`", e.span)
        for a in e.args:
            ex.expr(a)
        return T.ERR
    if t.record is not None:
        ex.err("map-method", EVENT_MAP_USE.format(t.name, t.kind), e.span, EVENT_MAP_HINT)
        return T.ERR
    value = t.value
    assert value is not None  # DeclChecker.map_decl: every map but an event map has one
    mt = MapType(t.map_type)
    helper = {
        "lookup": "map_lookup_elem",
        "contains": "map_lookup_elem",
        "update": "map_update_elem",
        "delete": "map_delete_elem",
    }.get(e.name)
    if helper is None:
        ex.err(
            "unknown-method",
            f"maps have no method `{e.name}`",
            e.span,
            "map methods: lookup, contains, update, delete (and m[k] = v, m[k] += n)",
        )
        return T.ERR
    if not map_fits_helper(mt, helper):
        ex.err("map-method", f"a {t.kind} map does not support `{e.name}` from a program", e.span)
    want = {"lookup": 1, "contains": 1, "delete": 1, "update": (2, 3)}[e.name]
    n = len(e.args)
    if n not in (want if isinstance(want, tuple) else (want,)):
        ex.err("arg-count", f"`{e.name}` takes {want} argument(s)", e.span)
        return T.ERR
    map_key(ex, t, e.args[0])
    if e.name == "lookup":
        ro = lookup_is_readonly(t.map_type)
        return T.OptionalType(T.RefType(value, is_percpu(t.map_type), ro), "map value")
    if e.name == "contains":
        return T.BOOL
    if e.name == "update":
        ex.expect(e.args[1], value)
        if n == 3:
            ex.expect(e.args[2], T.U64)
    return T.I64


def assign(ex: ExprHost, s: ast.Assign) -> None:

    tgt, op = s.target, s.op
    if isinstance(tgt, ast.Index) and _is_map(ex.expr(tgt.obj)):
        m = tgt.obj.ty
        assert isinstance(m, T.MapType)
        if m.record is not None:
            ex.err("map-method", EVENT_MAP_USE.format(m.name, m.kind), s.span, EVENT_MAP_HINT)
            return
        helper = "map_update_elem" if op == "=" else "map_lookup_elem"
        if not map_fits_helper(MapType(m.map_type), helper):
            ex.err(
                "map-method",
                f"a {m.kind} map cannot be written from a program (`m[k] {op} v`)",
                s.span,
                "prog_array slots are set from the declaration (`= { 0: prog }`) or with "
                "`bpfdsl progarray set`"
                if m.kind == "prog_array"
                else "update it from user space (`bpfdsl map update`)",
            )
            return
        assert m.value is not None
        map_key(ex, m, tgt.index)
        if op not in ("=", "+=", "-="):
            mt, kt = ex.s.source_text(tgt.obj.span), ex.s.source_text(tgt.index.span)
            vt = ex.s.source_text(s.value.span)
            how = "atomic" if op in ("|=", "&=", "^=") else "a plain read and write, not atomic"
            ex.err(
                "map-assign",
                f"`{op}` on a map entry is not supported",
                s.span,
                f"look the entry up: `let v = {mt}.lookup({kt}) else {{ ... }}` then "
                f"`v {op} {vt}` ({how} on the map value); `m[k] = v`, `m[k] += n` and "
                "`m[k] -= n` work on the entry itself"
                if isinstance(m.value, T.IntType)
                else "use `m[k] = v`",
            )
        ex.expect(s.value, m.value)
        if op in ("+=", "-=") and not (isinstance(m.value, T.IntType) and not m.value.be):
            ex.err(
                "type-mismatch", f"`{op}` needs an integer value type, map has {m.value}", s.span
            )
        tgt.ty = m.value
        return
    if isinstance(tgt, ast.Name):
        sym = ex.s.lookup(tgt.id)
        if isinstance(sym, (Const, Config)) or _is_map(sym) or isinstance(sym, T.CtxType):
            ex.err(
                "read-only",
                f"`{tgt.id}` cannot be assigned",
                tgt.span,
                "configs change at load time (`--set`), consts never",
            )
            return
    t = ex.expr(tgt)
    if isinstance(tgt, ast.Name) and isinstance(ex.c.sym.get(tgt), Local):
        if isinstance(t, T.HeaderType):
            if op == "=" and isinstance(ex.expr(s.value), T.StructType):
                bitcast.whole_header_write(ex, tgt, t, s.value)
                return
            ex.err("read-only", "a header view cannot be reassigned", tgt.span)
            return
    elif isinstance(tgt, ast.Field):
        ot = tgt.obj.ty
        if isinstance(ot, T.CtxType):
            ex.err("read-only", "context fields are read-only", tgt.span)
            return
        if isinstance(ot, T.HeaderType):
            f = ot.layout.fields.get(tgt.name)
            if f is not None and not f.writable:
                if f.cond is not None:
                    why = "is there only when its condition holds: it cannot be written"
                    hint = "write the packet bytes with `store` where the field is"
                else:
                    why = (
                        f"gives the length of `{ot.name}` (or decides which of its fields are "
                        "there): it is read-only"
                    )
                    hint = "the cursor already moved past the header by the length it had"
                ex.err("read-only", f"field `{tgt.name}` {why}", tgt.span, hint)
                return
            if f is not None:
                check_write(ex, tgt)
        if isinstance(ot, T.RefType) and ot.readonly:
            ex.err("read-only", "values of this map kind are read-only in programs", tgt.span)
            return
    elif not isinstance(tgt, ast.Index):
        ex.err("not-assignable", "this expression cannot be assigned", tgt.span)
        return
    if isinstance(t, T.RefType):
        if t.readonly:
            ex.err("read-only", "values of this map kind are read-only in programs", tgt.span)
        t = t.inner
    if t is T.ERR:
        return
    if op != "=":
        if not (isinstance(t, T.IntType) and (not t.be or op[0] in "&|^")):
            be = _network_order_hint(ex, s, t) if isinstance(t, T.IntType) else None
            ex.err("type-mismatch", f"`{op}` needs a host-order integer, found {t}", s.span, be)
            return
    ex.expect(s.value, t)
    sh = ex.const_value(s.value)
    if op in ("/=", "%=") and sh == 0:
        ex.err("division-by-zero", "division by zero", s.value.span,
               "the divisor is the constant 0: divide by another value")  # fmt: skip
    if op in ("<<=", ">>=") and sh is not None and sh < 0:
        ex.err(
            "shift-negative",
            f"shift by a negative count ({sh})",
            s.value.span,
            "shift by 0..63; for the other direction use the other operator",
        )
    elif op in ("<<=", ">>=") and sh is not None and isinstance(t, T.IntType) and sh >= t.bits:
        ex.err(
            "shift-too-far",
            f"shifting a {t} by {sh} bits (it has {t.bits})",
            s.value.span,
            f"shift by 0..{t.bits - 1}, or widen first into a u64 variable",
        )


def _network_order_hint(ex: ExprHost, s: ast.Assign, t: T.IntType) -> str:
    """The bpfdsl form of arithmetic ``s`` (``ip.tot_len -= 4``, ``ip.id++``) on the
    network-order (``be16``/``be32``/``be64``) ``s.target``: through its host-order value,
    ``ip.tot_len = be16(host(ip.tot_len) - 4)``."""
    tgt = ex.s.source_text(s.target.span) or "x"
    written = ex.s.source_text(s.value.span)
    if isinstance(s.value, ast.IntLit) and written.endswith(("++", "--")):
        v = "1"  # `x++`: the builder's `x += 1`, its literal spanning `x++`
    elif isinstance(s.value, (ast.Name, ast.IntLit)):
        v = written
    else:
        v = ex.src_text(s.value)
    return (
        f"`{tgt}` is a {t} (network byte order): write `{tgt} = {t}(host({tgt}) {s.op[:-1]} "
        f"{v})` (the arithmetic on its host-order value; a header's checksum is updated as "
        "for any field write)"
    )


def _swap(ex: ExprHost, e: ast.Call) -> T.Type:
    """``swap(a, b)``: exchange two fields of one header (or two locals/struct fields).
    Checksums need no update when both fields start at the same 16-bit word parity and are
    both in (or both out of) the pseudo-header; other header swaps are refused
    (``sema.csum.check_swap``)."""
    if len(e.args) != 2:
        ex.err("arg-count", "swap(a, b) takes 2 arguments", e.span)
        return T.VOID
    a, b = e.args
    ta, tb = ex.expr(a), ex.expr(b)
    if ta != tb:
        ex.err("type-mismatch", f"swap needs two values of one type, found {ta} and {tb}", e.span)
        return T.VOID
    for x in (a, b):
        ok = isinstance(x, ast.Name) or (
            isinstance(x, ast.Field) and not isinstance(x.obj.ty, (T.CtxType, T.RefType))
        )
        if isinstance(x, ast.Field) and isinstance(x.obj.ty, T.HeaderType):
            f = x.obj.ty.layout.fields.get(x.name)
            ok = ok and f is not None and f.writable and not f.width
        if not ok:
            ex.err(
                "not-assignable", "swap needs two header fields, locals or struct fields", x.span
            )
            return T.VOID
    hdr = [isinstance(x, ast.Field) and isinstance(x.obj.ty, T.HeaderType) for x in (a, b)]
    if any(hdr) and not (
        all(hdr)
        and isinstance(a, ast.Field)
        and isinstance(b, ast.Field)
        and isinstance(a.obj, ast.Name)
        and isinstance(b.obj, ast.Name)
        and a.obj.id == b.obj.id
    ):
        ex.err(
            "swap-headers",
            "swap exchanges fields of one header only (checksums stay valid that way)",
            e.span,
            "assign through a local to move values between "
            "headers; checksums are then updated field by field",
        )
    elif all(hdr) and isinstance(a, ast.Field) and isinstance(b, ast.Field):
        check_swap(ex, a, b, e.span)
    return T.VOID


def _hash_refusal(t: T.Type) -> tuple[str, str]:
    """(message, hint) for a ``hash()`` argument of type ``t`` it cannot take."""
    msg = f"hash() takes integers of at most 32 bits and addresses, found {t}"
    if isinstance(t, T.IntType) and t.be:
        return msg, "hash the halves: `hash((host(x) >> 32) as u32, host(x) as u32)`"
    if isinstance(t, T.IntType):
        return msg, "hash the halves: `hash((x >> 32) as u32, x as u32)`"
    return msg, "hash its fields: `hash(v.a, v.b, ...)`"


def _sock_redirect(ex: ExprHost, e: ast.Call) -> T.Type:
    """msg_redirect_hash/map(map, key, flags) in sk_msg; sock_hash/map_update(map, key, flags)
    in sock_ops: the context is passed implicitly."""
    _helper_kind(ex, e, e.name)
    if len(e.args) != 3:
        ex.err("arg-count", f"{e.name}(map, key, flags) takes 3 arguments", e.span)
        return T.U64
    m = _map_arg(ex, e.args[0])
    if m is not None:
        if not map_fits_helper(MapType(m.map_type), e.name):
            want = "sockhash" if "hash" in e.name else "sockmap"
            ex.err(
                "redirect-map-kind",
                f"`{e.name}` takes a {want}, not a {m.kind} map",
                e.args[0].span,
            )
        else:
            map_key(ex, m, e.args[1])
    ex.expect(e.args[2], T.U64)
    return T.U64 if e.name.startswith("msg") else T.I64


def tail_call(ex: ExprHost, e: ast.Call) -> None:
    """``tail_call(map, index)`` (of ``tail_call(...) else { ... }``): a program body only
    (the kernel needs the context), ``map`` a prog_array, ``index`` a u32 slot."""
    args = e.args
    if ex.s.kind is None:
        ex.err(
            "tail-call-in-fn",
            "`tail_call` is only allowed in a program body",
            e.span,
            "return a value from the fn and tail-call in the program",
        )
    if len(args) != 2 or e.kwargs:
        ex.err("arg-count", "tail_call(map, index) takes 2 arguments", e.span,
               "e.g. `tail_call(progs, 1) else { return XDP_PASS }`")  # fmt: skip
        for a in args:
            ex.expr(a)
        return
    m = _map_arg(ex, args[0])
    if m is not None and m.kind != "prog_array":
        ex.err(
            "tail-call-map",
            f"`tail_call` jumps through a prog_array, not a {m.kind} map",
            args[0].span,
            "declare `map progs: prog_array(max_entries: N) = { 0: prog, ... }`",
        )
        m = None
    ex.expect(args[1], T.U32)
    if m is not None and ex.s.kind is not None and ex.s.prog is not None:
        ex.c.tail_calls.append((ex.s.prog.name, m.name, e.span))


def _loop(ex: ExprHost, e: ast.Call) -> T.Type:
    """``loop(count, callback)`` / ``loop(count, callback, state)``: the kernel's bpf_loop
    (helper 181, Linux 5.17): ``callback(i)`` runs for i = 0, 1, ... count - 1 (at most
    BPF_MAX_LOOPS = 8M times) until it returns true.  ``callback`` is a fn taking the index
    (an integer) and, with ``state``, a struct of the state's type that it reads and
    writes in place (``state``, a struct local of the caller, is passed by reference as
    bpf_loop's ``callback_ctx``); it returns bool (true: stop, as the kernel's 1).  The
    result is the number of calls made (i64).  The callback becomes a static subprogram
    (the kernel: "callback function not static" for a global one).  A callback that parses
    or reads packet bytes (a packet fn) must be a plain fn: it stays inlinable and codegen
    makes the loop's subprogram from it (CodeGen.declare_loop_trampoline), its cursor
    carried from call to call, the caller's left where it was."""
    args = e.args
    if len(args) not in (2, 3) or e.kwargs:
        ex.err(
            "arg-count",
            "loop(count, callback) or loop(count, callback, state) takes 2 or 3 arguments",
            e.span,
            "e.g. `loop(n, step, acc)` with `fn step(i: u32, acc: sums) -> bool`",
        )
        for a in args:
            if not (isinstance(a, ast.Name) and a.id in ex.c.fns):
                ex.expr(a)
        return T.I64
    ex.expect(args[0], T.U32)
    cb = args[1]
    info = ex.c.fns.get(cb.id) if isinstance(cb, ast.Name) else None
    cb.ty = T.VOID  # a function name, not a value
    if info is None:
        ex.err(
            "loop-callback",
            "the callback of `loop` must name a fn",
            cb.span,
            ex.s.suggest(cb.id, ex.c.fns) if isinstance(cb, ast.Name) else None,
        )
        if len(args) == 3:
            ex.expr(args[2])
        return T.I64
    name = info.decl.name
    if info.linkage == "global":
        ex.err(
            "loop-callback",
            f"`{name}` is a global fn: a loop callback must be static",
            cb.span,
            f"declare it `noinline fn {name}` or plain `fn {name}` (the kernel refuses "
            'global callbacks: "callback function not static")',
        )
    want = len(args) - 1
    # the kernel passes the index as a u64 (at most 2^23): u32 or u64 hold it exactly
    ok_index = bool(info.params) and info.params[0][1] in (T.U32, T.U64)
    if len(info.params) != want or not ok_index:
        shape = "(i: u32, state: STRUCT)" if want == 2 else "(i: u32)"
        ex.err(
            "loop-callback",
            f"`{name}` takes {len(info.params)} parameter(s); a loop callback "
            + ("with a state " if want == 2 else "")
            + f"takes {shape}",
            cb.span,
            f"declare `fn {name}{shape} -> bool`",
        )
    elif info.ret != T.BOOL:
        ex.err(
            "loop-callback",
            f"a loop callback returns bool (true: stop), `{name}` returns {info.ret}",
            cb.span,
            f"declare `fn {name}(...) -> bool`",
        )
    if len(args) == 3:
        st = args[2]
        t = ex.expr(st)
        sym = ex.c.sym.get(st) if isinstance(st, ast.Name) else None
        if not (isinstance(sym, Local) and isinstance(t, T.StructType)):
            ex.err(
                "loop-state",
                "the state of `loop` must be a struct variable of the caller (it is passed "
                "by reference, on the stack)",
                st.span,
                "`let acc = sums(total: 0)` then `loop(n, step, acc)`",
            )
        elif len(info.params) == 2 and info.params[1][1] is not t:
            ex.err(
                "loop-state",
                f"`{name}` takes a {info.params[1][1]} state, this is a {t}",
                st.span,
            )
    if name in ex.c.packet_fns:
        # a packet callback: codegen makes the loop's subprogram from the plain fn, which
        # it inlines there with the context and a cursor carried in the loop's frame
        if info.linkage != "inline":
            ex.err(
                "loop-callback",
                f"`{name}` parses or reads packet bytes: a loop callback that does is a "
                f"plain fn (bpfdsl makes the loop's subprogram from it), not a "
                f"{info.decl.modifier} fn",
                cb.span,
                f"declare it `fn {name}`",
            )
        else:
            ex.packet_access(e.span, f"call `{name}` in `loop` (it reads the packet)")
            ex.c.packet_callbacks.add(name)
    kfuncs.check_fn_call(ex, e, name)
    if name in ex.c.ctx_calls and not (name in ex.c.packet_fns and info.linkage == "inline"):
        # a packet callback has the context: the loop's subprogram reads it from the frame
        call, builtin = ex.c.ctx_calls[name]
        ex.err("loop-callback", ctx_message("loop callback", name, call, builtin), cb.span,
               LOOP_CTX_HINT)  # fmt: skip
    if info.linkage == "inline" and name not in ex.c.packet_fns:
        info.linkage = "static"  # its address goes to bpf_loop: a subprogram of its own
    return T.I64
