"""Path-sensitive tracking of packet resizes (adjust_head/adjust_tail/adjust_meta and the
sk_msg pull/push/pop helpers: every packet pointer is invalid after them, the kernel's
``bpf_helper_changes_pkt_data``).

Per path, sema knows which header views a resize made invalid (``Sema.stale``: view ->
line of the resize) and which resize calls happened (``Sema.resized``).  A branch is
analyzed from the state before it, each way on its own; where the ways meet, a view is
invalid if it is on any way that reaches the join, so a view stays usable on the paths
where no resize happened, and a use after the join of a view resized on some path is the
``stale-header`` error.  After a statement in which some path that goes on resized the
packet, the parse cursor is at the packet's start on every path (codegen resets it at the
join: ``Checked.cursor_reset``), so a re-parse reads from the same place whichever way was
taken.  A loop whose body resizes on a path that goes round again resets the cursor
before the next iteration (``Checked.latch_reset``), and a view from before the loop used
in its body is the ``stale-header`` error naming the resize and the loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.diagnostics import Span
from bpfdsl.lang import ast
from bpfdsl.lang.sema.symbols import PKT_RESIZE, FnInfo, Local, SemaHost


@dataclass(frozen=True, slots=True)
class PathState:
    """What a path carries: invalid views (view -> line of the resize), resize calls."""

    stale: dict[Local, int]
    resized: frozenset[ast.Node]


@dataclass(slots=True)
class LoopPaths:
    """The states at the `continue`s and `break`s of the loop being analyzed."""

    continues: list[PathState] = field(default_factory=list)
    breaks: list[PathState] = field(default_factory=list)


def snapshot(s: SemaHost) -> PathState:
    """The current path's state (``s``: the Sema)."""
    return PathState(dict(s.stale), s.resized)


def restore(s: SemaHost, st: PathState) -> None:
    s.stale, s.resized = dict(st.stale), st.resized


def join(
    s: SemaHost, node: ast.Node, before: PathState, ends: list[tuple[PathState, bool]]
) -> None:
    """Set the state after ``node`` from its ways through (``ends``: (state, diverged));
    call after the cursor merge: a resize on some way that goes on resets the cursor."""
    live = [st for st, gone in ends if not gone]
    if not live:
        restore(s, before)
        return
    stale: dict[Local, int] = {}
    for st in live:
        for view, line in st.stale.items():
            stale.setdefault(view, line)
    s.stale = stale
    s.resized = frozenset().union(*(st.resized for st in live))
    if any(st.resized != before.resized for st in live):
        s.c.cursor_reset.add(node)
        s.cursor = None  # codegen: cursor = data on every path


def loop_body_done(
    s: SemaHost,
    loop: ast.For,
    entry: PathState,
    paths: LoopPaths,
    fell_through: bool,
    outer: set[Local],
    uses: list[tuple[Local, Span]],
) -> None:
    """After the body of ``loop``: report views from before the loop (``outer``) used in
    the body (``uses``: (view, span)) when a path back to its start resized the packet, and
    set the state after the loop (its normal exit and its breaks)."""
    backs = list(paths.continues)
    if fell_through:
        backs.append(snapshot(s))
    back_stale: dict[Local, int] = {}
    for st in backs:
        for view, line in st.stale.items():
            if view in outer and view not in entry.stale:
                back_stale.setdefault(view, line)
    reported: set[int] = set()
    for view, span in uses:
        if view in back_stale and id(span) not in reported:
            reported.add(id(span))
            s.err(
                "stale-header",
                f"header `{view.name}` is invalid here: the packet was resized at line "
                f"{back_stale[view]}, and the loop at line {loop.span.line} comes back here "
                "after it",
                span,
                "parse the header again inside the loop, after the resize",
            )
    if any(st.resized != entry.resized for st in backs):
        s.c.latch_reset.add(loop)
    head = [(entry, False)] + [(st, False) for st in backs]
    merged: dict[Local, int] = {}
    for st, _ in head:
        for view, line in st.stale.items():
            merged.setdefault(view, line)
    at_head = PathState(merged, frozenset().union(*(st.resized for st, _ in head)))
    join(s, loop, entry, [(at_head, False)] + [(st, False) for st in paths.breaks])


def pkt_changing_fns(fns: dict[str, FnInfo]) -> set[str]:
    """The fns that may change the packet: they call a resizing builtin or ``tail_call``
    (the tail-called program may resize), or a fn that does (a fixed point over the
    calls).  Sema refuses both in every fn (``resize-in-fn``, ``tail-call-in-fn``); a
    call of such a fn still makes the caller's header views invalid, as the kernel
    invalidates the caller's packet pointers (verifier.c changes_pkt_data), so a later
    use is the ``stale-header`` error too."""
    calls: dict[str, set[str]] = {n: set() for n in fns}
    out: set[str] = set()
    for name, info in fns.items():
        stack: list[object] = [info.decl.body]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.Call):
                if node.name in PKT_RESIZE or node.name == "tail_call":
                    out.add(name)
                elif node.name in calls:
                    calls[name].add(node.name)
            if isinstance(node, list):
                stack.extend(node)
            elif isinstance(node, (ast.Node, ast.MatchArm)):
                stack.extend(v for k, v in vars(node).items() if k not in ("span", "ty"))
            elif isinstance(node, dict):
                stack.extend(node.values())
    changed = True
    while changed:
        changed = False
        for name, callees in calls.items():
            if name not in out and callees & out:
                out.add(name)
                changed = True
    return out
