"""AST of bpfdsl (front end): plain classes made by :mod:`bpfdsl.lang.build` as the parser reduces.

Every node has ``span`` (:class:`bpfdsl.diagnostics.Span`, 1-based line/col of the source).
Sema (:mod:`bpfdsl.lang.sema.analyzer`) annotates nodes through side tables, never by mutating them,
except ``Expr.ty`` which it fills with the checked :mod:`bpfdsl.lang.types` type.

Nodes are plain classes with a hand-written ``__init__`` (positional or keyword arguments;
``ty`` is not one) rather than dataclasses: a program makes thousands of nodes per compile
and ``import bpfdsl.lang.ast`` would otherwise exec() ~50 generated classes.  They compare by
identity (like ``dataclass(eq=False)``), keep a ``__dict__`` (``vars(node)`` lists the
fields) and repr like a dataclass.
"""

from __future__ import annotations

from bpfdsl.diagnostics import Span


class Node:
    """Base of all nodes: ``span`` first, then (expressions) ``ty``, then the fields in
    ``__init__`` order, which is also the order of ``vars(node)`` and of the repr."""

    def __init__(self, span: Span) -> None:
        self.span = span

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={v!r}" for n, v in vars(self).items())
        return f"{type(self).__name__}({args})"


# ---- types as written ----
class NamedType(Node):
    def __init__(self, span: Span, name: str) -> None:
        self.span = span
        self.name = name


class ArrayType(Node):
    def __init__(self, span: Span, elem: NamedType | ArrayType, length: Expr) -> None:
        self.span = span
        self.elem = elem
        self.length = length


class BitType(Node):
    """``bit<N>`` (header fields only): ``width`` bits, most significant bit first."""

    def __init__(self, span: Span, name: str, width: int) -> None:
        self.span = span
        self.name = name  # as written: sema refuses anything but ``bit``
        self.width = width


TypeRef = NamedType | ArrayType


# ---- expressions ----
class Expr(Node):
    def __init__(self, span: Span) -> None:
        self.span = span
        self.ty = None  # a bpfdsl.lang.types.Type once sema ran


class IntLit(Expr):
    def __init__(self, span: Span, value: int) -> None:
        self.span = span
        self.ty = None
        self.value = value


class BoolLit(Expr):
    def __init__(self, span: Span, value: bool) -> None:
        self.span = span
        self.ty = None
        self.value = value


class AddrLit(Expr):
    """IPv4 (4 bytes), IPv6 (16 bytes) or MAC (6 bytes) literal, network byte order.

    ``prefixlen`` is set for prefix literals such as ``10.0.0.0/8``.
    """

    def __init__(self, span: Span, kind: str, data: bytes, prefixlen: int | None = None) -> None:
        self.span = span
        self.ty = None
        self.kind = kind  # "ipv4" | "ipv6" | "mac"
        self.data = data
        self.prefixlen = prefixlen


class Name(Expr):
    def __init__(self, span: Span, id: str) -> None:
        self.span = span
        self.ty = None
        self.id = id


class Field(Expr):
    def __init__(self, span: Span, obj: Expr, name: str) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.name = name


class MethodCall(Expr):
    def __init__(self, span: Span, obj: Expr, name: str, args: list[Expr]) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.name = name
        self.args = args


class Index(Expr):
    def __init__(self, span: Span, obj: Expr, index: Expr) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.index = index


class Call(Expr):
    def __init__(self, span: Span, name: str, args: list[Expr], kwargs: dict[str, Expr]) -> None:
        self.span = span
        self.ty = None
        self.name = name
        self.args = args
        self.kwargs = kwargs


class BinOp(Expr):
    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op  # + - * / % << >> & | ^
        self.left = left
        self.right = right


class Compare(Expr):
    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op  # == != < <= > >=
        self.left = left
        self.right = right


class Logic(Expr):
    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op  # && ||
        self.left = left
        self.right = right


class Unary(Expr):
    def __init__(self, span: Span, op: str, operand: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op  # ! - ~
        self.operand = operand


class Cast(Expr):
    def __init__(self, span: Span, expr: Expr, to: TypeRef) -> None:
        self.span = span
        self.ty = None
        self.expr = expr
        self.to = to


class InPrefix(Expr):
    """``addr in 10.0.0.0/8``: prefix membership, folded to a masked compare."""

    def __init__(self, span: Span, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.left = left
        self.right = right


class Parse(Expr):
    """``parse HEADER``: bounds-checked view of the next header at the parse cursor (optional)."""

    def __init__(self, span: Span, header: str) -> None:
        self.span = span
        self.ty = None
        self.header = header


class BytesLit(Expr):
    """``"GET "``: a byte string (UTF-8 text, escapes ``\\xHH`` ...), type ``[u8; N]``."""

    def __init__(self, span: Span, data: bytes) -> None:
        self.span = span
        self.ty = None
        self.data = data


class Load(Expr):
    """``load TYPE at cursor + OFF`` / ``load TYPE at OFF``: the bytes of TYPE at a byte
    offset from the parse cursor (``base`` "cursor") or from the packet's first byte
    (``base`` "packet"); optional (missing when the packet is too short).  ``offset`` is
    None for ``at cursor``."""

    def __init__(self, span: Span, type: TypeRef, base: str, offset: Expr | None) -> None:
        self.span = span
        self.ty = None
        self.type = type
        self.base = base
        self.offset = offset


# ---- statements ----
class Stmt(Node):
    pass


class Block(Node):
    def __init__(self, span: Span, stmts: list[Stmt]) -> None:
        self.span = span
        self.stmts = stmts


class Let(Stmt):
    def __init__(
        self, span: Span, name: str, type: TypeRef | None, value: Expr, orelse: Block | None
    ) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value
        self.orelse = orelse


class If(Stmt):
    def __init__(self, span: Span, cond: Expr, then: Block, orelse: Block | None) -> None:
        self.span = span
        self.cond = cond
        self.then = then
        self.orelse = orelse


class IfLet(Stmt):
    def __init__(
        self, span: Span, name: str, value: Expr, then: Block, orelse: Block | None
    ) -> None:
        self.span = span
        self.name = name
        self.value = value
        self.then = then
        self.orelse = orelse


class MatchArm(Node):
    def __init__(self, span: Span, patterns: list[Expr | None], body: Block) -> None:
        self.span = span
        self.patterns = patterns  # None = wildcard
        self.body = body


class Match(Stmt):
    def __init__(self, span: Span, subject: Expr, arms: list[MatchArm]) -> None:
        self.span = span
        self.subject = subject
        self.arms = arms


class For(Stmt):
    def __init__(self, span: Span, var: str, start: Expr, end: Expr, body: Block) -> None:
        self.span = span
        self.var = var
        self.start = start
        self.end = end
        self.body = body


class While(Stmt):
    def __init__(self, span: Span, cond: Expr, body: Block) -> None:
        self.span = span
        self.cond = cond
        self.body = body


class Return(Stmt):
    def __init__(self, span: Span, value: Expr) -> None:
        self.span = span
        self.value = value


class Break(Stmt):
    pass


class Continue(Stmt):
    pass


class Assign(Stmt):
    def __init__(self, span: Span, target: Expr, op: str, value: Expr) -> None:
        self.span = span
        self.target = target
        self.op = op  # "=" or "+=" ...
        self.value = value


class Store(Stmt):
    """``store TYPE at OFFSET = VALUE else { ... }``: write packet bytes (see :class:`Load`);
    ``orelse`` runs when the packet is too short."""

    def __init__(
        self,
        span: Span,
        type: TypeRef,
        base: str,
        offset: Expr | None,
        value: Expr,
        orelse: Block,
    ) -> None:
        self.span = span
        self.type = type
        self.base = base
        self.offset = offset
        self.value = value
        self.orelse = orelse


class ExprStmt(Stmt):
    def __init__(self, span: Span, expr: Expr) -> None:
        self.span = span
        self.expr = expr


# ---- top-level items ----
class License(Node):
    def __init__(self, span: Span, text: str) -> None:
        self.span = span
        self.text = text


class ConstDecl(Node):
    def __init__(self, span: Span, name: str, type: TypeRef, value: Expr) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value


class ConfigDecl(Node):
    def __init__(self, span: Span, name: str, type: TypeRef, value: Expr) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value


class MapDecl(Node):
    def __init__(
        self,
        span: Span,
        name: str,
        kind: str,
        kind_span: Span,
        type_args: list[TypeRef],
        args: dict[str, Expr],
        arg_spans: dict[str, Span] | None = None,
    ) -> None:
        self.span = span
        self.name = name
        self.kind = kind
        self.kind_span = kind_span
        self.type_args = type_args
        self.args = args
        self.arg_spans = {} if arg_spans is None else arg_spans  # argument name -> its span


class FieldDecl(Node):
    def __init__(self, span: Span, name: str, type: TypeRef) -> None:
        self.span = span
        self.name = name
        self.type = type


class StructDecl(Node):
    def __init__(self, span: Span, name: str, fields: list[FieldDecl]) -> None:
        self.span = span
        self.name = name
        self.fields = fields


class HeaderFieldDecl(Node):
    """A field of a ``header``: ``cond`` (``if EXPR``) makes it present only when EXPR, over
    the header's earlier fields, is not 0."""

    def __init__(self, span: Span, name: str, type: TypeRef | BitType, cond: Expr | None) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.cond = cond


class HeaderDecl(Node):
    """``header NAME(ARGS) { FIELDS }``: a packet header layout (see bpfdsl.lang.layout)."""

    def __init__(
        self,
        span: Span,
        name: str,
        fields: list[HeaderFieldDecl],
        args: dict[str, Expr],
        arg_spans: dict[str, Span] | None = None,
    ) -> None:
        self.span = span
        self.name = name
        self.fields = fields
        self.args = args
        self.arg_spans = {} if arg_spans is None else arg_spans  # argument name -> its span


class Param(Node):
    def __init__(self, span: Span, name: str, type: TypeRef) -> None:
        self.span = span
        self.name = name
        self.type = type


class FnDecl(Node):
    """``fn NAME(PARAMS) -> RET { ... }``; ``optional``: declared ``-> RET?`` (the fn may
    ``return none``)."""

    def __init__(
        self,
        span: Span,
        name: str,
        params: list[Param],
        ret: TypeRef | None,
        body: Block,
        optional: bool = False,
    ) -> None:
        self.span = span
        self.name = name
        self.params = params
        self.ret = ret
        self.body = body
        self.optional = optional


class ProgDecl(Node):
    """``xdp fn name(ctx) { ... }``; ``keyword`` is the PROGRAM_KINDS keyword (``xdp(cpumap)``)."""

    def __init__(self, span: Span, keyword: str, name: str, ctx: str, body: Block) -> None:
        self.span = span
        self.keyword = keyword
        self.name = name
        self.ctx = ctx
        self.body = body


class Program(Node):
    def __init__(self, span: Span, items: list[Node], source: str = "") -> None:
        self.span = span
        self.items = items
        self.source = source
