"""AST of bpfdsl (front end): the nodes :mod:`bpfdsl.lang.build` makes as the parser reduces.

Every node has ``span`` (:class:`bpfdsl.diagnostics.Span`, 1-based line/col of the source).
Sema (:mod:`bpfdsl.lang.sema.analyzer`) annotates nodes through side tables, never by mutating them,
except ``Expr.ty`` which it fills with the checked :mod:`bpfdsl.lang.types` type.

Nodes are ``@dataclass(eq=False)``: constructed with positional or keyword arguments in field
order (``ty`` is not one), compared and hashed by identity (sema's side tables are keyed by
node), with a ``__dict__`` (``vars(node)``: ``span``, the fields, and ``ty`` once sema set it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bpfdsl.diagnostics import Span

if TYPE_CHECKING:
    from bpfdsl.lang import types as T


@dataclass(eq=False)
class Node:
    """Base of all nodes: ``span`` first, then (expressions) ``ty``, then the fields."""

    span: Span


# ---- types as written ----
@dataclass(eq=False)
class NamedType(Node):
    name: str


@dataclass(eq=False)
class ArrayType(Node):
    elem: NamedType | ArrayType
    length: Expr


@dataclass(eq=False)
class BitType(Node):
    """``bit<N>`` (header fields only): ``width`` bits, most significant bit first."""

    name: str  # as written: sema refuses anything but ``bit``
    width: int


TypeRef = NamedType | ArrayType


# ---- expressions ----
@dataclass(eq=False)
class Expr(Node):
    # set by sema: None until then (ExprChecker.expr tests that), a T.Type for every later
    # stage, which is the type declared here (the checker cannot see the phases)
    ty: T.Type = field(default=None, init=False)  # type: ignore[assignment]


@dataclass(eq=False)
class IntLit(Expr):
    value: int


@dataclass(eq=False)
class BoolLit(Expr):
    value: bool


@dataclass(eq=False)
class AddrLit(Expr):
    """IPv4 (4 bytes), IPv6 (16 bytes) or MAC (6 bytes) literal, network byte order.

    ``prefixlen`` is set for prefix literals such as ``10.0.0.0/8``.
    """

    kind: str  # "ipv4" | "ipv6" | "mac"
    data: bytes
    prefixlen: int | None = None


@dataclass(eq=False)
class Name(Expr):
    id: str


@dataclass(eq=False)
class Field(Expr):
    obj: Expr
    name: str


@dataclass(eq=False)
class MethodCall(Expr):
    obj: Expr
    name: str
    args: list[Expr]


@dataclass(eq=False)
class Index(Expr):
    obj: Expr
    index: Expr


@dataclass(eq=False)
class Call(Expr):
    name: str
    args: list[Expr]
    kwargs: dict[str, Expr]


@dataclass(eq=False)
class BinOp(Expr):
    op: str  # + - * / % << >> & | ^
    left: Expr
    right: Expr


@dataclass(eq=False)
class Compare(Expr):
    op: str  # == != < <= > >=
    left: Expr
    right: Expr


@dataclass(eq=False)
class Logic(Expr):
    op: str  # && ||
    left: Expr
    right: Expr


@dataclass(eq=False)
class Unary(Expr):
    op: str  # ! - ~
    operand: Expr


@dataclass(eq=False)
class IncDec(Expr):
    """``x++`` / ``x--`` where a value is wanted: sema refuses it (the builder turns the
    statement ``x++`` into ``x += 1``, an :class:`Assign`)."""

    op: str  # "++" | "--"
    target: Expr


@dataclass(eq=False)
class Cast(Expr):
    expr: Expr
    to: TypeRef


@dataclass(eq=False)
class InPrefix(Expr):
    """``addr in 10.0.0.0/8``: prefix membership, folded to a masked compare."""

    left: Expr
    right: Expr


@dataclass(eq=False)
class Parse(Expr):
    """``parse HEADER``: bounds-checked view of the next header at the parse cursor (optional)."""

    header: str


@dataclass(eq=False)
class PushHeader(Node):
    """One header of a ``push``: its name and fields by name (``ipv4 { ttl: 64, ... }``)."""

    header: str
    fields: dict[str, Expr]
    field_spans: dict[str, Span]


@dataclass(eq=False)
class Push(Expr):
    """``push H1 { f: v, ... }, H2 { ... } before VIEW``: the headers, built from their
    fields (lengths and checksums computed), inserted in front of the parsed header
    ``VIEW``; the bytes before ``VIEW`` (its L2 header) stay in front.  Optional: missing
    when the packet cannot grow (``bpf_xdp_adjust_head`` fails).  Its value is the view of
    the first pushed header."""

    headers: list[PushHeader]
    before: Name


@dataclass(eq=False)
class BytesLit(Expr):
    """``"GET "``: a byte string (UTF-8 text, escapes ``\\xHH`` ...), type ``[u8; N]``."""

    data: bytes


@dataclass(eq=False)
class Load(Expr):
    """``load TYPE at cursor + OFF`` / ``load TYPE at OFF``: the bytes of TYPE at a byte
    offset from the parse cursor (``base`` "cursor") or from the packet's first byte
    (``base`` "packet"); optional (missing when the packet is too short).  ``offset`` is
    None for ``at cursor``."""

    type: TypeRef
    base: str
    offset: Expr | None


# ---- statements ----
@dataclass(eq=False)
class Stmt(Node):
    pass


@dataclass(eq=False)
class Block(Node):
    stmts: list[Stmt]


@dataclass(eq=False)
class Let(Stmt):
    name: str
    type: TypeRef | None
    value: Expr
    orelse: Block | None


@dataclass(eq=False)
class If(Stmt):
    cond: Expr
    then: Block
    orelse: Block | None


@dataclass(eq=False)
class IfLet(Stmt):
    name: str
    value: Expr
    then: Block
    orelse: Block | None


@dataclass(eq=False)
class MatchArm(Node):
    patterns: list[Expr | None]  # None = wildcard
    body: Block


@dataclass(eq=False)
class Match(Stmt):
    subject: Expr
    arms: list[MatchArm]


@dataclass(eq=False)
class For(Stmt):
    var: str
    start: Expr
    end: Expr
    body: Block


@dataclass(eq=False)
class While(Stmt):
    cond: Expr
    body: Block


@dataclass(eq=False)
class Return(Stmt):
    value: Expr | None  # None: a bare `return` (a fn without a return type)


@dataclass(eq=False)
class Break(Stmt):
    pass


@dataclass(eq=False)
class Continue(Stmt):
    pass


@dataclass(eq=False)
class Assign(Stmt):
    target: Expr
    op: str  # "=" or "+=" ...
    value: Expr


@dataclass(eq=False)
class Store(Stmt):
    """``store TYPE at OFFSET = VALUE else { ... }``: write packet bytes (see :class:`Load`);
    ``orelse`` runs when the packet is too short."""

    type: TypeRef
    base: str
    offset: Expr | None
    value: Expr
    orelse: Block


@dataclass(eq=False)
class ExprStmt(Stmt):
    expr: Expr


@dataclass(eq=False)
class CallElse(Stmt):
    """``tail_call(progs, i) else { ... }``: a call with a failure path (``orelse`` runs
    when the call returns; only ``tail_call`` has one)."""

    call: Call
    orelse: Block


@dataclass(eq=False)
class Pop(Stmt):
    """``pop FIRST [through LAST] else { ... }``: remove the parsed headers from ``FIRST``
    to the end of ``LAST`` (``FIRST`` itself without ``through``); the bytes before
    ``FIRST`` stay in front.  ``orelse`` runs when ``bpf_xdp_adjust_head`` fails."""

    first: Name
    last: Name | None
    orelse: Block


# ---- top-level items ----
@dataclass(eq=False)
class License(Node):
    text: str


@dataclass(eq=False)
class ConstDecl(Node):
    name: str
    type: TypeRef
    value: Expr


@dataclass(eq=False)
class ConfigDecl(Node):
    name: str
    type: TypeRef
    value: Expr


@dataclass(eq=False)
class MapDecl(Node):
    name: str
    kind: str
    kind_span: Span
    type_args: list[TypeRef]
    args: dict[str, Expr]
    arg_spans: dict[str, Span] = field(default_factory=dict)  # argument name -> its span
    # ``= { KEY: VALUE, ... }``: initial entries (prog_array: index -> program name)
    init: list[tuple[Expr, Expr]] | None = None


@dataclass(eq=False)
class FieldDecl(Node):
    name: str
    type: TypeRef


@dataclass(eq=False)
class StructDecl(Node):
    name: str
    fields: list[FieldDecl]


@dataclass(eq=False)
class HeaderFieldDecl(Node):
    """A field of a ``header``: ``cond`` (``if EXPR``) makes it present only when EXPR, over
    the header's earlier fields, is not 0."""

    name: str
    type: TypeRef | BitType
    cond: Expr | None


@dataclass(eq=False)
class HeaderDecl(Node):
    """``header NAME(ARGS) { FIELDS }``: a packet header layout (see bpfdsl.lang.layout)."""

    name: str
    fields: list[HeaderFieldDecl]
    args: dict[str, Expr]
    arg_spans: dict[str, Span] = field(default_factory=dict)  # argument name -> its span


@dataclass(eq=False)
class Param(Node):
    name: str
    type: TypeRef


@dataclass(eq=False)
class FnDecl(Node):
    """``[MODIFIER] fn NAME(PARAMS) -> RET { ... }``; ``optional``: declared ``-> RET?`` (the
    fn may ``return none``); ``modifier`` is the word before ``fn`` (``noinline``,
    ``global``; None: inlined) and ``modifier_span`` its position."""

    name: str
    params: list[Param]
    ret: TypeRef | None
    body: Block
    optional: bool = False
    modifier: str | None = None
    modifier_span: Span | None = None


@dataclass(eq=False)
class ProgDecl(Node):
    """``xdp fn name(ctx) { ... }``; ``keyword`` is the PROGRAM_KINDS keyword (``xdp(cpumap)``).

    ``run_config``: the ``name: expr`` options in the parentheses (``xdp(priority: 10,
    chain_call: XDP_PASS)``, libxdp's run config), with their names' spans."""

    keyword: str
    name: str
    ctx: str
    body: Block
    run_config: dict[str, Expr] = field(default_factory=dict)
    run_config_spans: dict[str, Span] = field(default_factory=dict)


@dataclass(eq=False)
class Program(Node):
    items: list[Node]
    source: str = ""
