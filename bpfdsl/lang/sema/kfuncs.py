"""Calls of kernel functions for sema (front end): the XDP metadata kfuncs of
:data:`bpfdsl.abi.kfuncs.KFUNCS` (``rx_hash(hash, rss_type)``, ``rx_timestamp(ts)``,
``rx_vlan_tag(proto, tci)``).

Each writes the hints it reads into the locals it is given (the C call's pointer arguments:
``bpf_xdp_metadata_rx_hash(ctx, &hash, &rss_type)``) and returns the kfunc's ``int``: 0, or
a negative errno (-EOPNOTSUPP: the driver has no such hint; -ENODATA: this frame has none).
They read the RX descriptor through the driver, so only a device-bound program
(``xdp(dev_bound)``) may call them: the verifier refuses them in any other ("metadata
kfuncs require device-bound program").
"""

from __future__ import annotations

from bpfdsl.abi.kfuncs import BY_BUILTIN
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import Local

DEV_BOUND = "xdp(dev_bound)"


def call(ex, e: ast.Call) -> T.Type:
    """Check a kfunc call ``e``; its type is the kfunc's ``int`` return (an i32)."""
    k = BY_BUILTIN[e.name]
    sig = ", ".join(n for n, _ in k.outs)
    decl = "; ".join(f"let {n}: {t} = 0" for n, t in k.outs)
    kind = ex.s.kind
    if kind is None or kind.keyword != DEV_BOUND:
        where = "a fn" if kind is None else f"a {kind.keyword} program"
        ex.err(
            "kfunc-not-dev-bound",
            f"`{e.name}` reads the RX descriptor through the driver ({k.name}): only a "
            f"device-bound program may call it, not {where}",
            e.span,
            "declare the program `xdp(dev_bound) fn ...`; it is then loaded for the device "
            "it is attached to (`bpfdsl attach PROG.bpfd --dev IFNAME`)",
        )
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
