"""The stack of a chain of BPF-to-BPF calls (back end): at most 512 bytes together.

The kernel adds up the stack frames of every call chain from a program's start
(kernel/bpf/verifier.c check_max_stack_depth: each frame rounded up to 16 bytes with a
JIT, round_up_stack_depth) and refuses a chain above MAX_BPF_STACK ("combined stack size
of N calls is M. Too large").  :func:`check_call_chains` builds the call graph of a
compiled program from its calls (sema's AST: calls of ``noinline``/``global`` fns and
``loop`` callbacks, through the plain fns inlined on the way) with the frame sizes in the
object, hands it to the kernel's rule (:func:`bpfdsl.abi.stack.check_max_stack_depth`, the
one the checker applies to the object's calls too), and raises a located error at the call
that passes the limit, naming each frame's bytes and the struct/array variables that take
them.
"""

from __future__ import annotations

from bpfdsl.abi.limits import MAX_BPF_STACK
from bpfdsl.abi.stack import Rule, Subprog, check_max_stack_depth
from bpfdsl.diagnostics import DiagnosticError, Span, error
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.analyzer import Checked

AGGREGATES = (T.StructType, T.BytesType, T.ArrayType)

_HINT = (
    "a struct argument costs nothing when the fn only reads its parameter (the caller's "
    "variable is passed); one the fn writes is copied at each call: write a local copy "
    "instead, keep large structs in a map value (`map scratch: percpu_array<u32, T>"
    "(max_entries: 1)`), or make a fn on the chain plain (inlined)"
)


def _walk(body: ast.Node) -> list[object]:
    out: list[object] = []
    stack: list[object] = [body]
    while stack:
        node = stack.pop()
        out.append(node)
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, (ast.Node, ast.MatchArm)):
            stack.extend(v for k, v in vars(node).items() if k not in ("span", "ty"))
        elif isinstance(node, dict):
            stack.extend(node.values())
    return out


def _frame_values(
    c: Checked, body: ast.Block, inline: dict[str, ast.Block]
) -> list[tuple[str, int]]:
    """(name, bytes) of the struct/array/bytes variables a frame holds (its own and those
    of the plain fns inlined into it), largest first."""
    seen: set[int] = set()
    out: list[tuple[str, int]] = []
    todo = [body]
    while todo:
        b = todo.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        for n in _walk(b):
            if isinstance(n, (ast.Let, ast.IfLet)):
                loc = c.sym.get(n)
                t = getattr(loc, "ty", None)
                if isinstance(t, AGGREGATES):
                    out.append((n.name, t.size))
            elif isinstance(n, ast.Call) and n.name in inline:
                todo.append(inline[n.name])
            elif isinstance(n, ast.Call) and n.name in c.fns:
                info = c.fns[n.name]
                for k in sorted(c.written_params.get(n.name, ())):
                    pname, t = info.params[k]
                    what = f"a copy for `{n.name}`, which writes parameter `{pname}`,"
                    if isinstance(t, AGGREGATES) and (what, t.size) not in out:
                        out.append((what, t.size))
    out.sort(key=lambda v: -v[1])
    return out


def _calls(c: Checked, body: ast.Block, inline: dict[str, ast.Block]) -> list[tuple[str, Span]]:
    """(subprogram, span of the call) called from ``body``, through inlined fns."""
    seen: set[int] = set()
    out: list[tuple[str, Span]] = []
    todo: list[tuple[ast.Block, Span | None]] = [(body, None)]
    while todo:
        b, via = todo.pop()
        if id(b) in seen:
            continue
        seen.add(id(b))
        for n in _walk(b):
            if not isinstance(n, ast.Call):
                continue
            span = via or n.span
            if n.name in inline:
                todo.append((inline[n.name], span))
            elif n.name in c.fns:
                out.append((n.name, span))
            elif n.name == "loop" and len(n.args) > 1 and isinstance(n.args[1], ast.Name):
                out.append((n.args[1].id, span))
    out.sort(key=lambda cs: (cs[1].line, cs[1].col))  # source order: the first call named
    return out


def check_call_chains(c: Checked, depths: dict[str, int]) -> None:
    """Raise DiagnosticError (``stack-limit``) at the call where the first call chain from
    a program that the kernel refuses for its stack passes 512 bytes (``c``: sema's
    Checked; ``depths``: bytes per function symbol of the object,
    bpfdsl.backend.target.stack_depths).  The chain is the one the kernel's
    check_max_stack_depth finds first (:func:`bpfdsl.abi.stack.check_max_stack_depth`, on
    the calls in source order); a chain it refuses first for another rule (more than 8
    frames) is left to the checker, which says what the kernel says.  No fn tail-calls
    (sema: ``tail_call`` is only in a program body, which the tail-call rules exempt), so
    those rules never apply here.  The cost is the calls, not the chains."""
    inline = {n: f.decl.body for n, f in c.fns.items() if f.linkage == "inline"}
    callees = {n: _calls(c, f.decl.body, inline) for n, f in c.fns.items() if n not in inline}
    # a packet callback stays a plain fn, inlined into the loop's subprogram NAME__loop
    # (NAME__loop__CTX per context struct): that subprogram is the callee of its `loop`
    depths = dict(depths)
    for n in c.packet_callbacks:
        callees[n] = _calls(c, c.fns[n].decl.body, inline)
        frames = [d for s, d in depths.items() if s == f"{n}__loop" or s.startswith(f"{n}__loop__")]
        depths[n] = max(frames, default=0)
    bodies = {n: f.decl.body for n, f in c.fns.items()}
    graph: dict[str, Subprog[str, Span]] = {
        n: Subprog(depths.get(n, 0), [(span, f) for f, span in calls])
        for n, calls in callees.items()
    }
    for calls in callees.values():
        for f, _span in calls:
            graph.setdefault(f, Subprog(depths.get(f, 0)))
    for d, _kind in c.progs:
        prog_calls = _calls(c, d.body, inline)
        if not prog_calls:
            continue  # one frame: its own size is checked where the object is emitted
        graph[d.name] = Subprog(depths.get(d.name, 0), [(span, f) for f, span in prog_calls])
        for f, _span in prog_calls:
            graph.setdefault(f, Subprog(depths.get(f, 0)))
        hit = check_max_stack_depth(graph, d.name)
        if hit is None or hit.rule is not Rule.COMBINED_STACK:
            continue
        link = [
            (f, graph[f].depth, span) for f, span in zip(hit.chain, (None, *hit.sites), strict=True)
        ]
        raise _error(c, tuple(link), hit.stack, {d.name: d.body, **bodies}, inline)


def _error(
    c: Checked,
    chain: tuple[tuple[str, int, Span | None], ...],
    total: int,
    bodies: dict[str, ast.Block],
    inline: dict[str, ast.Block],
) -> DiagnosticError:
    names = " -> ".join(f for f, _b, _s in chain)
    parts = []
    for f, own, _s in chain:
        vals = _frame_values(c, bodies[f], inline)
        what = ", ".join(f"{n if n.startswith('a copy') else f'`{n}`'} {b}" for n, b in vals[:4])
        parts.append(f"`{f}` {own} bytes" + (f" ({what})" if what else ""))
    span = chain[-1][2]
    d = error(
        "stack-limit",
        f"the call chain {names} needs {total} bytes of stack together; the kernel allows "
        f"{MAX_BPF_STACK} (each frame rounded up to 16 bytes)",
        span,
        hint=_HINT,
        note="frames: " + "; ".join(parts),
    )
    return DiagnosticError(d, source=c.program.source)
