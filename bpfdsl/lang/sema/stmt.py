"""Statement checking for sema (front end mixin of ``sema.Sema``): let/let-else, if-let,
if, match, bounded for (a `while` is refused: the verifier needs a visible bound),
return values against the program kind's table, break/continue placement, and which
bodies always leave (for `let ... else` and the end of a program)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bpfdsl.abi.prog_types import PROGRAM_KINDS, ProgramKind
from bpfdsl.diagnostics import Diagnostic, Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema import encap, resize
from bpfdsl.lang.sema.csum import l4_in_scope
from bpfdsl.lang.sema.meta import merge as merge_meta
from bpfdsl.lang.sema.symbols import (
    CURSOR_UNKNOWN,
    PKT_RESIZE,
    Checked,
    ExprHost,
    FnInfo,
    Local,
    MetaState,
    const_int,
)

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable

_CURSOR_MOVERS = ("skip_ext",)  # calls that move the cursor (besides PKT_RESIZE helpers)


def moves_cursor(node: object, fns: Collection[str] = frozenset()) -> bool:
    """Whether the subtree ``node`` may move the parse cursor (parse, skip_ext, resizing
    helpers, calls of the fns ``fns``), found without recursion."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Parse, ast.Push, ast.Pop)):
            return True
        if isinstance(n, ast.Call) and (
            n.name in _CURSOR_MOVERS or n.name in PKT_RESIZE or n.name in fns
        ):
            return True
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, dict):
            stack.extend(n.values())
        elif isinstance(n, (ast.Node, ast.MatchArm)):
            stack.extend(v for k, v in vars(n).items() if k not in ("span", "ty"))
    return False


class StmtChecker:
    # What this mixin uses of its host, analyzer.Sema, declared for the type checker (the
    # analyzer imports this module, so Sema cannot be named here; symbols.SemaHost is the
    # part the other sema modules use).
    c: Checked
    ex: ExprHost
    diags: list[Diagnostic]
    kind: ProgramKind | None
    fn: FnInfo | None
    prog: ast.ProgDecl | None
    cursor: object
    stale: dict[Local, int]
    resized: frozenset[ast.Node]
    loop_depth: int
    loop_paths: list[resize.LoopPaths]
    view_uses: list[tuple[Local, Span]]
    scopes: list[dict[str, object]]
    parse_from: dict[ast.Parse, object]
    gone: dict[str, tuple[Local, int]]
    follows: dict[Local, object]
    pushed: dict[Local, int]
    payload_writes: list[tuple[Span | None, Local]]
    meta: MetaState

    if TYPE_CHECKING:

        def err(self, code: str, msg: str, span: Span, hint: str | None = None) -> None: ...
        def bind(self, name: str, sym: Local) -> None: ...
        def resolve_type(self, t: ast.TypeRef) -> T.Type: ...
        def lookup(self, name: str) -> object: ...
        def source_text(self, span: Span) -> str: ...
        def suggest(self, name: str, options: Iterable[str]) -> str | None: ...

    def merge_cursors(self, ends: list[tuple[object, bool]], before: object) -> None:
        """Set the cursor after a branch from ``ends`` ((cursor, diverged) per way through
        it): the common one of the ways that reach the next statement, else unknown."""
        live = {id(c): c for c, gone in ends if not gone}
        if not live:
            self.cursor = before  # nothing follows on any path
        else:
            self.cursor = next(iter(live.values())) if len(live) == 1 else CURSOR_UNKNOWN

    def bind_parsed(self, value: ast.Expr, loc: Local) -> None:
        """``loc`` is bound to ``value``: if that is a parse, the cursor is just past ``loc``,
        and an L4 header's parent is the IP header the parse started just past, if any."""
        if isinstance(value, ast.Push) and value in self.c.pushes:
            self.pushed[loc] = self.c.pushes[value].prefix  # at a known offset
            return
        if not isinstance(value, ast.Parse):
            return
        prev = self.parse_from.get(value)
        self.follows[loc] = prev
        if (
            isinstance(loc.ty, T.HeaderType)
            and loc.ty.layout.l4
            and isinstance(prev, Local)
            and isinstance(prev.ty, T.HeaderType)
            and prev.ty.layout.name in ("ipv4", "ipv6")
        ):
            loc.header_parent = prev
        if self.cursor is value:
            self.cursor = loc

    def diverges(self, b: ast.Block | None) -> bool:
        if b is None or not b.stmts:
            return False
        s = b.stmts[-1]
        if isinstance(s, (ast.Return, ast.Break, ast.Continue)):
            return True
        if isinstance(s, (ast.If, ast.IfLet)):
            return self.diverges(s.then) and self.diverges(s.orelse)
        if isinstance(s, ast.CallElse):  # the call leaves on success, the else on failure
            return s.call.name == "tail_call" and self.diverges(s.orelse)
        if isinstance(s, ast.Match):
            return any(None in a.patterns for a in s.arms) and all(
                self.diverges(a.body) for a in s.arms
            )
        return False

    def block(self, b: ast.Block, new_scope: bool = True, bind: tuple | None = None) -> None:
        if new_scope:
            self.scopes.append({})
        if bind:
            self.bind(*bind)
        for s in b.stmts:
            self.stmt(s)
        if new_scope:
            for name, sym in self.scopes.pop().items():
                if isinstance(sym, Local):  # for the hint of a later "unknown name"
                    self.gone[name] = (sym, b.span.end_line or b.span.line)

    def stmt(self, s: ast.Stmt) -> None:
        getattr(self, "s_" + type(s).__name__)(s)

    def s_ExprStmt(self, s: ast.ExprStmt) -> None:
        if not isinstance(s.expr, (ast.Call, ast.MethodCall)):
            self.err(
                "no-effect",
                "this expression does nothing",
                s.expr.span,
                "use its value (`let x = ...`, `if ...`) or remove it",
            )
        t = self.ex.expr(s.expr)
        if isinstance(t, T.OptionalType):
            self.ex.unhandled(s.expr)

    def s_Let(self, s: ast.Let) -> None:
        t = self.ex.expr(s.value)
        after = self.cursor  # the else block leaves: the cursor after the let is this one
        if s.orelse is not None:
            if not isinstance(t, T.OptionalType) and t is not T.ERR:  # ERR: reported already
                self.err(
                    "needless-else",
                    f"this value of type {t} is never missing; `else` has nothing to handle",
                    s.orelse.span,
                    "remove the else block",
                )
                inner = t
            else:
                inner = t.inner if isinstance(t, T.OptionalType) else t
            paths = resize.snapshot(self)
            self.block(s.orelse)
            self.cursor = after
            resize.restore(self, paths)  # the else block leaves: its resizes stay in it
            if not self.diverges(s.orelse):
                self.err(
                    "else-must-leave",
                    "the else block of `let ... else` must leave (return, break or continue)",
                    s.orelse.span,
                    "end it with e.g. `return XDP_PASS`",
                )
        else:
            if isinstance(t, T.OptionalType):
                self.ex.unhandled(s.value)
                inner = t.inner
            else:
                inner = t
        if s.type is not None:
            want = self.resolve_type(s.type)
            if s.orelse is None:
                self.ex.coerce(s.value, want)
            inner = want
        if isinstance(inner, T.UntypedInt):
            v = self.c.cval.get(s.value, 0)
            inner = T.U32 if 0 <= v < 1 << 32 else T.U64 if v >= 0 else T.I64
            self.ex.coerce(s.value, inner)
        loc = Local(s.name, inner, s.span)
        self.bind_parsed(s.value, loc)
        self.c.sym[s] = loc
        self.bind(s.name, loc)

    def s_Pop(self, s: ast.Pop) -> None:
        encap.pop(self, s)

    def s_Assign(self, s: ast.Assign) -> None:
        self.ex.assign(s)

    def s_Store(self, s: ast.Store) -> None:
        """``store T at OFF = V else { ... }``: the else block runs on a short packet (it may
        leave or go on); a write of payload under a checksummed L4 header is one the
        payload-checksum warning counts."""
        ty = self.ex.pkt_bytes(s, "store")
        self.c.stores[s] = ty
        if ty is not T.ERR:
            self.ex.expect(s.value, ty)
        else:
            self.ex.expr(s.value)
        if self.kind is not None:
            l4 = l4_in_scope(self.ex, None)
            if l4 is not None:
                self.payload_writes.append((s.span, l4))
        before, paths = self.cursor, resize.snapshot(self)
        self.block(s.orelse)
        gone = self.diverges(s.orelse)
        self.merge_cursors([(self.cursor, gone), (before, False)], before)
        resize.join(self, s, paths, [(resize.snapshot(self), gone), (paths, False)])

    def s_CallElse(self, s: ast.CallElse) -> None:
        """``tail_call(map, index) else { ... }``: jump to the program in slot ``index`` of a
        prog_array; the else block runs when that fails (an empty slot, or 33 tail calls
        made already: MAX_TAIL_CALL_CNT) and must leave."""
        call = s.call
        if call.name != "tail_call":
            self.err(
                "call-else",
                f"`{call.name}(...)` has no failure path to give an `else` block",
                s.orelse.span,
                "only `tail_call(map, index) else { ... }` takes one; handle a result "
                "with `if` (or `let v = ... else` for a lookup)",
            )
            self.ex.expr(call)
            self.block(s.orelse)
            return
        self.ex.tail_call(call)
        before = self.cursor
        self.block(s.orelse)
        self.cursor = before
        if not self.diverges(s.orelse):
            self.err(
                "else-must-leave",
                "the else block of `tail_call` must leave (return, break or continue)",
                s.orelse.span,
                "end it with e.g. `return XDP_PASS`: it is what happens when the slot is empty",
            )

    def s_If(self, s: ast.If) -> None:
        self.ex.cond(s.cond)
        before, paths, meta_before = self.cursor, resize.snapshot(self), self.meta
        self.block(s.then)
        ends = [(self.cursor, self.diverges(s.then))]
        states = [(resize.snapshot(self), ends[0][1])]
        meta_ends = [(self.meta, ends[0][1])]
        self.cursor, self.meta = before, meta_before
        resize.restore(self, paths)
        if s.orelse:
            self.block(s.orelse)
        ends.append((self.cursor, self.diverges(s.orelse)))
        states.append((resize.snapshot(self), ends[1][1]))
        meta_ends.append((self.meta, ends[1][1]))
        self.merge_cursors(ends, before)
        resize.join(self, s, paths, states)
        self.meta = merge_meta(meta_before, meta_ends)

    def s_IfLet(self, s: ast.IfLet) -> None:
        before = self.cursor
        t = self.ex.expr(s.value)
        after = self.cursor
        if not isinstance(t, T.OptionalType):
            if t is not T.ERR:  # an expression with an error: reported already
                self.err(
                    "needless-if-let",
                    f"this value of type {t} is never missing",
                    s.value.span,
                    "use a plain `let`",
                )
            inner = t
        else:
            inner = t.inner
        loc = Local(s.name, inner, s.span)
        self.bind_parsed(s.value, loc)
        self.c.sym[s] = loc
        paths = resize.snapshot(self)
        self.block(s.then, bind=(s.name, loc))
        ends = [(self.cursor, self.diverges(s.then))]
        states = [(resize.snapshot(self), ends[0][1])]
        resize.restore(self, paths)
        # missing: a failed parse leaves the cursor where it was, a failed walk mid-way
        self.cursor = (
            before if isinstance(s.value, ast.Parse) or after is before else (CURSOR_UNKNOWN)
        )
        if s.orelse:
            self.block(s.orelse)
        ends.append((self.cursor, self.diverges(s.orelse)))
        states.append((resize.snapshot(self), ends[1][1]))
        self.merge_cursors(ends, before)
        resize.join(self, s, paths, states)

    def s_Match(self, s: ast.Match) -> None:
        t = self.ex.expr(s.subject)
        if not isinstance(t, (T.IntType, T.UntypedInt)):
            self.err("match-type", f"`match` needs an integer, not {t}", s.subject.span)
            return
        seen: set[int] = set()
        before, ends = self.cursor, []
        paths, states = resize.snapshot(self), []
        for arm in s.arms:
            for p in arm.patterns:
                if p is None:
                    continue
                self.ex.expect(p, t)
                v = self.ex.const_as(p, t)
                if v is not None and isinstance(t, T.IntType):  # as the subject's type: an i32
                    self.c.cval[p] = v  # -1 matches an i64 -1 (codegen's switch case)
                    p.ty = t
                if v is None:
                    self.err(
                        "not-constant", "match patterns must be compile-time constants", p.span
                    )
                elif v in seen:
                    self.err("duplicate-pattern", "this value is already matched above", p.span)
                else:
                    seen.add(v)
            self.cursor = before
            resize.restore(self, paths)
            self.block(arm.body)
            ends.append((self.cursor, self.diverges(arm.body)))
            states.append((resize.snapshot(self), ends[-1][1]))
        if not any(None in a.patterns for a in s.arms):  # no `_`: the value may match none
            ends.append((before, False))
            states.append((paths, False))
        self.merge_cursors(ends, before)
        resize.join(self, s, paths, states)

    def s_For(self, s: ast.For) -> None:
        a, b = const_int(self, s.start), const_int(self, s.end)
        ty = s.start.ty if isinstance(s.start.ty, T.IntType) else T.U32
        if a is None or b is None:
            bad = s.start if a is None else s.end
            self.err(
                "unbounded-loop",
                "loop bound is not a compile-time constant",
                bad.span,
                "use constants (`for i in 0..8`) and `break` out early",
            )
        self.ex.coerce(s.start, ty)
        self.ex.coerce(s.end, ty)
        loc = Local(s.var, ty, s.span, bounds=(a, b) if a is not None and b is not None else None)
        self.c.sym[s] = loc
        # then each iteration starts elsewhere; a subprogram (noinline, global) parses on a
        # cursor of its own: its call leaves the caller's where it was
        movers = {n for n in self.c.packet_fns if self.c.fns[n].linkage == "inline"}
        moved = moves_cursor(s.body, movers)
        if moved:
            self.cursor = CURSOR_UNKNOWN
        entry, uses = resize.snapshot(self), len(self.view_uses)
        outer = {v for scope in self.scopes for v in scope.values() if isinstance(v, Local)}
        self.loop_paths.append(resize.LoopPaths())
        self.loop_depth += 1
        self.block(s.body, bind=(s.var, loc))
        self.loop_depth -= 1
        paths = self.loop_paths.pop()
        fell = not self.diverges(s.body)
        resize.loop_body_done(self, s, entry, paths, fell, outer, self.view_uses[uses:])
        if moved:
            self.cursor = CURSOR_UNKNOWN

    def s_While(self, s: ast.While) -> None:
        self.err(
            "unbounded-loop",
            "unbounded loop: the kernel verifier needs a bound it can see",
            s.span,
            "write `for i in 0..N { if !(cond) { break } ... }` with a constant N",
        )

    def s_Return(self, s: ast.Return) -> None:
        if s.value is None:  # a bare `return`
            if self.fn is not None and self.fn.ret == T.VOID:
                return
            if self.fn is not None:
                self.err(
                    "return-value",
                    f"this fn returns {self.fn.ret}: `return` needs a value",
                    s.span,
                    "return `none` when there is no value"
                    if isinstance(self.fn.ret, T.OptionalType)
                    else f"write `return VALUE` (a {self.fn.ret})",
                )
                return
            assert self.kind is not None
            self.err(
                "return-value",
                f"a {self.kind.keyword} program returns a verdict: `return` needs one",
                s.span,
                f"write `return {_verdict(self.kind.returns)}`; the verdicts: "
                + ", ".join(self.kind.returns),
            )
            return
        if self.fn is not None and isinstance(self.fn.ret, T.OptionalType):
            v, inner = s.value, self.fn.ret.inner
            if isinstance(v, ast.Name) and v.id == "none" and self.lookup("none") is None:
                v.ty = T.VOID  # codegen: the missing value
                return
            t = self.ex.expr(v)
            if isinstance(t, T.OptionalType):  # passed on as it is, missing or not
                got = t.inner.inner if isinstance(t.inner, T.RefType) else t.inner
                if got != inner and T.ERR not in (got, inner):
                    self.err("return-value", f"this is an optional {got}, the fn returns an "
                             f"optional {inner}", v.span)  # fmt: skip
                return
            self.ex.coerce(v, inner)
            return
        if self.fn is not None:
            if self.fn.ret == T.VOID:
                self.err(
                    "return-value",
                    "this fn returns nothing",
                    s.value.span,
                    "declare a return type: `fn f(...) -> u32`",
                )
            else:
                self.ex.expect(s.value, self.fn.ret)
            return
        assert self.kind is not None
        t = self.ex.expr(s.value)
        if not T.is_host_int(t):
            self.err(
                "return-value",
                f"a {self.kind.keyword} program returns an action, not {t}",
                s.value.span,
                "return one of " + ", ".join(self.kind.returns),
            )
            return
        if isinstance(t, T.UntypedInt):  # helper results (u64, e.g. redirect) narrow freely
            self.ex.coerce(s.value, T.U32)
        raw = self.c.cval.get(s.value)
        name = s.value.id if isinstance(s.value, ast.Name) else None
        allowed = self.kind.returns
        bad_name = (
            name is not None
            and raw is not None
            and name not in allowed
            and any(name in k.returns for k in PROGRAM_KINDS)
        )
        if (raw is not None and raw not in allowed.values()) or bad_name:
            shown = name or str(raw)
            self.err(
                "bad-return",
                f"`{shown}` is not a valid return value for a {self.kind.keyword} program",
                s.value.span,
                "return one of " + ", ".join(allowed),
            )

    def s_Break(self, s: ast.Break) -> None:
        if not self.loop_depth:
            self.err("break-outside-loop", "`break` outside a loop", s.span)
        elif self.loop_paths:  # the state this way out of (or round) the loop carries
            paths = self.loop_paths[-1]
            (paths.breaks if isinstance(s, ast.Break) else paths.continues).append(
                resize.snapshot(self)
            )

    s_Continue = s_Break


def _verdict(returns: dict[str, int]) -> str:
    """The verdict a hint shows: the kind's PASS (XDP_PASS, SK_PASS), else its first."""
    return next((n for n in returns if n.endswith("_PASS")), next(iter(returns)))
