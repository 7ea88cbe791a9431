"""A program's libxdp run config: ``xdp(priority: 10, chain_call: XDP_PASS | XDP_DROP) fn``.

The options in a program kind's parentheses say where the program sits in a libxdp
dispatcher chain (xdp-loader, libxdp, bpfman); the back end writes them as libxdp's
``XDP_RUN_CONFIG`` BTF struct (:mod:`bpfdsl.abi.btf.run_config`).  Only programs that
attach to an interface take them: ``xdp`` and ``xdp(frags)``.
"""

from __future__ import annotations

from bpfdsl.abi.btf.run_config import ACTION_MEMBERS, DEFAULT_CHAIN_CALL_ACTIONS, RunConfig
from bpfdsl.abi.map_types import BTF_MAX_ENTRIES
from bpfdsl.abi.prog_types import ProgramKind
from bpfdsl.lang import ast
from bpfdsl.lang.sema.symbols import SemaHost, const_int_arg

# ``sema``: the analyzer.Sema checking the program (typed by its protocol, symbols.SemaHost:
# the analyzer imports this module); used for ``err`` and the constant folding of const_int

RUN_CONFIG_OPTIONS = ("priority", "chain_call")
CHAINABLE_KINDS = ("xdp", "xdp(frags)")  # what a dispatcher on an interface runs


def check_run_config(sema: SemaHost, p: ast.ProgDecl, kind: ProgramKind) -> RunConfig | None:
    """The run config ``p`` declares, or None when it declares none or after an error
    (reported through ``sema.err`` at the option).  ``priority``: a compile-time integer
    from 0 to 2**30 - 1 (libxdp reads it as a BTF array length, which the kernel bounds);
    ``chain_call``: XDP action names joined by ``|``, or ``none``."""
    if not p.run_config:
        return None
    spans = p.run_config_spans
    if kind.keyword not in CHAINABLE_KINDS:
        first = next(iter(spans))
        sema.err(
            "run-config",
            f"a {kind.keyword} program is not run by a dispatcher: `{first}` has no meaning",
            spans[first],
            "`priority` and `chain_call` are for programs attached to an interface "
            "(`xdp` or `xdp(frags)`)",
        )
        return None
    ok = True
    for name in p.run_config:
        if name not in RUN_CONFIG_OPTIONS:
            sema.err(
                "run-config",
                f"unknown program option `{name}`",
                spans[name],
                "the options are `priority: N` (lower runs first in a libxdp dispatcher) "
                "and `chain_call: XDP_PASS | ...` (the actions that go on to the next program)",
            )
            ok = False
    prio = 50
    if "priority" in p.run_config:
        e = p.run_config["priority"]
        n = const_int_arg(sema, e, "run-config", "priority", "priority: 10")
        if n is None:
            ok = False
        elif not 0 <= n <= BTF_MAX_ENTRIES:
            sema.err("run-config", f"priority must be from 0 to {BTF_MAX_ENTRIES}, not {n}",
                     e.span, "libxdp's default is 50; lower runs first")  # fmt: skip
            ok = False
        else:
            prio = n
    chain: tuple[str, ...] = DEFAULT_CHAIN_CALL_ACTIONS
    if "chain_call" in p.run_config:
        got = _actions(sema, p.run_config["chain_call"])
        if got is None:
            ok = False
        else:
            chain = tuple(a for a in ACTION_MEMBERS if a in got)
    return RunConfig(prio, chain) if ok else None


def _actions(sema: SemaHost, e: ast.Expr) -> set[str] | None:
    """The action names of ``XDP_PASS | XDP_DROP`` (or ``none``): the names, not their
    values, since ``XDP_DROP | XDP_PASS`` as a number would be XDP_TX."""
    if isinstance(e, ast.Name) and e.id == "none":
        return set()
    if isinstance(e, ast.BinOp) and e.op == "|":
        left, right = _actions(sema, e.left), _actions(sema, e.right)
        if left is None or right is None:
            return None
        return left | right
    if isinstance(e, ast.Name) and e.id in ACTION_MEMBERS:
        return {e.id}
    sema.err(
        "run-config",
        "chain_call takes XDP action names joined by `|`",
        e.span,
        "e.g. `chain_call: XDP_PASS | XDP_DROP` (the dispatcher calls the next program "
        "when this one returns one of them), or `chain_call: none`",
    )
    return None
