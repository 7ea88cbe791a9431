"""Kernel helpers with typed arguments for sema (front end; used by sema.calls only).

``fib_lookup(params, flags)`` (``bpf_fib_lookup(ctx, &params, sizeof(params), flags)``),
``csum_diff(from, to, seed)``, the flags of ``redirect`` / ``redirect_map`` exactly as
net/core/filter.c accepts them, and ``bpf_NAME(args)``: any helper of the one helper table
(bpfdsl.abi.helpers) whose prototype takes scalars, checked against that prototype and
against the program type, as the kernel's ``*_func_proto`` functions do; its result has
the prototype's C type (``symbols.RET_TYPES``); helpers that change the packet are called through
the language's own forms only (``adjust_head``, ``msg_pull_data``, ...).
"""

from __future__ import annotations

from bpfdsl.abi.fib import FIB_LOOKUP_FLAGS, FibLookupFlag
from bpfdsl.abi.helpers import (
    HELPERS,
    PROTOTYPES,
    XDP_REDIRECT_FLAGS,
    ArgKind,
    HelperProto,
    RetKind,
    callable_by_name,
    helper_allowed,
    redirect_map_flags,
)
from bpfdsl.abi.limits import CSUM_DIFF_MAX, MAX_BPF_STACK
from bpfdsl.abi.map_types import MapType
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.c_names import c_form
from bpfdsl.lang.sema.symbols import FIB_LOOKUP, PKT_RESIZE, RET_TYPES, ExprHost, Local

BY_NAME: dict[str, HelperProto] = {h.name: h for h in PROTOTYPES[1:]}
FIB_HINT = (
    "`let fib = bpf_fib_lookup(family: AF_INET, ipv4_src: ip.saddr, ipv4_dst: ip.daddr, "
    "ifindex: ctx.ingress_ifindex)` then `let rc = fib_lookup(fib, 0)`"
)


def helper_kind(ex: ExprHost, e: ast.Call, name: str) -> bool:
    """Error unless helper ``name`` (a builtin or table name) may be called from the current
    program kind (the kernel's ``*_func_proto`` for its program type)."""
    h = HELPERS.get(PKT_RESIZE.get(name, name)) or HELPERS.get(name)
    kind = ex.s.kind
    if h is None or kind is None or helper_allowed(h, kind.program_type):
        return True
    ex.err(
        "helper-not-allowed",
        f"`{e.name}` cannot be called from a {kind.keyword} program",
        e.span,
        "the kernel offers it to: " + ", ".join(sorted(p.name.lower() for p in h.prog_types or ())),
    )
    return False


def _flags(ex: ExprHost, e: ast.Expr, allowed: int, what: str, names: str, why: str) -> None:
    """A constant flags argument ``e`` with bits outside ``allowed`` is an error."""
    ex.expect(e, T.U64)
    v = ex.const_value(e)
    if v is None or not v & ~allowed & ((1 << 64) - 1):
        return
    bad = v & ~allowed & ((1 << 64) - 1)
    ex.err("bad-flags", f"{what} does not take flag bits {bad:#x}: {why}", e.span, names)


def fib_lookup(ex: ExprHost, e: ast.Call) -> T.Type:
    """``fib_lookup(params, flags)``: ``params`` a ``bpf_fib_lookup`` local (or map value)
    the kernel reads and writes; flags BPF_FIB_LOOKUP_* (others: -EINVAL)."""
    helper_kind(ex, e, "fib_lookup")
    if len(e.args) != 2 or e.kwargs:
        ex.err("arg-count", "fib_lookup(params, flags) takes 2 arguments", e.span, FIB_HINT)
        for a in e.args:
            ex.expr(a)
        return T.I64
    p, flags = e.args
    t = ex.expr(p)
    inner = t.inner if isinstance(t, T.RefType) else t
    local = isinstance(p, ast.Name) and isinstance(ex.c.sym.get(p), Local)
    ok = inner is FIB_LOOKUP and (local or (isinstance(t, T.RefType) and not t.readonly))
    if t is not T.ERR and not ok:
        found = f"found {t}" if inner is not FIB_LOOKUP else "found a temporary value"
        ex.err(
            "type-mismatch",
            "fib_lookup takes a `bpf_fib_lookup` variable (the kernel writes its result "
            f"there), {found}",
            p.span,
            FIB_HINT,
        )
    names = "flags: " + ", ".join(f"BPF_FIB_LOOKUP_{f.name}" for f in FibLookupFlag)
    _flags(ex, flags, FIB_LOOKUP_FLAGS, "fib_lookup", names, "the kernel returns -EINVAL")
    return T.I64


XDP_BYTES_MAX = MAX_BPF_STACK  # bytes: the most a stack local holds
XDP_BYTES_HINT = (
    'e.g. `let b: [u8; 4] = "\\x00\\x00\\x00\\x00"` then `xdp_load_bytes(4000, b)`: a local '
    "byte array, integer or struct"
)


def xdp_bytes(ex: ExprHost, e: ast.Call) -> T.Type:
    """``xdp_load_bytes(offset, dst)`` / ``xdp_store_bytes(offset, src)``:
    ``bpf_xdp_load_bytes(ctx, offset, &dst, sizeof(dst))`` / ``bpf_xdp_store_bytes`` (helpers
    189/190, net/core/filter.c, Linux 5.18), which reach every fragment of an ``xdp(frags)``
    frame.  ``offset`` (u32, bytes from the frame's first byte); ``dst``/``src`` is a local
    (or a map value's reference, writable for ``dst``): a byte array, integer or struct of 1..512 bytes (its size is the helper's constant ``len``),
    its bytes copied as stored (an integer in host order).  Returns 0, -EINVAL when
    ``offset + len`` passes the frame's end, -EFAULT for an offset above 0xffff."""
    helper_kind(ex, e, e.name)
    load = e.name == "xdp_load_bytes"
    what = "dst" if load else "src"
    if len(e.args) != 2 or e.kwargs:
        ex.err("arg-count", f"{e.name}(offset, {what}) takes 2 arguments", e.span, XDP_BYTES_HINT)
        for a in e.args:
            ex.expr(a)
        return T.I64
    off, v = e.args
    ex.expect(off, T.U32)
    t = ex.expr(v)
    if t is T.ERR:
        return T.I64
    sym = ex.c.sym.get(v) if isinstance(v, ast.Name) else None
    ref = t if type(t) is T.RefType else None  # not the metadata area or a ringbuf record
    t = ref.inner if ref is not None else t  # a map value: the helper takes its memory
    fixed = isinstance(t, (T.IntType, T.BytesType, T.ArrayType, T.StructType))
    found = None
    if not fixed:
        found = f"found {t}, which has no fixed size in memory"
    elif ref is not None:
        if load and ref.readonly:
            found = f"found {ref}, read-only memory"
    elif not isinstance(sym, Local):
        found = "found a temporary value"
    elif sym.bounds is not None:  # the loop's counter: give the helper a copy
        found = f"found loop variable `{sym.name}` (copy it to a local first)"
    if found is not None:
        ex.err(
            "type-mismatch",
            f"{e.name} takes a local variable of a fixed-size type (byte array, integer or "
            f"struct) whose bytes it {'fills' if load else 'writes'}, {found}",
            v.span,
            XDP_BYTES_HINT,
        )
    elif not 1 <= t.size <= XDP_BYTES_MAX:
        ex.err(
            "helper-arg",
            f"{e.name} copies 1..{XDP_BYTES_MAX} bytes: this {t} is {t.size} bytes",
            v.span,
            "the length is the local's size, on the 512-byte BPF stack",
        )
    return T.I64


def is_empty_side(ex: ExprHost, a: ast.Expr) -> bool:
    """Whether a ``csum_diff`` argument is ``none``: no bytes on that side (``NULL, 0`` in
    C), the kernel's form for adding (``from`` empty) or removing (``to`` empty) bytes."""
    return isinstance(a, ast.Name) and a.id == "none" and ex.s.lookup("none") is None


def csum_diff(ex: ExprHost, e: ast.Call) -> T.Type:
    """``csum_diff(from, to, seed)``: ``bpf_csum_diff`` over the bytes of two values (32- and
    64-bit integers as stored, structs, addresses, arrays, header fields: packet bytes),
    each a whole number of 32-bit words, at most 512 bytes, or ``none`` for no bytes (the
    kernel takes NULL with size 0 on either side: net/core/filter.c, "from_size == 0,
    to_size > 0, seed := csum --> pushing data"); seed u32.  Returns the 32-bit ones'-complement sum (or a negative errno)."""
    helper_kind(ex, e, "csum_diff")
    if len(e.args) != 3 or e.kwargs:
        ex.err(
            "arg-count",
            "csum_diff(from, to, seed) takes 3 arguments",
            e.span,
            "e.g. `csum_diff(old, new, 0)` for two ipv6_addr values",
        )
        for a in e.args:
            ex.expr(a)
        return T.I64
    for a in e.args[:2]:
        if is_empty_side(ex, a):
            a.ty = T.VOID  # no bytes: codegen passes NULL, 0
            continue
        t = ex.expr(a)
        t = t.inner if isinstance(t, T.RefType) else t
        if t is T.ERR:
            continue
        if isinstance(t, T.UntypedInt):
            ex.coerce(a, T.U32)
            continue
        if not isinstance(t, (T.StructType, T.BytesType, T.ArrayType, T.IntType)):
            ex.err(
                "type-mismatch",
                f"csum_diff sums the bytes of a value (an integer, struct, address, array or "
                f"header field), found {t}",
                a.span,
                "e.g. `csum_diff(ip.daddr, new_daddr, 0)`, or `none` for no bytes on one side",
            )
        elif t.size % 4 or t.size > CSUM_DIFF_MAX:
            ex.err(
                "helper-arg",
                f"csum_diff sums whole 32-bit words of at most {CSUM_DIFF_MAX} bytes: this "
                f"{t} is {t.size} bytes",
                a.span,
                "the kernel returns -EINVAL for other sizes: pad the value to a multiple of 4",
            )
    ex.expect(e.args[2], T.U32)
    return T.I64


def redirect(ex: ExprHost, e: ast.Call) -> T.Type:
    """``redirect(ifindex, flags)`` from XDP: ``bpf_xdp_redirect`` returns XDP_ABORTED for
    any flag (net/core/filter.c), so a constant other than 0 is an error."""
    helper_kind(ex, e, "redirect")
    if len(e.args) != 2 or e.kwargs:
        ex.err("arg-count", "redirect(ifindex, flags) takes 2 arguments", e.span)
        for a in e.args:
            ex.expr(a)
        return T.U64
    ex.expect(e.args[0], T.U32)
    _flags(
        ex,
        e.args[1],
        XDP_REDIRECT_FLAGS,
        "redirect",
        "write `redirect(ifindex, 0)`; BPF_F_INGRESS is for tc programs, BPF_F_BROADCAST "
        "for `redirect_map` on a devmap",
        "from XDP the kernel returns XDP_ABORTED for any flag",
    )
    return T.U64


def redirect_map_fallback(ex: ExprHost, m: T.MapType, fb: ast.Expr) -> None:
    """The fallback (flags) of ``redirect_map``: an action in the low two bits, plus
    BPF_F_BROADCAST / BPF_F_EXCLUDE_INGRESS for a devmap (``__bpf_xdp_redirect_map``);
    any other constant bit makes the kernel return XDP_ABORTED."""
    allowed = redirect_map_flags(MapType(m.map_type))
    extra = " | BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS" if allowed > 3 else ""
    v = ex.const_value(fb)
    if v is None or not v & ~allowed & ((1 << 64) - 1):
        return
    ex.err(
        "bad-flags",
        f"redirect_map into a {m.kind} map does not take flag bits "
        f"{v & ~allowed & ((1 << 64) - 1):#x}: the kernel returns XDP_ABORTED",
        fb.span,
        f"the fallback is one of XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX{extra}",
    )


def _c_form(ex: ExprHost, e: ast.Call) -> str | None:
    """``write `FORM``` for the helper call ``e`` the language writes its own way (the one
    table of C names, :mod:`bpfdsl.lang.c_names`), with its arguments put in."""
    got = c_form(e.name, [ex.s.source_text(a.span) for a in e.args])
    if got is None:
        return None
    return f"write {got[0]}" + (f" ({got[1]})" if got[1] else "")


def by_name(ex: ExprHost, e: ast.Call) -> T.Type | None:
    """``bpf_NAME(args)``: any helper of the table with scalar arguments; the context, where
    the prototype takes it first, is passed implicitly.  None if ``bpf_NAME`` is no helper."""
    h = BY_NAME.get(e.name[len("bpf_") :])
    if h is None:
        return None
    for a in e.args:
        ex.expr(a)
    if callable_by_name(h) and h.pkt_changing:
        # the language's form re-reads the packet pointers and marks header views stale
        ex.err(
            "helper-not-modelled",
            f"`{e.name}` (helper #{h.id}) changes the packet: it cannot be called by name",
            e.span,
            f"{_c_form(ex, e)}: after it every header view is invalid and "
            "the packet is parsed again",
        )
        return T.ERR
    if not callable_by_name(h):
        hint = (
            _c_form(ex, e)
            or "the helpers callable as `bpf_NAME(...)` take scalars only; see "
            'docs/language.md "Kernel helpers"'
        )
        what = "takes memory or map arguments" if h.modelled else "has no prototype in bpfdsl"
        ex.err(
            "helper-not-modelled",
            f"`{e.name}` (helper #{h.id}) {what}: it cannot be called by name",
            e.span,
            hint,
        )
        return T.ERR
    assert h.args is not None  # callable_by_name: modelled
    takes_ctx = h.args[:1] == (ArgKind.PTR_TO_CTX,)
    params = h.args[1:] if takes_ctx else h.args
    helper_kind(ex, e, h.name)
    if takes_ctx and ex.s.kind is None:
        ex.err(
            "helper-in-fn",
            f"`{e.name}` takes the program's context: call it in a program body",
            e.span,
            "a `fn` has no context; return what it needs from the program instead",
        )
    if len(e.args) != len(params) or e.kwargs:
        ctx = " (the context is passed for you)" if takes_ctx else ""
        without: str | None = None
        if takes_ctx and len(e.args) == len(params) + 1:  # C's `bpf_NAME(ctx, ...)`
            rest = ", ".join(ex.s.source_text(a.span) for a in e.args[1:])
            without = f"write `{e.name}({rest})`"
        ex.err("arg-count", f"`{e.name}` takes {len(params)} argument(s){ctx}", e.span, without)
    for a in e.args[: len(params)]:
        ex.coerce(a, T.U64)
    return T.VOID if h.ret is RetKind.VOID else RET_TYPES[h.ret_ctype]
