"""One exit-code table for every command (bpfdsl.cli.EXIT_CODES, listed in the README):
0 success, 1 refused, 2 unusable input or usage, 3 the host (privileges, interfaces, bpffs).
With ``--json`` every error -- argparse's usage errors included -- is one JSON document on
stdout, where a ``--json`` reader looks (bpftool's habit), and nothing is on stderr."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import ROOT

from bpfdsl import cli


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = cli.main(list(argv))
    except SystemExit as e:  # argparse's text usage errors (without --json)
        rc = int(e.code or 0)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_table_is_the_readme_s():
    assert sorted(cli.EXIT_CODES) == [0, 1, 2, 3]
    readme = (ROOT / "README.md").read_text()
    for code in cli.EXIT_CODES:
        assert re.search(rf"^\| {code} \|", readme, re.M), f"exit code {code} not in README"


@pytest.mark.parametrize(
    "argv, code, diag",
    [
        (["--json", "attach"], 2, "usage"),  # argparse: a required argument missing
        (["attach", "--json", "--mode", "bogus", "x.o", "lo"], 2, "usage"),
        (["--json", "compile", "/nonexistent/x.bpfd"], 2, None),
        (["--json", "check", "/nonexistent/x.o"], 2, None),
    ],
)
def test_json_errors_are_one_document_on_stdout(capsys, argv, code, diag):
    rc, out, err = _run(capsys, *argv)
    assert rc == code
    assert err == ""
    doc = json.loads(out)
    assert doc["error"] and all(e["severity"] == "error" and e["code"] for e in doc["error"])
    if diag:
        assert doc["error"][0]["code"] == diag


def test_usage_errors_stay_text_without_json(capsys):
    rc, out, err = _run(capsys, "attach")
    assert rc == 2 and out == ""
    assert "usage: bpfdsl attach" in err


@pytest.mark.kernel
def test_a_missing_interface_is_the_host_for_every_command(capsys):
    """Same kind of failure, same code: an interface that does not exist here is exit 3
    for attach and detach alike (it was 1 for one and 2 for a bad path before)."""
    obj = str(ROOT / "progs" / "xdp_drop.bpfd")
    for argv in (["attach", obj, "--dev", "nosuchdev0"], ["detach", "--dev", "nosuchdev0"]):
        rc, out, err = _run(capsys, *argv)
        assert rc == 3, (argv, err)
        assert "error[unknown-interface]" in err
        rc, out, err = _run(capsys, "--json", *argv)
        assert rc == 3 and err == ""
        assert json.loads(out)["error"][0]["code"] == "unknown-interface"
