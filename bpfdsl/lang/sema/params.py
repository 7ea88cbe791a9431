"""Which aggregate parameters a fn may write (front end): the calls that can pass the
caller's own memory instead of a copy.

A struct, bytes or array parameter is passed by value for the language: the callee sees
the argument's value, and what it writes into its parameter stays its own.  In the object,
a parameter of aggregate type is a pointer (a BPF subprogram takes at most 5 registers;
the kernel checks a global function's pointer argument as PTR_TO_MEM of the size BTF
gives).  Codegen passes a copy only where the callee may write the parameter: a call of a
fn that only reads it passes the address of the caller's variable (one stack copy shared
by every call, as C passes ``const struct key *``).

The analysis is conservative: a parameter is *written* if its name, or a name bound from
it (``let x = p else``, ``if let x = p``, ``let x = p``, also where that copies), is the
root of an assignment target, is an argument of ``swap``, the state of ``loop``, an
aggregate argument of any builtin or kfunc, or is passed to a parameter of a fn that is
itself written (a fixed point over the calls).  Shadowing a parameter's name counts the
new variable too (a spurious copy, never a missed one).
"""

from __future__ import annotations

from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import FnInfo

AGGREGATES = (T.StructType, T.BytesType, T.ArrayType)


def _aggregate(t: T.Type | None) -> bool:
    if isinstance(t, T.OptionalType):
        t = t.inner
    return isinstance(t, AGGREGATES)


def root_name(e: ast.Expr) -> str | None:
    """The variable an lvalue-like expression starts from (``a.b[i].c`` -> ``a``)."""
    while isinstance(e, (ast.Field, ast.Index)):
        e = e.obj
    return e.id if isinstance(e, ast.Name) else None


def _nodes(body: ast.Node) -> list[object]:
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


def written_params(fns: dict[str, FnInfo]) -> dict[str, frozenset[int]]:
    """fn name -> indexes of its aggregate parameters it may write (see the module doc)."""
    nodes = {name: _nodes(info.decl.body) for name, info in fns.items()}
    written: dict[str, set[int]] = {name: set() for name in fns}
    changed = True
    while changed:
        changed = False
        for name, info in fns.items():
            for k, (pname, pty) in enumerate(info.params):
                if k in written[name] or not _aggregate(pty):
                    continue
                if _writes(nodes[name], pname, fns, written):
                    written[name].add(k)
                    changed = True
    return {name: frozenset(ks) for name, ks in written.items()}


def _writes(
    nodes: list[object], pname: str, fns: dict[str, FnInfo], written: dict[str, set[int]]
) -> bool:
    aliases = {pname}
    grew = True
    while grew:  # names bound from the parameter (or from such a name)
        grew = False
        for n in nodes:
            if isinstance(n, (ast.Let, ast.IfLet)) and n.name not in aliases:
                if root_name(n.value) in aliases:
                    aliases.add(n.name)
                    grew = True
    for n in nodes:
        if isinstance(n, ast.Assign) and root_name(n.target) in aliases:
            return True
        if isinstance(n, ast.Call):
            for j, a in enumerate(n.args):
                if root_name(a) not in aliases:
                    continue
                if n.name in fns:
                    if j in written[n.name]:
                        return True
                elif n.name in ("swap", "loop") or _aggregate(a.ty):
                    return True
        if isinstance(n, ast.MethodCall):
            if any(root_name(a) in aliases and _aggregate(a.ty) for a in n.args):
                return True
    return False
