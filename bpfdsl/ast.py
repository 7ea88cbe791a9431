"""AST of bpfdsl (front end): plain classes made by :mod:`bpfdsl.build` as the parser reduces.

Every node has ``span`` (:class:`bpfdsl.diagnostics.Span`, 1-based line/col of the source).
Sema (:mod:`bpfdsl.sema`) annotates nodes through side tables, never by mutating them,
except ``Expr.ty`` which it fills with the checked :mod:`bpfdsl.types` type.

Nodes are plain classes with a hand-written ``__init__`` (positional or keyword arguments in
``_fields`` order, ``ty`` not among them) rather than dataclasses: a program makes thousands
of nodes per compile and ``import bpfdsl.ast`` would otherwise exec() ~50 generated classes.
They compare by identity (like ``dataclass(eq=False)``), keep a ``__dict__`` (``vars(node)``
lists the fields) and repr like a dataclass.
"""

from __future__ import annotations

from .diagnostics import Span


class Node:
    """Base of all nodes; ``_fields``: the attribute names in order (span first)."""

    span: Span
    _fields: tuple[str, ...] = ("span",)

    def __init__(self, span: Span) -> None:
        self.span = span

    def __repr__(self) -> str:
        args = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({args})"


# ---- types as written ----
class NamedType(Node):
    name: str
    _fields = ("span", "name")

    def __init__(self, span: Span, name: str) -> None:
        self.span = span
        self.name = name


class ArrayType(Node):
    elem: NamedType | ArrayType
    length: Expr
    _fields = ("span", "elem", "length")

    def __init__(self, span: Span, elem: NamedType | ArrayType, length: Expr) -> None:
        self.span = span
        self.elem = elem
        self.length = length


TypeRef = NamedType | ArrayType


# ---- expressions ----
class Expr(Node):
    ty: object = None  # a bpfdsl.types.Type once sema ran
    _fields = ("span", "ty")

    def __init__(self, span: Span) -> None:
        self.span = span
        self.ty = None


class IntLit(Expr):
    value: int
    _fields = ("span", "ty", "value")

    def __init__(self, span: Span, value: int) -> None:
        self.span = span
        self.ty = None
        self.value = value


class BoolLit(Expr):
    value: bool
    _fields = ("span", "ty", "value")

    def __init__(self, span: Span, value: bool) -> None:
        self.span = span
        self.ty = None
        self.value = value


class AddrLit(Expr):
    """IPv4 (4 bytes), IPv6 (16 bytes) or MAC (6 bytes) literal, network byte order.

    ``prefixlen`` is set for prefix literals such as ``10.0.0.0/8``.
    """

    kind: str  # "ipv4" | "ipv6" | "mac"
    data: bytes
    prefixlen: int | None = None
    _fields = ("span", "ty", "kind", "data", "prefixlen")

    def __init__(self, span: Span, kind: str, data: bytes, prefixlen: int | None = None) -> None:
        self.span = span
        self.ty = None
        self.kind = kind
        self.data = data
        self.prefixlen = prefixlen


class Name(Expr):
    id: str
    _fields = ("span", "ty", "id")

    def __init__(self, span: Span, id: str) -> None:
        self.span = span
        self.ty = None
        self.id = id


class Field(Expr):
    obj: Expr
    name: str
    _fields = ("span", "ty", "obj", "name")

    def __init__(self, span: Span, obj: Expr, name: str) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.name = name


class MethodCall(Expr):
    obj: Expr
    name: str
    args: list[Expr]
    _fields = ("span", "ty", "obj", "name", "args")

    def __init__(self, span: Span, obj: Expr, name: str, args: list[Expr]) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.name = name
        self.args = args


class Index(Expr):
    obj: Expr
    index: Expr
    _fields = ("span", "ty", "obj", "index")

    def __init__(self, span: Span, obj: Expr, index: Expr) -> None:
        self.span = span
        self.ty = None
        self.obj = obj
        self.index = index


class Call(Expr):
    name: str
    args: list[Expr]
    kwargs: dict[str, Expr]
    _fields = ("span", "ty", "name", "args", "kwargs")

    def __init__(self, span: Span, name: str, args: list[Expr], kwargs: dict[str, Expr]) -> None:
        self.span = span
        self.ty = None
        self.name = name
        self.args = args
        self.kwargs = kwargs


class BinOp(Expr):
    op: str  # + - * / % << >> & | ^
    left: Expr
    right: Expr
    _fields = ("span", "ty", "op", "left", "right")

    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op
        self.left = left
        self.right = right


class Compare(Expr):
    op: str  # == != < <= > >=
    left: Expr
    right: Expr
    _fields = ("span", "ty", "op", "left", "right")

    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op
        self.left = left
        self.right = right


class Logic(Expr):
    op: str  # && ||
    left: Expr
    right: Expr
    _fields = ("span", "ty", "op", "left", "right")

    def __init__(self, span: Span, op: str, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op
        self.left = left
        self.right = right


class Unary(Expr):
    op: str  # ! - ~
    operand: Expr
    _fields = ("span", "ty", "op", "operand")

    def __init__(self, span: Span, op: str, operand: Expr) -> None:
        self.span = span
        self.ty = None
        self.op = op
        self.operand = operand


class Cast(Expr):
    expr: Expr
    to: TypeRef
    _fields = ("span", "ty", "expr", "to")

    def __init__(self, span: Span, expr: Expr, to: TypeRef) -> None:
        self.span = span
        self.ty = None
        self.expr = expr
        self.to = to


class InPrefix(Expr):
    """``addr in 10.0.0.0/8``: prefix membership, folded to a masked compare."""

    left: Expr
    right: Expr
    _fields = ("span", "ty", "left", "right")

    def __init__(self, span: Span, left: Expr, right: Expr) -> None:
        self.span = span
        self.ty = None
        self.left = left
        self.right = right


class Parse(Expr):
    """``parse HEADER``: bounds-checked view of the next header at the parse cursor (optional)."""

    header: str
    _fields = ("span", "ty", "header")

    def __init__(self, span: Span, header: str) -> None:
        self.span = span
        self.ty = None
        self.header = header


# ---- statements ----
class Stmt(Node):
    pass


class Block(Node):
    stmts: list[Stmt]
    _fields = ("span", "stmts")

    def __init__(self, span: Span, stmts: list[Stmt]) -> None:
        self.span = span
        self.stmts = stmts


class Let(Stmt):
    name: str
    type: TypeRef | None
    value: Expr
    orelse: Block | None
    _fields = ("span", "name", "type", "value", "orelse")

    def __init__(
        self, span: Span, name: str, type: TypeRef | None, value: Expr, orelse: Block | None
    ) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value
        self.orelse = orelse


class If(Stmt):
    cond: Expr
    then: Block
    orelse: Block | None
    _fields = ("span", "cond", "then", "orelse")

    def __init__(self, span: Span, cond: Expr, then: Block, orelse: Block | None) -> None:
        self.span = span
        self.cond = cond
        self.then = then
        self.orelse = orelse


class IfLet(Stmt):
    name: str
    value: Expr
    then: Block
    orelse: Block | None
    _fields = ("span", "name", "value", "then", "orelse")

    def __init__(
        self, span: Span, name: str, value: Expr, then: Block, orelse: Block | None
    ) -> None:
        self.span = span
        self.name = name
        self.value = value
        self.then = then
        self.orelse = orelse


class MatchArm(Node):
    patterns: list[Expr | None]  # None = wildcard
    body: Block
    _fields = ("span", "patterns", "body")

    def __init__(self, span: Span, patterns: list[Expr | None], body: Block) -> None:
        self.span = span
        self.patterns = patterns
        self.body = body


class Match(Stmt):
    subject: Expr
    arms: list[MatchArm]
    _fields = ("span", "subject", "arms")

    def __init__(self, span: Span, subject: Expr, arms: list[MatchArm]) -> None:
        self.span = span
        self.subject = subject
        self.arms = arms


class For(Stmt):
    var: str
    start: Expr
    end: Expr
    body: Block
    _fields = ("span", "var", "start", "end", "body")

    def __init__(self, span: Span, var: str, start: Expr, end: Expr, body: Block) -> None:
        self.span = span
        self.var = var
        self.start = start
        self.end = end
        self.body = body


class While(Stmt):
    cond: Expr
    body: Block
    _fields = ("span", "cond", "body")

    def __init__(self, span: Span, cond: Expr, body: Block) -> None:
        self.span = span
        self.cond = cond
        self.body = body


class Return(Stmt):
    value: Expr
    _fields = ("span", "value")

    def __init__(self, span: Span, value: Expr) -> None:
        self.span = span
        self.value = value


class Break(Stmt):
    pass


class Continue(Stmt):
    pass


class Assign(Stmt):
    target: Expr
    op: str  # "=" or "+=" ...
    value: Expr
    _fields = ("span", "target", "op", "value")

    def __init__(self, span: Span, target: Expr, op: str, value: Expr) -> None:
        self.span = span
        self.target = target
        self.op = op
        self.value = value


class ExprStmt(Stmt):
    expr: Expr
    _fields = ("span", "expr")

    def __init__(self, span: Span, expr: Expr) -> None:
        self.span = span
        self.expr = expr


# ---- top-level items ----
class License(Node):
    text: str
    _fields = ("span", "text")

    def __init__(self, span: Span, text: str) -> None:
        self.span = span
        self.text = text


class ConstDecl(Node):
    name: str
    type: TypeRef
    value: Expr
    _fields = ("span", "name", "type", "value")

    def __init__(self, span: Span, name: str, type: TypeRef, value: Expr) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value


class ConfigDecl(Node):
    name: str
    type: TypeRef
    value: Expr
    _fields = ("span", "name", "type", "value")

    def __init__(self, span: Span, name: str, type: TypeRef, value: Expr) -> None:
        self.span = span
        self.name = name
        self.type = type
        self.value = value


class MapDecl(Node):
    name: str
    kind: str
    kind_span: Span
    type_args: list[TypeRef]
    args: dict[str, Expr]
    _fields = ("span", "name", "kind", "kind_span", "type_args", "args")

    def __init__(
        self,
        span: Span,
        name: str,
        kind: str,
        kind_span: Span,
        type_args: list[TypeRef],
        args: dict[str, Expr],
    ) -> None:
        self.span = span
        self.name = name
        self.kind = kind
        self.kind_span = kind_span
        self.type_args = type_args
        self.args = args


class FieldDecl(Node):
    name: str
    type: TypeRef
    _fields = ("span", "name", "type")

    def __init__(self, span: Span, name: str, type: TypeRef) -> None:
        self.span = span
        self.name = name
        self.type = type


class StructDecl(Node):
    name: str
    fields: list[FieldDecl]
    _fields = ("span", "name", "fields")

    def __init__(self, span: Span, name: str, fields: list[FieldDecl]) -> None:
        self.span = span
        self.name = name
        self.fields = fields


class Param(Node):
    name: str
    type: TypeRef
    _fields = ("span", "name", "type")

    def __init__(self, span: Span, name: str, type: TypeRef) -> None:
        self.span = span
        self.name = name
        self.type = type


class FnDecl(Node):
    name: str
    params: list[Param]
    ret: TypeRef | None
    body: Block
    _fields = ("span", "name", "params", "ret", "body")

    def __init__(
        self, span: Span, name: str, params: list[Param], ret: TypeRef | None, body: Block
    ) -> None:
        self.span = span
        self.name = name
        self.params = params
        self.ret = ret
        self.body = body


class ProgDecl(Node):
    """``xdp fn name(ctx) { ... }``; ``keyword`` is the PROGRAM_KINDS keyword (``xdp(cpumap)``)."""

    keyword: str
    name: str
    ctx: str
    body: Block
    _fields = ("span", "keyword", "name", "ctx", "body")

    def __init__(self, span: Span, keyword: str, name: str, ctx: str, body: Block) -> None:
        self.span = span
        self.keyword = keyword
        self.name = name
        self.ctx = ctx
        self.body = body


class Program(Node):
    items: list[Node]
    source: str = ""
    _fields = ("span", "items", "source")

    def __init__(self, span: Span, items: list[Node], source: str = "") -> None:
        self.span = span
        self.items = items
        self.source = source
