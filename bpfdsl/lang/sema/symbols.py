"""Names the sema modules share (the mypy ``semanal_shared`` way: every sema module imports
this one at the top, none imports another for these): the symbol records a scope holds
(:class:`Local`, :class:`Const`, :class:`Config`, :class:`FnInfo`), the predefined names
(actions from prog_types' ``PROGRAM_KINDS`` return tables, map update flags, header constants),
the builtin function signatures, :func:`const_int`, the result of sema (:class:`Checked`,
with the :class:`PushPlan`/:class:`PopPlan` of each push/pop) and the state records of a
body (:class:`MetaState`).  Codegen reads the same records.  :class:`SemaHost` and
:class:`ExprHost` are the parts of ``analyzer.Sema`` and ``expr.ExprChecker`` the other
sema modules use (protocols: those two import the modules that take them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from bpfdsl.abi.btf.run_config import RunConfig
from bpfdsl.abi.fib import BPF_FIB_LOOKUP_SIZE, FIB_LOOKUP_FIELDS, FibLookupFlag, FibResult
from bpfdsl.abi.flags import (
    BPF_ANY,
    BPF_EXIST,
    BPF_F_BROADCAST,
    BPF_F_EXCLUDE_INGRESS,
    BPF_F_INGRESS,
    BPF_NOEXIST,
    BPF_RB_FORCE_WAKEUP,
    BPF_RB_NO_WAKEUP,
)
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.prog_types import PROGRAM_KINDS, ProgramKind
from bpfdsl.diagnostics import Diagnostic, Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import CONSTANTS, HEADERS
from bpfdsl.lang.layout import Header


@dataclass(eq=False, slots=True)
class Local:
    """A local variable (or parameter); ``ty`` its type; headers may go stale (B06).

    ``header_parent``: for an L4 header, the IP header it was parsed after; ``bounds``: for
    a loop variable, start..end (end exclusive).  Compared by identity (a symbol)."""

    name: str
    ty: T.Type
    span: Span
    header_parent: Local | None = None
    bounds: tuple[int, int] | None = None


@dataclass(eq=False, slots=True)
class Const:
    """A ``const``: ``value`` the raw (memory) value; ``data`` for byte-string constants
    (mac_addr, ipv6_addr, prefixes)."""

    name: str
    ty: T.Type
    value: int
    data: bytes | None = None


@dataclass(eq=False, slots=True)
class Config:
    """A load-time setting in .rodata; ``value`` raw default, ``offset`` in .rodata (bytes)."""

    name: str
    ty: T.Type
    value: int
    offset: int = 0


@dataclass(eq=False, slots=True)
class FnInfo:
    """A function: its declaration, ``params`` (name, type), return type and ``linkage``:
    ``"inline"`` (plain ``fn``: inlined at every call), ``"static"`` (``noinline fn``, or a
    ``loop`` callback: a BPF subprogram, BTF linkage static, checked by the kernel with its
    caller's argument types) or ``"global"`` (``global fn``: BTF linkage global, verified
    by the kernel once, on its own, for any arguments of its declared types)."""

    decl: ast.FnDecl
    params: list[tuple[str, T.Type]]
    ret: T.Type
    linkage: str = "inline"


# ``MODIFIER fn``: the word before ``fn`` -> FnInfo.linkage
FN_MODIFIERS = {"noinline": "static", "global": "global"}
NULLABLE_ARG = "global fn argument"  # OptionalType.what of a pointer argument of a global fn


FLAG_CONSTANTS = {
    "BPF_ANY": BPF_ANY,
    "BPF_NOEXIST": BPF_NOEXIST,
    "BPF_EXIST": BPF_EXIST,
    "BPF_F_INGRESS": BPF_F_INGRESS,
    "BPF_F_BROADCAST": BPF_F_BROADCAST,
    "BPF_F_EXCLUDE_INGRESS": BPF_F_EXCLUDE_INGRESS,
    "BPF_RB_NO_WAKEUP": BPF_RB_NO_WAKEUP,
    "BPF_RB_FORCE_WAKEUP": BPF_RB_FORCE_WAKEUP,
}
# bpf_fib_lookup's flags and results (bpfdsl.abi.fib, include/uapi/linux/bpf.h): untyped
FLAG_CONSTANTS.update({f"BPF_FIB_LOOKUP_{f.name}": int(f) for f in FibLookupFlag})
FLAG_CONSTANTS.update({f"BPF_FIB_LKUP_RET_{r.name}": int(r) for r in FibResult})
_FIB_KINDS: dict[tuple[str, int], T.Type] = {
    ("u", 1): T.U8,
    ("u", 2): T.U16,
    ("u", 4): T.U32,
    ("be", 2): T.BE16,
    ("be", 4): T.BE32,
    ("ipv6", 16): T.IPV6_ADDR,
    ("mac", 6): T.MAC,
}
FIB_LOOKUP = T.StructType(
    "bpf_fib_lookup",
    {n: (off, _FIB_KINDS[kind, size]) for n, off, size, kind in FIB_LOOKUP_FIELDS},
    BPF_FIB_LOOKUP_SIZE,
    4,
)
"""``struct bpf_fib_lookup`` as the kernel lays it out; union members share bytes."""
BUILTIN_STRUCTS: dict[str, T.StructType] = {"bpf_fib_lookup": FIB_LOOKUP}
"""Kernel structs every program may build (``bpf_fib_lookup(family: AF_INET, ...)``)."""

ACTIONS: dict[str, int] = {}
for _k in PROGRAM_KINDS:
    ACTIONS.update({n: int(v) for n, v in _k.returns.items() if not n.isdigit()})

PKT_RESIZE = {
    "msg_pull_data": "msg_pull_data",
    "msg_push_data": "msg_push_data",
    "msg_pop_data": "msg_pop_data",
    "adjust_head": "xdp_adjust_head",
    "adjust_tail": "xdp_adjust_tail",
    "adjust_meta": "xdp_adjust_meta",
}
# The language type of a helper's integer result by its prototype's C type
# (HelperProto.ret_ctype, include/uapi/linux/bpf.h): `long` is 64-bit signed on BPF (a
# negative errno on failure).
RET_TYPES: dict[str, T.Type] = {"long": T.I64, "s64": T.I64, "u64": T.U64, "u32": T.U32}


def helper_result(name: str) -> T.Type:
    """The language type of helper ``name``'s result (``bpf_NAME`` without ``bpf_``), from
    the one helper table: ``xdp_get_buff_len`` is u64 as the kernel declares it."""
    return RET_TYPES[HELPERS[name].ret_ctype]


# builtin fn -> (param types, return type); None = special-cased.  A builtin that is one
# helper call has the helper's result type (helper_result).
BUILTINS: dict[str, tuple[list[T.Type], T.Type] | None] = {
    "redirect": None,  # the XDP action (bpfdsl.lang.sema.helpers.redirect)
    "redirect_map": None,
    "adjust_head": ([T.I32], helper_result("xdp_adjust_head")),
    "adjust_tail": ([T.I32], helper_result("xdp_adjust_tail")),
    "adjust_meta": ([T.I32], helper_result("xdp_adjust_meta")),
    "ktime_get_ns": ([], helper_result("ktime_get_ns")),
    "get_prandom_u32": ([], helper_result("get_prandom_u32")),
    "get_smp_processor_id": ([], helper_result("get_smp_processor_id")),
    "ktime_get_boot_ns": ([], helper_result("ktime_get_boot_ns")),
    # the frame's bytes, every fragment (xdp(frags))
    "xdp_get_buff_len": ([], helper_result("xdp_get_buff_len")),
    "fib_lookup": None,  # bpfdsl.lang.sema.helpers
    "csum_diff": None,
    "xdp_load_bytes": None,  # every fragment of an xdp(frags) frame (bpfdsl.lang.sema.helpers)
    "xdp_store_bytes": None,
    "msg_redirect_hash": None,
    "msg_redirect_map": None,
    "sock_hash_update": None,
    "sock_map_update": None,
    "msg_apply_bytes": ([T.U32], helper_result("msg_apply_bytes")),
    "msg_cork_bytes": ([T.U32], helper_result("msg_cork_bytes")),
    "msg_pull_data": ([T.U32, T.U32, T.U64], helper_result("msg_pull_data")),
    "msg_push_data": ([T.U32, T.U32, T.U64], helper_result("msg_push_data")),
    "msg_pop_data": ([T.U32, T.U32, T.U64], helper_result("msg_pop_data")),
    "sock_ops_cb_flags_set": ([T.U32], helper_result("sock_ops_cb_flags_set")),
    "swap": None,
    "hash": None,
    "host": None,
    "be16": None,
    "be32": None,
    "be64": None,
    "skip_ext": None,
    "offset": None,
    "meta": None,  # the XDP metadata area (bpfdsl.lang.sema.meta)
    # events to user space (bpfdsl.lang.sema.events)
    "ringbuf_output": None,
    "ringbuf_reserve": None,
    "ringbuf_submit": None,
    "ringbuf_discard": None,
    "perf_event_output": None,
    # subprogram calls: bpf_loop and tail calls (bpfdsl.lang.sema.calls)
    "loop": None,
    "tail_call": None,
    # bit-casts and checksum arithmetic (bpfdsl.lang.sema.bitcast)
    "raw": None,
    "as_be": None,
    "csum_fold": None,
    "csum_replace": None,
}


def bswap(v: int, bits: int) -> int:
    return int.from_bytes((v & ((1 << bits) - 1)).to_bytes(bits // 8, "little"), "big")


def const_int(sema: ExprOwner, e: ast.Expr) -> int | None:
    """Check ``e`` and return its compile-time integer value or None: host order, and a
    signed type's value read as signed (an i32 -3 is -3, not 0xfffffffd)."""
    sema.ex.expr(e)
    return sema.ex.const_value(e)


def const_int_arg(sema: ExprOwner, e: ast.Expr, code: str, what: str, example: str) -> int | None:
    """:func:`const_int` of an argument that must be a compile-time integer (a map's
    ``max_entries``, a program's ``priority``): None after the located error ``code``,
    "``what`` must be a compile-time integer" with the hint ``example`` (none when ``e``
    already has an error)."""
    n = const_int(sema, e)
    if n is None or not isinstance(e.ty, (T.IntType, T.UntypedInt)):
        if not isinstance(e.ty, T.ErrorType):
            sema.err(code, f"{what} must be a compile-time integer", e.span,
                     f"write a number or a `const`, e.g. `{example}`")  # fmt: skip
        return None
    return n


def is_builtin_constant(name: str) -> bool:
    """True for names the language predefines (actions, header constants, map flags, and
    ``none``, what a fn declared ``-> T?`` returns when it has no T)."""
    return name in CONSTANTS or name in ACTIONS or name in FLAG_CONSTANTS or name == "none"


# ``Sema.cursor``: what the parse cursor (where the next ``parse`` reads) is just past on
# every path reaching the statement being checked: a header Local, None (the packet start),
# an ast.Parse whose Local is not bound yet, or CURSOR_UNKNOWN (paths disagree).  An L4
# header's ``header_parent`` is the IP header it directly follows on every path, so the
# pseudo-header checksum update of an IP address write touches exactly that header
# (backend.codegen.csum._related_l4); any other L4 view (one parsed in the payload, or after a
# branch that parsed) gets none, and codegen finds the real L4 header at run time.
CURSOR_UNKNOWN = "unknown"


@dataclass(slots=True)
class MetaState:
    """Metadata bytes reserved on every path here: ``reserved`` (None: unknown, anything
    may be there) and the line of the ``adjust_meta`` that set it (0: none)."""

    reserved: int | None = 0
    line: int = 0


@dataclass(frozen=True, slots=True)
class PushPlan:
    """``prefix``: bytes before the view, kept in front; ``headers``: the layouts pushed,
    outermost first; ``ethertype``: the EtherType to write in the last two bytes of the
    prefix (None: they stay); ``inner``: the view's header name (its length field gives
    the inner packet's length: ipv4 ``tot_len``, ipv6 ``payload_len`` + 40; any other:
    the bytes from the view to the packet's end)."""

    prefix: int
    headers: tuple[Header, ...]
    ethertype: int | None
    inner: str


@dataclass(frozen=True, slots=True)
class PopPlan:
    """``prefix``: bytes before the first popped header, kept in front; ``delta``: the
    bytes popped when every popped header has a fixed size (None: computed at run time)."""

    prefix: int
    delta: int | None


@dataclass(eq=False, slots=True)
class Checked:
    """Result of sema: everything codegen needs, keyed by AST node where per-node.

    ``cval``: folded scalar constants (raw memory value); ``cbytes``: folded byte
    constants; ``sym``: Name/Let/For -> symbol; ``optype``: Compare operand type;
    ``pkt_reset``: calls that resize the packet; ``warnings``: compile-time warnings;
    ``stores``: the type each ``store`` writes; ``headers``: the headers the program
    declares (None for one with errors), which replace library headers of the same name;
    ``packet_fns``: fns that touch the packet (parse, skip_ext, load/store, or call such a
    fn), given the ctx and cursor by codegen."""

    program: ast.Program
    filename: str
    license: str = ""
    structs: dict[str, T.StructType] = field(default_factory=dict)
    consts: dict[str, Const] = field(default_factory=dict)
    configs: dict[str, Config] = field(default_factory=dict)
    maps: dict[str, T.MapType] = field(default_factory=dict)
    map_decls: dict[str, ast.MapDecl] = field(default_factory=dict)
    fns: dict[str, FnInfo] = field(default_factory=dict)
    progs: list[tuple[ast.ProgDecl, ProgramKind]] = field(default_factory=list)
    run_configs: dict[str, RunConfig] = field(default_factory=dict)  # libxdp, by program
    cval: dict[ast.Expr, int] = field(default_factory=dict)
    cbytes: dict[ast.Expr, bytes] = field(default_factory=dict)
    sym: dict[ast.Node, object] = field(default_factory=dict)
    optype: dict[ast.Expr, T.Type] = field(default_factory=dict)
    pkt_reset: set[ast.Node] = field(default_factory=set)
    # sema.resize: statements after which / loops before whose next iteration codegen puts
    # the cursor back at the packet's start; programs that resize the packet
    cursor_reset: set[ast.Node] = field(default_factory=set)
    latch_reset: set[ast.Node] = field(default_factory=set)
    resizing_progs: set[ast.Node] = field(default_factory=set)
    warnings: list[Diagnostic] = field(default_factory=list)
    headers: dict[str, Header | None] = field(default_factory=dict)
    packet_fns: set[str] = field(default_factory=set)
    # packet fns and the fns that call a global packet fn (directly or not): a program
    # calling one must have packet data
    packet_reach: set[str] = field(default_factory=set)
    # packet fns that are the callback of a `loop` (plain fns: codegen makes the loop's
    # subprogram from each, CodeGen.declare_loop_trampoline)
    packet_callbacks: set[str] = field(default_factory=set)
    # fn -> (the call that needs the program's context, the builtin): sema.subprog_ctx
    ctx_calls: dict[str, tuple[ast.Call, str]] = field(default_factory=dict)
    # fn -> the kfunc it calls, directly or not (sema.subprog_ctx.find_kfunc_fns)
    kfunc_fns: dict[str, str] = field(default_factory=dict)
    stores: dict[ast.Store, T.Type] = field(default_factory=dict)  # the type each `store` writes
    # what codegen needs of each `push` / `pop` (sema.encap)
    pushes: dict[ast.Push, PushPlan] = field(default_factory=dict)
    pops: dict[ast.Pop, PopPlan] = field(default_factory=dict)
    # fn -> indexes of the aggregate parameters it may write (sema.params): a call of a fn
    # that only reads one passes the caller's memory, not a copy
    written_params: dict[str, frozenset[int]] = field(default_factory=dict)
    # fns that may change the packet (sema.resize.pkt_changing_fns): after a call of one,
    # the caller's header views are invalid
    pkt_changing_fns: set[str] = field(default_factory=set)
    # prog_array name -> slot -> the ast.Name of the program it holds (`= { 0: prog }`)
    prog_array_init: dict[str, dict[int, ast.Expr]] = field(default_factory=dict)
    # (program name, prog_array name, span) of every `tail_call(map, i) else { ... }`
    tail_calls: list[tuple[str, str, Span]] = field(default_factory=list)

    def header(self, name: str) -> Header | None:
        """The layout ``parse name`` uses: the program's own declaration, else the library's;
        None if there is none (or the program's has errors, already reported)."""
        if name in self.headers:
            return self.headers[name]
        return HEADERS.get(name)

    def header_names(self) -> list[str]:
        return list(dict.fromkeys([*self.headers, *HEADERS]))


class ExprHost(Protocol):
    """What the sema modules use of the expression checker, :class:`bpfdsl.lang.sema.expr.
    ExprChecker` (which imports them: the mypy ``semanal_shared`` way of naming it here)."""

    c: Checked

    @property
    def s(self) -> SemaHost: ...
    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None: ...
    def expr(self, e: ast.Expr) -> T.Type: ...
    def expect(self, e: ast.Expr, ty: T.Type) -> None: ...
    def coerce(self, e: ast.Expr, ty: T.Type) -> None: ...
    def cond(self, e: ast.Expr) -> None: ...
    def unhandled(self, e: ast.Expr) -> None: ...
    def const_value(self, e: ast.Expr) -> int | None: ...
    def const_as(self, e: ast.Expr, ty: T.Type) -> int | None: ...
    def src_text(self, e: ast.Expr) -> str: ...
    def packet_access(self, span: Span, what: str) -> None: ...
    def pkt_bytes(self, e: ast.Load | ast.Store, what: str) -> T.Type: ...
    def assign(self, s: ast.Assign) -> None: ...
    def tail_call(self, e: ast.Call) -> None: ...


class ExprOwner(Protocol):
    """:class:`bpfdsl.lang.sema.analyzer.Sema` or one of its mixins: what :func:`const_int`
    needs."""

    @property
    def ex(self) -> ExprHost: ...
    def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None: ...


class SemaHost(ExprOwner, Protocol):
    """What the sema modules use of :class:`bpfdsl.lang.sema.analyzer.Sema` (the state of
    the body being checked; see its ``__init__``)."""

    c: Checked
    diags: list[Diagnostic]
    scopes: list[dict[str, object]]
    kind: ProgramKind | None
    fn: FnInfo | None
    prog: ast.ProgDecl | None
    cursor: object
    stale: dict[Local, int]
    resized: frozenset[ast.Node]
    view_uses: list[tuple[Local, Span]]
    meta: MetaState
    parse_from: dict[ast.Parse, object]
    follows: dict[Local, object]
    pushed: dict[Local, int]
    payload_writes: list[tuple[Span | None, Local]]
    gone: dict[str, tuple[Local, int]]

    def source_text(self, span: Span) -> str: ...
    def suggest(self, name: str, options: Iterable[str]) -> str | None: ...
    def resolve_type(self, t: ast.TypeRef) -> T.Type: ...
    def lookup(self, name: str) -> object: ...
    def diverges(self, b: ast.Block | None) -> bool: ...
    def block(
        self, b: ast.Block, new_scope: bool = True, bind: tuple[str, Local] | None = None
    ) -> None: ...
