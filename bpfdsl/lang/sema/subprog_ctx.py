"""Builtins that take the program's context, and the BPF subprograms that take it.

A builtin whose kernel helper takes the context (an ``ARG_PTR_TO_CTX`` argument in
:data:`bpfdsl.abi.helpers.HELPERS`: ``perf_event_output``, ``msg_apply_bytes``,
``msg_redirect_map``, ``sock_ops_cb_flags_set``, ...) runs in a program body, a plain fn
(inlined into its caller, sharing its context), a ``noinline`` fn (a static subprogram:
it takes its caller's context as a hidden first argument, PTR_TO_CTX, which the kernel
allows a static subprogram) or a ``global`` fn (the context as a hidden first argument
tagged ``arg:ctx``, the kernel's ``__arg_ctx``: it verifies the function alone, the
argument a PTR_TO_CTX by its BTF).  A ``global`` fn that parses takes the context too and
reads the packet through it; the fns that call either kind take the context to pass it.
A ``loop`` callback gets the index and the state only (sema.calls refuses these builtins
there), except one that reads the packet: the loop's subprogram made for it reads the
context back from the loop's frame (CodeGen.emit_loop_trampoline).  The resizing builtins and ``tail_call`` take the context too but are refused in
every fn already (``resize-in-fn``, ``tail-call-in-fn``).
"""

from __future__ import annotations

from bpfdsl.abi.helpers import HELPERS, ArgKind
from bpfdsl.abi.kfuncs import BY_BUILTIN as KFUNC_BY_BUILTIN
from bpfdsl.lang import ast
from bpfdsl.lang.sema.symbols import BUILTINS, PKT_RESIZE, SemaHost

CTX_BUILTINS = frozenset(
    name
    for name in BUILTINS
    if name not in PKT_RESIZE
    and name != "tail_call"
    and name in HELPERS
    and ArgKind.PTR_TO_CTX in (HELPERS[name].args or ())
)
"""Builtins whose helper takes the program's context (see the module docstring)."""
NEEDS_CTX = CTX_BUILTINS | frozenset(KFUNC_BY_BUILTIN)
"""Those and the kfuncs (:data:`bpfdsl.abi.kfuncs.KFUNCS`: their first argument is the
context): the calls that make a fn take the context."""


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


def find_ctx_calls(
    fns: dict[str, ast.FnDecl], packet_fns: frozenset[str] | set[str] = frozenset()
) -> dict[str, tuple[ast.Call, str]]:
    """For each fn that needs the program's context: the first call in its body that needs
    it (a builtin or kfunc of :data:`NEEDS_CTX`, or a call of a fn that needs it, found as a
    fixed point over the calls) and the name of the builtin in the end (``parse`` for a
    ``global`` fn of ``packet_fns``, which reads the packet through its own context; its
    entry is its first call, or a ``parse`` call at the fn itself)."""
    calls = {name: _calls(d.body) for name, d in fns.items()}
    roots = {n for n in packet_fns if n in fns and fns[n].modifier == "global"}

    def needs_ctx(c: ast.Call, needs: set[str]) -> bool:
        if c.name in fns:
            return c.name in needs
        return c.name in NEEDS_CTX

    needs: set[str] = set(roots)
    changed = True
    while changed:
        changed = False
        for name, cs in calls.items():
            if name not in needs and any(needs_ctx(c, needs) for c in cs):
                needs.add(name)
                changed = True
    out: dict[str, tuple[ast.Call, str]] = {
        n: (ast.Call(span=fns[n].span, name="parse", args=[], kwargs={}), "parse") for n in roots
    }
    for name in roots:  # a builtin it calls, if any, names the need better
        for c in calls[name]:
            if c.name not in fns and c.name in NEEDS_CTX:
                out[name] = (c, c.name)
                break
    while len(out) < len(needs):  # in the order the fixed point found them: no cycles
        for name in sorted(needs - out.keys()):
            for c in calls[name]:
                if c.name not in fns and c.name in NEEDS_CTX:
                    out[name] = (c, c.name)
                elif c.name in out:
                    out[name] = (c, out[c.name][1])
                else:
                    continue
                break
    return out


def find_kfunc_fns(fns: dict[str, ast.FnDecl]) -> dict[str, str]:
    """The fns that call a kfunc (:data:`bpfdsl.abi.kfuncs.KFUNCS`), directly or through
    the fns and ``loop`` callbacks they call: fn -> the kfunc's builtin name.  A program
    calling one must be device-bound for the XDP metadata kfuncs (sema.kfuncs)."""
    calls = {name: _calls(d.body) for name, d in fns.items()}
    out: dict[str, str] = {}
    for name, cs in calls.items():
        for c in cs:
            if c.name in KFUNC_BY_BUILTIN and c.name not in fns:
                out[name] = c.name
                break
    changed = True
    while changed:
        changed = False
        for name, cs in calls.items():
            if name in out:
                continue
            for c in cs:
                callee = c.name
                if callee == "loop" and len(c.args) > 1 and isinstance(c.args[1], ast.Name):
                    callee = c.args[1].id
                if callee in out:
                    out[name] = out[callee]
                    changed = True
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


LOOP_CTX_HINT = (
    "call the builtin in the program (or a plain fn it calls) with what the loop leaves in "
    "its state; a callback that reads the packet (a plain fn that parses, loads or stores) "
    "has the context and may call it"
)


def check_subprog_ctx(sema: SemaHost) -> None:
    """Record the fns that need the context in ``sema.c.ctx_calls`` (after
    ``sema.c.packet_fns``): a ``noinline`` or ``global`` fn takes it as a hidden first
    argument (CodeGen.hidden_args); loop callbacks are checked where ``loop`` names them
    (sema.calls)."""
    sema.c.kfunc_fns = find_kfunc_fns({n: f.decl for n, f in sema.c.fns.items()})
    sema.c.ctx_calls = find_ctx_calls({n: f.decl for n, f in sema.c.fns.items()}, sema.c.packet_fns)
