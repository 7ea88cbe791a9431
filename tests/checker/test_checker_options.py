"""CheckOptions, how programs are checked (bpfdsl.checker.check): one frozen record that
the Python API takes as ``options=`` and that ``bpfdsl check``'s flags fill, so both give
one verdict; its margin is refused when the record is made, before any check."""

from __future__ import annotations

import json

import pytest
from support.paths import DATA

from bpfdsl import CheckOptions, check_object
from bpfdsl.cli import main
from bpfdsl.compiler import compile_file
from bpfdsl.obj.collection import read_object

LOOP = DATA / "loop_parse" / "tcp_mss.bpfd"  # a bounded loop: Linux 5.3+


def _errors(res: dict) -> list[tuple[str, str, str, int]]:
    return [
        (p["program"], e["code"], e["message"], e["insn"])
        for p in res["programs"]
        for e in p["errors"]
    ]


@pytest.mark.parametrize(
    ("flags", "options"),
    [
        ([], CheckOptions()),
        (["--kernel", "5.2"], CheckOptions(kernel=(5, 2))),
        (["--unprivileged", "--strict"], CheckOptions(privileged=False, strict=True)),
        (["--margin", "99.99"], CheckOptions(margin=99.99)),
    ],
)
def test_cli_flags_and_python_options_give_one_verdict(flags, options, capsys):
    code = main(["check", str(LOOP), "--json", *flags])
    cli = json.loads(capsys.readouterr().out)
    spec = read_object(compile_file(LOOP, debug=True, check=False).obj)
    py = check_object(spec, options=options).to_json()
    assert (code == 0) is py["ok"] is cli["ok"]
    assert _errors(cli) == _errors(py)


def test_a_target_kernel_without_loops_refuses_the_loop():
    spec = read_object(compile_file(LOOP, debug=True, check=False).obj)
    assert check_object(spec).ok
    (prog,) = check_object(spec, options=CheckOptions(kernel=(5, 2))).programs
    assert [e.code for e in prog.errors] == ["kernel-version"]
    assert "needs Linux 5.3 (target kernel 5.2)" in prog.errors[0].message


@pytest.mark.parametrize("margin", [-1.0, 100.0, 250.0])
def test_a_margin_outside_0_to_100_is_refused_when_the_options_are_made(margin):
    with pytest.raises(ValueError, match=r"is not in 0\.\.100"):
        CheckOptions(margin=margin)


def test_options_are_frozen_so_one_record_serves_every_check():
    opts = CheckOptions(kernel=(6, 1))
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        opts.kernel = None  # type: ignore[misc]
    assert opts == CheckOptions(kernel=(6, 1)) and opts != CheckOptions()
