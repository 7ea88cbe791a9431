"""The reference rule of ring buffer reservations (front end, after typing): every
``ringbuf_reserve`` that succeeded is ended by exactly one ``ringbuf_submit`` or
``ringbuf_discard`` on every path, and the reservation is not used after that.

The kernel verifier enforces the same rule on the instructions (``ringbuf_reserve`` acquires
a reference, submit/discard release it; "Unreleased reference" at exit, "invalid mem access"
after release); here it is an error at the source line: the ``return``, ``break`` or
``continue`` that leaves a reservation open, the end of the block where it goes out of
scope, or the use after the end.  A reservation is a local bound by ``let ... else`` or
``if let``; it may only be used as ``r.field`` (reads, writes, ``+=``) and as the argument
of submit/discard, so no copy of it can escape the rule.

The analysis walks the statements of one body (a program or an inlined fn) along every
path, with the state of each reservation: open, ended (where) or ended on some paths only.
Paths join after if/else, match and loops; a loop body is walked twice, so an end inside
a loop of a reservation made before it shows as a second end.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang.sema.symbols import Local, SemaHost

OPEN, ENDED, MAYBE = "open", "ended", "maybe"
_ENDERS = ("ringbuf_submit", "ringbuf_discard")


@dataclass(frozen=True, slots=True)
class _Res:
    """State of one reservation on a path: ``status`` (open/ended/maybe), the line it
    was reserved at, and where it was ended (line, call name) when it was."""

    status: str
    line: int
    ended_at: tuple[int, str] | None = None


State = dict[Local, _Res]  # Local -> _Res; None: the path does not go on (return, break, continue)


def _join(states: list[State | None]) -> State | None:
    live = [s for s in states if s is not None]
    if not live:
        return None
    out: State = {}
    for loc in {k: None for s in live for k in s}:
        vals = [s.get(loc) for s in live]
        if any(v is None for v in vals):
            continue  # bound on some paths only: out of scope at the join
        res = [v for v in vals if v is not None]  # all of them (checked above)
        first = res[0]
        if all(v.status == first.status for v in res):
            ended = next((v.ended_at for v in res if v.ended_at), None)
            out[loc] = _Res(first.status, first.line, ended)
        else:
            ended = next((v.ended_at for v in res if v.ended_at), None)
            out[loc] = _Res(MAYBE, first.line, ended)
    return out


class RefChecker:
    """One pass over a body; errors through ``sema.err`` (deduplicated: a loop body is
    walked twice)."""

    def __init__(self, sema: SemaHost) -> None:
        self.s = sema
        self.c = sema.c
        self.seen: set[tuple[str, int, int, str]] = set()
        self.loops: list[tuple[set[Local], list[State], list[State]]] = []

    def err(self, code: str, msg: str, span: Span, hint: str) -> None:
        key = (code, span.line, span.col, msg)
        if key not in self.seen:
            self.seen.add(key)
            self.s.err(code, msg, span, hint)

    # ---- reservations ----
    def _reservation(self, value: ast.Expr) -> bool:
        return isinstance(value, ast.Call) and value.name == "ringbuf_reserve"

    def _open_names(self, st: State, only: set[Local] | None = None) -> list[Local]:
        return [
            loc
            for loc, r in st.items()
            if r.status in (OPEN, MAYBE) and (only is None or loc in only)
        ]

    def _describe(self, loc: Local, r: _Res) -> tuple[str, str]:
        """("reservation `r` (reserved at line N)", "open" | "ended on some paths only")."""
        how = "open" if r.status == OPEN else "submitted or discarded on some paths only"
        return f"reservation `{loc.name}` (reserved at line {r.line})", how

    def _leaving(self, st: State, span: Span, what: str, only: set[Local] | None = None) -> None:
        for loc in self._open_names(st, only):
            r = st[loc]
            name, how = self._describe(loc, r)
            self.err(
                "unreleased-reservation",
                f"{what} leaves {name} {how}",
                span,
                f"call `ringbuf_submit({loc.name})` or `ringbuf_discard({loc.name})` on "
                "every path before it (the kernel refuses a program that can exit with "
                "an unreleased reservation)",
            )

    # ---- expressions: uses of reservations ----
    def expr(self, e: ast.Expr, st: State) -> None:
        """Check the uses of reservations in expression ``e`` (and end them)."""
        stack: list[tuple[ast.Node, ast.Node | None]] = [(e, None)]
        while stack:
            n, parent = stack.pop()
            if isinstance(n, ast.Call) and n.name in _ENDERS and n.args:
                self._end(n, st)
                stack.extend((a, n) for a in n.args[1:])
                continue
            if isinstance(n, ast.Name):
                loc = self.c.sym.get(n)
                if isinstance(loc, Local) and loc in st:
                    self._use(n, loc, st, isinstance(parent, ast.Field) and parent.obj is n)
                continue
            if isinstance(n, ast.Node):
                for k, v in vars(n).items():
                    if k in ("span", "ty"):
                        continue
                    if isinstance(v, ast.Node):
                        stack.append((v, n))
                    elif isinstance(v, list):
                        stack.extend((x, n) for x in v if isinstance(x, ast.Node))
                    elif isinstance(v, dict):
                        stack.extend((x, n) for x in v.values() if isinstance(x, ast.Node))

    def _use(self, n: ast.Name, loc: Local, st: State, field: bool) -> None:
        r = st[loc]
        if not field:
            self.err(
                "reservation-use",
                f"reservation `{loc.name}` can only be used through its fields "
                f"(`{loc.name}.field`) and by ringbuf_submit/ringbuf_discard",
                n.span,
                "copy the fields you need into locals; a copy of the reservation "
                "would escape the submit-or-discard rule",
            )
            return
        if r.status != OPEN:
            self._after_end(n, loc, r)

    def _after_end(self, n: ast.Node, loc: Local, r: _Res) -> None:
        line, how = r.ended_at or (0, "ringbuf_submit")
        when = "" if r.status == ENDED else " on some paths"
        self.err(
            "reservation-use",
            f"reservation `{loc.name}` is used after {how} (line {line}){when}: its "
            "memory belongs to user space now",
            n.span,
            "fill every field before the submit, and end the reservation once",
        )

    def _end(self, call: ast.Call, st: State) -> None:
        a = call.args[0]
        loc = self.c.sym.get(a) if isinstance(a, ast.Name) else None
        if not isinstance(loc, Local) or loc not in st:
            return  # not a reservation: the type error is sema's
        r = st[loc]
        if r.status != OPEN:
            line, how = r.ended_at or (0, "ringbuf_submit")
            when = "" if r.status == ENDED else " on some paths"
            self.err(
                "reservation-use",
                f"`{call.name}` of reservation `{loc.name}`, which {how} at line {line} "
                f"ended already{when}",
                call.span,
                "submit or discard a reservation exactly once on every path (in a loop: "
                "reserve inside the loop body)",
            )
        st[loc] = _Res(ENDED, r.line, (call.span.line, call.name))

    # ---- statements ----
    def block(
        self, b: ast.Block | None, st: State | None, bound: set[Local] | None = None
    ) -> State | None:
        """Walk ``b``; the reservations bound in it go out of scope at its end."""
        if b is None or st is None:
            return st
        mine: set[Local] = bound if bound is not None else set()
        for s in b.stmts:
            if st is None:
                break  # unreachable statements: nothing to say about them
            st = self.stmt(s, st, mine)
        if st is not None:
            span = b.span
            if b.span.end_line and b.span.end_col:  # the closing brace
                span = Span(b.span.file, b.span.end_line, max(1, b.span.end_col - 1))
            for loc in self._open_names(st, mine):
                name, how = self._describe(loc, st[loc])
                self.err(
                    "unreleased-reservation",
                    f"{name} is {how} at the end of its block",
                    span,
                    f"call `ringbuf_submit({loc.name})` or `ringbuf_discard({loc.name})` "
                    "on every path before the end of the block",
                )
            st = {k: v for k, v in st.items() if k not in mine}
        return st

    def stmt(self, s: ast.Stmt, st: State, mine: set[Local]) -> State | None:
        st = dict(st)
        if isinstance(s, ast.Let):
            self.expr(s.value, st)
            if s.orelse is not None:
                self.block(s.orelse, dict(st))  # must leave: its state does not go on
            if self._reservation(s.value) and s.orelse is not None:
                loc = self.c.sym.get(s)
                if isinstance(loc, Local):
                    st[loc] = _Res(OPEN, s.span.line)
                    mine.add(loc)
            return st
        if isinstance(s, ast.IfLet):
            self.expr(s.value, st)
            loc = self.c.sym.get(s)
            inner = dict(st)
            bound: set[Local] = set()
            if self._reservation(s.value) and isinstance(loc, Local):
                inner[loc] = _Res(OPEN, s.span.line)
                bound.add(loc)
            then = self.block(s.then, inner, bound)
            other = self.block(s.orelse, dict(st)) if s.orelse else st
            return _join([then, other])
        if isinstance(s, ast.If):
            self.expr(s.cond, st)
            then = self.block(s.then, dict(st))
            other = self.block(s.orelse, dict(st)) if s.orelse else st
            return _join([then, other])
        if isinstance(s, ast.Match):
            self.expr(s.subject, st)
            ends = [self.block(arm.body, dict(st)) for arm in s.arms]
            if not any(None in arm.patterns for arm in s.arms):
                ends.append(st)
            return _join(ends)
        if isinstance(s, ast.For):
            self.expr(s.start, st)
            self.expr(s.end, st)
            return self.loop(s.body, st)
        if isinstance(s, ast.While):
            return self.loop(s.body, st)
        if isinstance(s, ast.Return):
            if s.value is not None:
                self.expr(s.value, st)
            self._leaving(st, s.span, "`return`")
            return None
        if isinstance(s, (ast.Break, ast.Continue)):
            word = "break" if isinstance(s, ast.Break) else "continue"
            if self.loops:
                inside, breaks, conts = self.loops[-1]
                self._leaving(st, s.span, f"`{word}`", inside)
                (breaks if word == "break" else conts).append(
                    {k: v for k, v in st.items() if k not in inside}
                )
            return None
        if isinstance(s, ast.CallElse):  # tail_call(m, i) else { ... }: gone on success
            self.expr(s.call, st)
            self._leaving(st, s.call.span, "`tail_call`")
            return self.block(s.orelse, st)  # runs when the call fails (sema: it leaves)
        if isinstance(s, ast.Assign):
            self.expr(s.target, st)
            self.expr(s.value, st)
            return st
        if isinstance(s, ast.ExprStmt):
            self.expr(s.expr, st)
            return st
        return st

    def loop(self, body: ast.Block, st: State) -> State | None:
        """A loop runs its body 0..n times: walk it twice (the second time from the
        join of the entry and the first pass), then join the ways out."""
        entry = st
        out = None
        for _ in range(2):
            inside: set[Local] = set()  # reservations bound in the body (the block adds them)
            breaks: list[State] = []
            conts: list[State] = []
            self.loops.append((inside, breaks, conts))
            end = self.block(body, dict(entry), inside)
            self.loops.pop()
            out = _join([st, end, *breaks, *conts])
            entry = _join([st, end, *conts]) or st
        return out


def check_refs(sema: SemaHost, body: ast.Block) -> None:
    """Check the reservation rule on ``body`` (a program's or fn's), after typing."""
    if not _has_reserve(body):
        return
    RefChecker(sema).block(body, {})


def _has_reserve(node: object) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, ast.Call) and n.name == "ringbuf_reserve":
            return True
        if isinstance(n, list):
            stack.extend(n)
        elif isinstance(n, dict):
            stack.extend(n.values())
        elif isinstance(n, (ast.Node, ast.MatchArm)):
            stack.extend(v for k, v in vars(n).items() if k not in ("span", "ty"))
    return False
