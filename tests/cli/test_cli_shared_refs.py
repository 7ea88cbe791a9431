"""The map commands (cpumap, devmap, sockmap, progarray) share one reading of their MAP
and PROG arguments, bpfdsl.cli.objrefs: no CLI module borrows another's private helpers
(progarray_cmd imported redirect_cmds' _open_map/_open_prog)."""

from __future__ import annotations

import ast

from support.paths import ROOT

CLI = ROOT / "bpfdsl" / "cli"


def test_no_cli_module_imports_a_private_name_of_another():
    borrowed = []
    for path in sorted(CLI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bpfdsl"):
                borrowed += [
                    f"{path.name}:{node.lineno}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.endswith("__")
                ]
    assert borrowed == []
