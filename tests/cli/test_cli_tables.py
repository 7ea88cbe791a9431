"""The CLI's tables have one home, bpfdsl/cli/commands.py (issue #26): every command's
line of `bpfdsl --help` is its COMMANDS entry (no module gives a command a help of its
own), and the exit codes are defined there only."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from bpfdsl.cli.commands import COMMANDS, EXIT_CODES, FAILED, HOST, OK, USAGE

CLI = Path(__file__).resolve().parents[2] / "bpfdsl" / "cli"
# a top-level sub-parser added with a literal help: `sub.add_parser("NAME", ..., help="...")`
OWN_HELP = re.compile(r'sub\.add_parser\(\s*"([a-z]+)",(?:[^()]|\([^()]*\))*?\bhelp="', re.S)
EXIT_CODE_DEF = re.compile(r"^(?:OK|FAILED|USAGE|NO_PERMISSION|HOST)\b[\w, ]*=", re.M)


def _modules() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(CLI.glob("*.py")) if p.name != "commands.py"}


def test_every_command_takes_its_help_from_the_table() -> None:
    mods = _modules()
    assert len(mods) > 10
    own = {m: OWN_HELP.findall(t) for m, t in mods.items() if OWN_HELP.search(t)}
    assert own == {}


def test_a_command_with_a_help_of_its_own_is_found() -> None:
    text = (
        'def register(sub):\n    p = sub.add_parser(\n        "load",\n        help="x",\n    )\n'
    )
    assert OWN_HELP.findall(text) == ["load"]


def test_exit_codes_are_defined_in_the_table_only() -> None:
    assert {m: EXIT_CODE_DEF.findall(t) for m, t in _modules().items()} == {
        m: [] for m in _modules()
    }
    assert EXIT_CODE_DEF.findall("OK, FAILED = 0, 1\n") == ["OK, FAILED ="]
    assert (OK, FAILED, USAGE, HOST) == (0, 1, 2, 3) and set(EXIT_CODES) == {0, 1, 2, 3}


def test_bpfdsl_help_lists_every_command_with_its_table_line() -> None:
    r = subprocess.run([sys.executable, "-m", "bpfdsl", "--help"], capture_output=True,
                       text=True, timeout=60, env={**os.environ, "COLUMNS": "400"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    for name, cmd in COMMANDS.items():
        if name == "skmsg":  # an alias of sockmap, shown as "sockmap (skmsg)"
            continue
        shown = "sockmap \\(skmsg\\)" if name == "sockmap" else name
        assert re.search(rf"^\s+{shown}\s+{re.escape(cmd.help)}$", r.stdout, re.M), name
