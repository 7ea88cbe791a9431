"""AST builder (front end): grammar rules -> :class:`bpfdsl.lang.ast.Program`.

One method per grammar rule (rule name or ``-> alias``), called by :func:`bpfdsl.lang.parser.parse`
as the LALR parser reduces the rule, with ``meta`` = the (line, col, end_line, end_col) the
rule covered (or None) and ``c`` = its children (lark's shaping: anonymous tokens dropped,
None for a missing ``[optional]``).  It makes the nodes of :mod:`bpfdsl.lang.ast` and turns
literal tokens into values: IPv4, IPv6 and MAC literals become network-byte-order ``bytes``
at this stage.  Raises DiagnosticError for malformed literals (e.g. ``300.0.0.1``).
"""

from __future__ import annotations

import ipaddress
from typing import Any, NoReturn

from bpfdsl.diagnostics import DiagnosticError, Span, error
from bpfdsl.lang import ast, c_names
from bpfdsl.lang.parser import Token, parse

# What :func:`parse` passes a rule's method: ``meta`` = (line, col, end_line, end_col) of the
# text the rule covered, or None; the children are what the other rules built (a Token, an
# ast node, a tuple or list from a helper rule, None for a missing ``[optional]``): dynamic.
_Meta = tuple[int, int, int, int] | None
_Children = list[Any]


def _ipv4(text: str) -> bytes:
    """Dotted-quad IPv4 text -> 4 bytes (network order); ValueError where Python's
    ipaddress.IPv4Address is strict too (an octet over 255 or with a leading zero)."""
    parts = text.split(".")
    if len(parts) != 4:
        raise ValueError(text)
    out = []
    for p in parts:
        if not p.isdigit() or len(p) > 3 or (len(p) > 1 and p[0] == "0") or int(p) > 255:
            raise ValueError(text)
        out.append(int(p))
    return bytes(out)


def _addr_text(kind: str, data: bytes) -> str:
    """The usual text of an address: dotted quad (ipv4), RFC 5952 compressed (ipv6)."""
    if kind == "ipv4":
        return ".".join(str(b) for b in data)

    return str(ipaddress.IPv6Address(data))


def _tok_span(filename: str, t: Token) -> Span:
    return Span(filename, t.line or 1, t.column or 1, t.end_line, t.end_column)


class _Builder:
    def __init__(self, filename: str, text: str) -> None:
        self.filename = filename
        self.text = text

    def _s(self, meta: tuple[int, int, int, int] | None) -> Span:
        if meta is None:
            return Span(self.filename, 1, 1)
        return Span(self.filename, *meta)

    def _bad(self, tok: Token, msg: str, hint: str) -> NoReturn:
        raise DiagnosticError(
            error("bad-literal", msg, _tok_span(self.filename, tok), hint=hint), self.text
        )

    # ---- items ----
    def start(self, meta: _Meta, items: _Children) -> ast.Program:
        return ast.Program(self._s(meta), list(items), self.text)

    def license_decl(self, meta: _Meta, c: _Children) -> ast.License:
        return ast.License(self._s(meta), self._unescape(c[0]))

    _ESCAPES = {"\\": "\\", '"': '"', "n": "\n", "t": "\t", "0": "\0"}

    def _unescape(self, tok: Token) -> str:
        """The text of a string literal: escapes \\\\ \\" \\n \\t \\0 (C's, as libbpf's
        ``license`` section holds a C string); any other is a ``bad-literal`` error."""
        body, out, i = str(tok)[1:-1], [], 0
        while i < len(body):
            ch = body[i]
            if ch == "\\":
                nxt = body[i + 1 : i + 2]
                if nxt not in self._ESCAPES:
                    self._bad(tok, f"unknown escape '\\{nxt}' in a string",
                              'use \\\\ for a backslash, \\" for a quote')  # fmt: skip
                out.append(self._ESCAPES[nxt])
                i += 2
                continue
            out.append(ch)
            i += 1
        return "".join(out)

    def const_decl(self, meta: _Meta, c: _Children) -> ast.ConstDecl:
        return ast.ConstDecl(self._s(meta), str(c[0]), c[1], c[2])

    def config_decl(self, meta: _Meta, c: _Children) -> ast.ConfigDecl:
        return ast.ConfigDecl(self._s(meta), str(c[0]), c[1], c[2])

    def type_args(self, meta: _Meta, c: _Children) -> list[ast.TypeRef]:
        return list(c)

    def map_arg(self, meta: _Meta, c: _Children) -> tuple[str, ast.Expr, Span]:
        return (str(c[0]), c[1], _tok_span(self.filename, c[0]))

    def map_entry(self, meta: _Meta, c: _Children) -> tuple[ast.Expr, ast.Expr]:
        return (c[0], c[1])

    def map_init(self, meta: _Meta, c: _Children) -> list[tuple[ast.Expr, ast.Expr]]:
        return [e for e in c if e is not None]

    def map_decl(self, meta: _Meta, c: _Children) -> ast.MapDecl:
        name, kind, targs, *args, init = c
        values, spans = self._named(
            [a for a in args if a is not None], "map-args", "map argument `{}`"
        )
        return ast.MapDecl(
            self._s(meta),
            str(name),
            str(kind),
            _tok_span(self.filename, kind),
            targs or [],
            values,
            spans,
            init,
        )

    def field_decl(self, meta: _Meta, c: _Children) -> ast.FieldDecl:
        return ast.FieldDecl(self._s(meta), str(c[0]), c[1])

    def struct_decl(self, meta: _Meta, c: _Children) -> ast.StructDecl:
        return ast.StructDecl(self._s(meta), str(c[0]), [f for f in c[1:] if f is not None])

    def param(self, meta: _Meta, c: _Children) -> ast.Param:
        return ast.Param(self._s(meta), str(c[0]), c[1])

    def optional_mark(self, meta: _Meta, c: _Children) -> bool:
        return True

    def ret_type(self, meta: _Meta, c: _Children) -> tuple[ast.TypeRef, bool]:
        return (c[0], bool(c[1]))

    def fn_decl(self, meta: _Meta, c: _Children) -> ast.FnDecl:
        mod, name, *params, ret, body = c
        ret, optional = ret if ret is not None else (None, False)
        params = [p for p in params if p is not None]
        if mod is None:
            return ast.FnDecl(self._s(meta), str(name), params, ret, body, optional)
        mspan = _tok_span(self.filename, mod)
        return ast.FnDecl(self._s(meta), str(name), params, ret, body, optional, str(mod), mspan)

    def bit_type(self, meta: _Meta, c: _Children) -> ast.BitType:
        return ast.BitType(self._s(meta), str(c[0]), self._number(c[1]))

    def header_field(self, meta: _Meta, c: _Children) -> ast.HeaderFieldDecl:
        return ast.HeaderFieldDecl(self._s(meta), str(c[0]), c[1], c[2])

    def header_args(self, meta: _Meta, c: _Children) -> list[tuple[str, ast.Expr, Span]]:
        return [a for a in c if a is not None]

    def header_decl(self, meta: _Meta, c: _Children) -> ast.HeaderDecl:
        word, name, args, *fields = c
        if str(word) != "header":  # `NAME NAME {` is only a header declaration
            raise DiagnosticError(
                error("syntax", f"unexpected {str(word)!r}", _tok_span(self.filename, word),
                      hint="a declaration starts with license, const, config, map, struct, "
                      "header, fn or a program kind"),
                self.text,
            )  # fmt: skip
        values, spans = self._named(args or [], "header-args", "header argument `{}`")
        fields = [f for f in fields if f is not None]
        return ast.HeaderDecl(self._s(meta), str(name), fields, values, spans)

    def prog_variant(self, meta: _Meta, c: _Children) -> list:
        return [x for x in c if x is not None]

    def prog_decl(self, meta: _Meta, c: _Children) -> ast.ProgDecl:
        kind, opts, name, ctx, body = c
        names = [o for o in opts or [] if not isinstance(o, tuple)]
        if len(names) > 1:
            raise DiagnosticError(
                error("unknown-program-kind", f"`{kind}` takes one variant, not {len(names)}",
                      _tok_span(self.filename, names[1]),
                      hint=f"pick one of `{kind}({names[0]})` and `{kind}({names[1]})`"),
                self.text,
            )  # fmt: skip
        run_config, spans = self._named(
            [o for o in opts or [] if isinstance(o, tuple)], "run-config", "`{}`"
        )
        kw = f"{kind}({names[0]})" if names else str(kind)
        return ast.ProgDecl(self._s(meta), kw, str(name), str(ctx), body, run_config, spans)

    def named_type(self, meta: _Meta, c: _Children) -> ast.NamedType:
        return ast.NamedType(self._s(meta), str(c[0]))

    def array_type(self, meta: _Meta, c: _Children) -> ast.ArrayType:
        return ast.ArrayType(self._s(meta), c[0], c[1])

    # ---- statements ----
    def block(self, meta: _Meta, c: _Children) -> ast.Block:
        for s in c:
            if (
                isinstance(s, ast.ExprStmt)
                and isinstance(s.expr, ast.Name)
                and c_names.is_c_declaration_word(s.expr.id)
            ):
                self._c_declaration(s.expr)
        return ast.Block(self._s(meta), list(c))

    def _c_declaration(self, word: ast.Name) -> None:
        """A statement that is a type name alone: C's ``__u32 x = 5`` (parsed as the names
        ``__u32``, then ``x = 5``)."""
        sp = word.span
        line = self.text.split("\n")[sp.line - 1][sp.col - 1 :]
        hint = c_names.declaration_hint(line) or "write `let NAME: TYPE = VALUE`"
        raise DiagnosticError(
            error("c-declaration", "a C declaration: bpfdsl declares a local with `let`",
                  sp, hint=hint),
            self.text,
        )  # fmt: skip

    def else_block(self, meta: _Meta, c: _Children) -> ast.Block | ast.Stmt:
        return c[0]

    def let_stmt(self, meta: _Meta, c: _Children) -> ast.Let:
        return ast.Let(self._s(meta), str(c[0]), c[1], c[2], c[3])

    def _else(self, e: ast.Block | ast.Stmt | None) -> ast.Block | None:
        if e is None or isinstance(e, ast.Block):
            return e
        return ast.Block(e.span, [e])

    def if_stmt(self, meta: _Meta, c: _Children) -> ast.If:
        return ast.If(self._s(meta), c[0], c[1], self._else(c[2]))

    def if_let_stmt(self, meta: _Meta, c: _Children) -> ast.IfLet:
        return ast.IfLet(self._s(meta), str(c[0]), c[1], c[2], self._else(c[3]))

    def wildcard(self, meta: _Meta, c: _Children) -> None:
        return None

    def stmt_arm(self, meta: _Meta, c: _Children) -> ast.Block:
        return ast.Block(self._s(meta), [c[0]])

    def match_arm(self, meta: _Meta, c: _Children) -> ast.MatchArm:
        *pats, body = c
        return ast.MatchArm(self._s(meta), list(pats), body)

    def match_stmt(self, meta: _Meta, c: _Children) -> ast.Match:
        return ast.Match(self._s(meta), c[0], list(c[1:]))

    def for_stmt(self, meta: _Meta, c: _Children) -> ast.For:
        return ast.For(self._s(meta), str(c[0]), c[1], c[2], c[3])

    def while_stmt(self, meta: _Meta, c: _Children) -> ast.While:
        return ast.While(self._s(meta), c[0], c[1])

    def return_stmt(self, meta: _Meta, c: _Children) -> ast.Return:
        return ast.Return(self._s(meta), c[0])

    def break_stmt(self, meta: _Meta, c: _Children) -> ast.Break:
        return ast.Break(self._s(meta))

    def continue_stmt(self, meta: _Meta, c: _Children) -> ast.Continue:
        return ast.Continue(self._s(meta))

    def pkt_offset(self, meta: _Meta, c: _Children) -> tuple[str, ast.Expr | None]:
        """(base, offset): ``cursor [+ N]`` -> ("cursor", N or None); ``A [+ B]`` ->
        ("packet", A or A + B)."""
        a, b = c
        if isinstance(a, ast.Name) and a.id == "cursor":
            return ("cursor", b)
        return ("packet", a if b is None else ast.BinOp(self._s(meta), "+", a, b))

    def _offset(self, off: tuple[str, ast.Expr | None]) -> tuple[str, ast.Expr | None]:
        return off

    def load_expr(self, meta: _Meta, c: _Children) -> ast.Load:
        base, off = self._offset(c[1])
        return ast.Load(self._s(meta), c[0], base, off)

    def store_stmt(self, meta: _Meta, c: _Children) -> ast.Store:
        base, off = self._offset(c[1])
        return ast.Store(self._s(meta), c[0], base, off, c[2], c[3])

    def assign_stmt(self, meta: _Meta, c: _Children) -> ast.Assign:
        return ast.Assign(self._s(meta), c[0], str(c[1]), c[2])

    def _op(self, meta: _Meta, c: _Children) -> str:
        return str(c[0])

    assign_op = cmp_op = shift_op = add_op = mul_op = _op

    def expr_stmt(self, meta: _Meta, c: _Children) -> ast.Assign | ast.ExprStmt:
        e = c[0]
        if isinstance(e, ast.IncDec):  # `x++` is `x += 1`, the same statement
            one = ast.IntLit(e.span, 1)
            return ast.Assign(self._s(meta), e.target, "+=" if e.op == "++" else "-=", one)
        return ast.ExprStmt(self._s(meta), e)

    def call_else_stmt(self, meta: _Meta, c: _Children) -> ast.CallElse:
        *parts, orelse = c
        s = self._s(meta)
        call = self.call(meta, parts)  # spans the statement, as the rule does
        return ast.CallElse(s, call, orelse)

    # ---- expressions ----
    def logic_or(self, meta: _Meta, c: _Children) -> ast.Logic:
        return ast.Logic(self._s(meta), "||", c[0], c[1])

    def logic_and(self, meta: _Meta, c: _Children) -> ast.Logic:
        return ast.Logic(self._s(meta), "&&", c[0], c[1])

    def logic_not(self, meta: _Meta, c: _Children) -> ast.Unary:
        return ast.Unary(self._s(meta), "!", c[0])

    def compare(self, meta: _Meta, c: _Children) -> ast.Compare:
        return ast.Compare(self._s(meta), str(c[1]), c[0], c[2])

    def in_expr(self, meta: _Meta, c: _Children) -> ast.InPrefix:
        return ast.InPrefix(self._s(meta), c[0], c[1])

    def bin_or(self, meta: _Meta, c: _Children) -> ast.BinOp:
        return ast.BinOp(self._s(meta), "|", c[0], c[1])

    def bin_xor(self, meta: _Meta, c: _Children) -> ast.BinOp:
        return ast.BinOp(self._s(meta), "^", c[0], c[1])

    def bin_and(self, meta: _Meta, c: _Children) -> ast.BinOp:
        return ast.BinOp(self._s(meta), "&", c[0], c[1])

    def binop(self, meta: _Meta, c: _Children) -> ast.BinOp:
        return ast.BinOp(self._s(meta), str(c[1]), c[0], c[2])

    def neg(self, meta: _Meta, c: _Children) -> ast.Unary:
        return ast.Unary(self._s(meta), "-", c[0])

    def bit_not(self, meta: _Meta, c: _Children) -> ast.Unary:
        return ast.Unary(self._s(meta), "~", c[0])

    def post_incr(self, meta: _Meta, c: _Children) -> ast.IncDec:
        return ast.IncDec(self._s(meta), "++", c[0])

    def post_decr(self, meta: _Meta, c: _Children) -> ast.IncDec:
        return ast.IncDec(self._s(meta), "--", c[0])

    def cast(self, meta: _Meta, c: _Children) -> ast.Cast:
        return ast.Cast(self._s(meta), c[0], c[1])

    def field(self, meta: _Meta, c: _Children) -> ast.Field:
        return ast.Field(self._s(meta), c[0], str(c[1]))

    def method_call(self, meta: _Meta, c: _Children) -> ast.MethodCall:
        return ast.MethodCall(self._s(meta), c[0], str(c[1]), [a for a in c[2:] if a is not None])

    def index(self, meta: _Meta, c: _Children) -> ast.Index:
        return ast.Index(self._s(meta), c[0], c[1])

    def named_arg(self, meta: _Meta, c: _Children) -> tuple[str, ast.Expr, Span]:
        return (str(c[0]), c[1], _tok_span(self.filename, c[0]))

    def _named(
        self, items: list[tuple[str, ast.Expr, Span]], code: str, label: str
    ) -> tuple[dict[str, ast.Expr], dict[str, Span]]:
        """``name: value`` pairs (map and header arguments, named call arguments, pushed
        fields) as a dict and the names' spans; a name given twice is the located error
        ``code``, "``label`` is given twice" with ``label.format(name)`` (a dict would keep
        the last one silently)."""
        values: dict[str, ast.Expr] = {}
        spans: dict[str, Span] = {}
        for n, v, sp in items:
            if n in values:
                raise DiagnosticError(
                    error(code, f"{label.format(n)} is given twice", sp,
                          hint=f"keep one `{n}: ...` (the first is at column {spans[n].col})"),
                    self.text,
                )  # fmt: skip
            values[n], spans[n] = v, sp
        return values, spans

    def call(self, meta: _Meta, c: _Children) -> ast.Call:
        args, named = [], []
        for a in c[1:]:
            if a is None:
                continue
            if isinstance(a, tuple):
                named.append(a)
            else:
                args.append(a)
        kwargs, _ = self._named(named, "duplicate-field", f"field `{{}}` of `{c[0]}(...)`")
        return ast.Call(self._s(meta), str(c[0]), args, kwargs)

    def _number(self, tok: Token) -> int:
        """The value of a NUMBER token (``0x`` hex, ``0b`` binary, decimal; ``_`` separators).

        Raises DiagnosticError (located at the token) for ``0x_``-like tokens without digits,
        more digits than any 64-bit value has, and decimal literals with a leading zero: C
        reads ``010`` as octal 8, so accepting it as 10 would be a silent surprise."""
        t = str(tok).replace("_", "")
        if t in ("0x", "0b"):  # the NUMBER terminal lets `0x_`, `0b__` through
            raise self._bad(tok, f"malformed number {str(tok)!r}: no digits after {t}",
                            f"write digits after {t}, e.g. {t}{'1f' if t == '0x' else '101'}")  # fmt: skip
        if len(t.lstrip("0")) > 66:  # longer than any 64-bit value (0b + 64 digits)
            raise self._bad(tok, f"number {t[:20]}... ({len(t)} digits) is too large",
                            "integers have at most 64 bits")  # fmt: skip
        if t[:2] in ("0x", "0b"):
            return int(t, 0)
        if len(t) > 1 and t[0] == "0" and t.strip("0"):
            hint = f"write {int(t, 10)} for decimal"
            if set(t) <= set("01234567"):
                hint += f"; C reads {t} as octal {int(t, 8)}: write 0x{int(t, 8):x} for that"
            raise self._bad(
                tok, f"number {str(tok)!r} has a leading zero (there are no octal literals)", hint
            )
        return int(t, 10)

    def int_lit(self, meta: _Meta, c: _Children) -> ast.IntLit:
        return ast.IntLit(self._s(meta), self._number(c[0]))

    def bytes_lit(self, meta: _Meta, c: _Children) -> ast.BytesLit:
        """A string in an expression: its bytes (UTF-8), with the license string's escapes
        and ``\\xHH`` for any byte."""
        tok = c[0]
        body, out, i = str(tok)[1:-1], bytearray(), 0
        while i < len(body):
            ch = body[i]
            if ch != "\\":
                out += ch.encode()
                i += 1
                continue
            nxt = body[i + 1 : i + 2]
            if nxt == "x":
                digits = body[i + 2 : i + 4]
                if len(digits) != 2 or any(d not in "0123456789abcdefABCDEF" for d in digits):
                    self._bad(tok, f"`\\x` needs two hex digits in {str(tok)}",
                              "write a byte as \\x00 .. \\xff")  # fmt: skip
                out.append(int(digits, 16))
                i += 4
                continue
            if nxt not in self._ESCAPES:
                self._bad(tok, f"unknown escape '\\{nxt}' in a string",
                          'use \\\\ for a backslash, \\" for a quote, \\xHH for a byte')  # fmt: skip
            out += self._ESCAPES[nxt].encode()
            i += 2
        if not out:
            self._bad(tok, "an empty byte string", 'write at least one byte, e.g. "\\x00"')
        return ast.BytesLit(self._s(meta), bytes(out))

    def true_lit(self, meta: _Meta, c: _Children) -> ast.BoolLit:
        return ast.BoolLit(self._s(meta), True)

    def false_lit(self, meta: _Meta, c: _Children) -> ast.BoolLit:
        return ast.BoolLit(self._s(meta), False)

    def name(self, meta: _Meta, c: _Children) -> ast.Name:
        return ast.Name(self._s(meta), str(c[0]))

    def push_hdr(self, meta: _Meta, c: _Children) -> ast.PushHeader:
        values, spans = self._named(
            [a for a in c[1:] if a is not None],
            "duplicate-field",
            f"field `{{}}` of `{c[0]} {{{{...}}}}`",
        )
        return ast.PushHeader(self._s(meta), str(c[0]), values, spans)

    def push_expr(self, meta: _Meta, c: _Children) -> ast.Push:
        *hdrs, before = c
        return ast.Push(self._s(meta), hdrs, before)

    def view(self, meta: _Meta, c: _Children) -> ast.Name:
        return ast.Name(self._s(meta), str(c[0]))

    def pop_stmt(self, meta: _Meta, c: _Children) -> ast.Pop:
        return ast.Pop(self._s(meta), c[0], c[1], c[2])

    def parse_expr(self, meta: _Meta, c: _Children) -> ast.Parse:
        return ast.Parse(self._s(meta), str(c[0]))

    def _addr(self, meta: _Meta, tok: Token, kind: str) -> ast.AddrLit:
        text = str(tok)
        plen = None
        if "/" in text:
            text, p = text.split("/")
            plen = int(p)
        try:
            if kind == "mac":
                data = bytes(int(x, 16) for x in text.split(":"))
            elif kind == "ipv4":
                data = _ipv4(text)
            else:
                data = ipaddress.IPv6Address(text).packed
        except ValueError:
            self._bad(
                tok,
                f"invalid {kind} literal {str(tok)!r}",
                "write e.g. 10.0.0.1, 2001:db8::1 or aa:bb:cc:dd:ee:ff",
            )
        if plen is not None and plen > len(data) * 8:
            self._bad(
                tok,
                f"prefix length {plen} is longer than the address",
                f"use at most /{len(data) * 8}",
            )
        if plen is not None:
            bits = len(data) * 8
            value = int.from_bytes(data, "big")
            net = value >> (bits - plen) << (bits - plen)
            if net != value:  # like Python's ipaddress.ip_network(strict=True)
                shown = _addr_text(kind, net.to_bytes(len(data), "big"))
                self._bad(
                    tok,
                    f"prefix {str(tok)!r} has host bits set",
                    (
                        f"only the first {plen} bits may be non-zero"
                        if plen
                        else "a /0 prefix matches every address"
                    )
                    + f": write the network `{shown}/{plen}`",
                )
        return ast.AddrLit(self._s(meta), kind, data, plen)

    def ipv4_lit(self, meta: _Meta, c: _Children) -> ast.AddrLit:
        return self._addr(meta, c[0], "ipv4")

    ipv4_prefix_lit = ipv4_lit

    def ipv6_lit(self, meta: _Meta, c: _Children) -> ast.AddrLit:
        return self._addr(meta, c[0], "ipv6")

    ipv6_prefix_lit = ipv6_lit

    def mac_lit(self, meta: _Meta, c: _Children) -> ast.AddrLit:
        return self._addr(meta, c[0], "mac")


def parse_program(text: str, filename: str = "<input>") -> ast.Program:
    """Parse ``text`` (named ``filename`` in spans) into an :class:`ast.Program`.

    Raises DiagnosticError: code ``syntax`` (file:line:col of the unexpected character or
    token) or ``bad-literal``."""
    prog = parse(text, filename, _Builder(filename, text))
    assert isinstance(prog, ast.Program)  # what the start rule builds
    return prog
