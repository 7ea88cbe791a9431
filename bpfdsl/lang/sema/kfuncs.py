"""Calls of kernel functions for sema (front end): the XDP metadata kfuncs of
:data:`bpfdsl.abi.kfuncs.KFUNCS` (``rx_hash(hash, rss_type)``, ``rx_timestamp(ts)``,
``rx_vlan_tag(proto, tci)``).

Each writes the hints it reads into the locals it is given (the C call's pointer arguments:
``bpf_xdp_metadata_rx_hash(ctx, &hash, &rss_type)``) and returns the kfunc's ``int``: 0, or
a negative errno (-EOPNOTSUPP: the driver has no such hint; -ENODATA: this frame has none).
They read the RX descriptor through the driver, so only a device-bound program
(``xdp(dev_bound)``) may call them: the verifier refuses them in any other ("metadata
kfuncs require device-bound program").  A fn may call them (any kind: plain, ``noinline``
and ``global`` fns take the context, sema.subprog_ctx; a ``loop`` callback that parses
gets it through the loop's frame): the program calling the fn must be device-bound.
"""

from __future__ import annotations

from bpfdsl.abi.kfuncs import BY_BUILTIN
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import ExprHost, Local

DEV_BOUND = "xdp(dev_bound)"


def not_dev_bound(ex: ExprHost, at: ast.Node, builtin: str, where: str, via: str = "") -> None:
    """``kfunc-not-dev-bound`` at ``at``: ``builtin`` (a kfunc, called directly or
    ``via`` a fn) in ``where``, which is not a device-bound program."""
    k = BY_BUILTIN[builtin]
    through = f" (through `{via}`)" if via else ""
    ex.err(
        "kfunc-not-dev-bound",
        f"`{builtin}`{through} reads the RX descriptor through the driver ({k.name}): only "
        f"a device-bound program may call it, not {where}",
        at.span,
        "declare the program `xdp(dev_bound) fn ...`; it is then loaded for the device "
        "it is attached to (`bpfdsl attach PROG.bpfd --dev IFNAME`)",
    )


def check_fn_call(ex: ExprHost, e: ast.Call, fn: str) -> None:
    """A program's call of fn ``fn`` (or ``loop`` with callback ``fn``): one that calls a
    kfunc, directly or not, needs a device-bound program (the kfunc's own call in the fn
    is checked here, where the program is known)."""
    kind = ex.s.kind
    builtin = ex.c.kfunc_fns.get(fn)
    if builtin is not None and kind is not None and kind.keyword != DEV_BOUND:
        not_dev_bound(ex, e, builtin, f"a {kind.keyword} program", fn)


def call(ex: ExprHost, e: ast.Call) -> T.Type:
    """Check a kfunc call ``e``; its type is the kfunc's ``int`` return (an i32)."""
    k = BY_BUILTIN[e.name]
    sig = ", ".join(n for n, _ in k.outs)
    decl = "; ".join(f"let {n}: {t} = 0" for n, t in k.outs)
    kind = ex.s.kind
    if kind is not None and kind.keyword != DEV_BOUND:  # in a fn: checked at its calls
        not_dev_bound(ex, e, e.name, f"a {kind.keyword} program")
    if len(e.args) != len(k.outs) or e.kwargs:
        ex.err(
            "arg-count",
            f"`{e.name}({sig})` takes {len(k.outs)} local(s) to write the hints into",
            e.span,
            f"`{decl}` then `let err = {e.name}({sig})`",
        )
        return T.I32
    for a, (name, tname) in zip(e.args, k.outs, strict=True):
        want = T.BUILTIN_TYPES[tname]
        t = ex.expr(a)
        sym = ex.c.sym.get(a) if isinstance(a, ast.Name) else None
        if not isinstance(sym, Local) or sym.bounds is not None or t != want:
            found = "" if t is T.ERR else f", found {t}"
            ex.err(
                "kfunc-arg",
                f"`{e.name}` writes `{name}` into a local {want} variable{found}",
                a.span,
                f"`{decl}` then `let err = {e.name}({sig})`",
            )
    return T.I32
