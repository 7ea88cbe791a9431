"""Builtins that take the program's context, and the BPF subprograms that cannot call them.

A ``global`` fn and a ``loop`` callback are BPF subprograms of their own: bpfdsl passes
them their declared parameters only, never the program's context (r1 at the program's
entry).  So a builtin whose kernel helper takes the context (an ``ARG_PTR_TO_CTX``
argument in :data:`bpfdsl.abi.helpers.HELPERS`: ``perf_event_output``, ``msg_apply_bytes``,
``msg_redirect_map``, ``sock_ops_cb_flags_set``, ...) runs only in a program body, a
plain fn (inlined into its caller, sharing its context) or a ``noinline`` fn (a static
subprogram: it takes its caller's context as a hidden first argument, PTR_TO_CTX, which
the kernel allows a static subprogram).  The resizing builtins
and ``tail_call`` take the context too but are refused in every fn already
(``resize-in-fn``, ``tail-call-in-fn``).
"""

from __future__ import annotations

from bpfdsl.abi.helpers import HELPERS, ArgKind
from bpfdsl.lang import ast
from bpfdsl.lang.sema.symbols import BUILTINS, PKT_RESIZE

CTX_BUILTINS = frozenset(
    name
    for name in BUILTINS
    if name not in PKT_RESIZE
    and name != "tail_call"
    and name in HELPERS
    and ArgKind.PTR_TO_CTX in (HELPERS[name].args or ())
)
"""Builtins whose helper takes the program's context (see the module docstring)."""


def _calls(body: ast.Node) -> list[ast.Call]:
    """Every call in ``body``, in source order (line, column)."""
    out: list[ast.Call] = []
    stack: list[object] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Call):
            out.append(node)
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, (ast.Node, ast.MatchArm)):
            stack.extend(v for k, v in vars(node).items() if k not in ("span", "ty"))
        elif isinstance(node, dict):
            stack.extend(node.values())
    return sorted(out, key=lambda c: (c.span.line, c.span.col))


def find_ctx_calls(fns: dict[str, ast.FnDecl]) -> dict[str, tuple[ast.Call, str]]:
    """For each fn that needs the program's context: the first call in its body that needs
    it (a builtin of :data:`CTX_BUILTINS`, or a call of a plain fn that needs it, found
    as a fixed point over the calls, a ``noinline`` fn among them: it takes its caller's
    context) and the name of the builtin in the end.  Calls of ``global`` fns do not
    count: those are checked on their own."""
    calls = {name: _calls(d.body) for name, d in fns.items()}

    def needs_ctx(c: ast.Call, needs: set[str]) -> bool:
        if c.name in fns:
            return c.name in needs and fns[c.name].modifier != "global"
        return c.name in CTX_BUILTINS

    needs: set[str] = set()
    changed = True
    while changed:
        changed = False
        for name, cs in calls.items():
            if name not in needs and any(needs_ctx(c, needs) for c in cs):
                needs.add(name)
                changed = True
    out: dict[str, tuple[ast.Call, str]] = {}
    while len(out) < len(needs):  # in the order the fixed point found them: no cycles
        for name in sorted(needs - out.keys()):
            for c in calls[name]:
                if c.name not in fns and c.name in CTX_BUILTINS:
                    out[name] = (c, c.name)
                elif c.name in out and fns[c.name].modifier != "global":
                    out[name] = (c, out[c.name][1])
                else:
                    continue
                break
    return out


def ctx_message(what: str, fn: str, call: ast.Call, builtin: str) -> str:
    """The error text for a subprogram ``fn`` (``what``: "noinline fn", "loop callback", ...)
    whose ``call`` needs the context for ``builtin``."""
    via = "" if call.name == builtin else f" (through `{call.name}`)"
    return (
        f"`{builtin}` needs the program's context{via}, which {what} `{fn}` does not have: "
        "a BPF subprogram gets only its parameters"
    )


CTX_HINT = (
    "call the builtin in the program (or a plain fn it calls) with what the subprogram returns"
)


def check_subprog_ctx(sema) -> None:
    """Record the fns that need the context in ``sema.c.ctx_calls`` and refuse a
    ``global`` fn among them (``subprog-ctx``, at the call that needs it): a ``noinline``
    fn takes its caller's context as a hidden first argument (a static subprogram may take
    PTR_TO_CTX); loop callbacks are checked where ``loop`` names them (sema.calls)."""
    sema.c.ctx_calls = find_ctx_calls({n: f.decl for n, f in sema.c.fns.items()})
    for name in sorted(sema.c.ctx_calls):
        d = sema.c.fns[name].decl
        if d.modifier == "global":
            call, builtin = sema.c.ctx_calls[name]
            sema.err(
                "subprog-ctx",
                ctx_message(f"{d.modifier} fn", name, call, builtin),
                call.span,
                f"make it `noinline fn {name}` (a static subprogram takes the caller's "
                f"context) or a plain `fn`, or {CTX_HINT}",
            )
