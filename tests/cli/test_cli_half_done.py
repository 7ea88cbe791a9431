"""A command that fails leaves nothing behind: `attach` to an interface that does not exist
is refused before the object is loaded, so nothing is loaded or pinned (before, the empty
/sys/fs/bpf/bpfdsl root was left behind)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from support.paths import PROGS, ROOT

from bpfdsl import cli


@pytest.mark.kernel
def test_attach_unknown_interface_refused_before_load(monkeypatch, capsys) -> None:
    from bpfdsl.runtime import inventory

    def must_not_load(*a, **k):
        raise AssertionError("open_program called for an unknown interface")

    monkeypatch.setattr(inventory, "open_program", must_not_load)
    assert cli.main(["attach", str(PROGS / "xdp_drop.bpfd"), "--dev", "nosuchdev0"]) == 3
    err = capsys.readouterr().err
    assert "error[unknown-interface]: no network interface named 'nosuchdev0'" in err


@pytest.mark.kernel
def test_attach_unknown_interface_pins_nothing() -> None:
    pin = f"/sys/fs/bpf/test_nosuchdev_{uuid.uuid4().hex[:8]}"
    res = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "attach", str(PROGS / "xdp_drop.bpfd"),
         "--dev", "nosuchdev0", "--pin-dir", pin],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert res.returncode == 3, res.stderr
    assert "error[unknown-interface]: no network interface named 'nosuchdev0'" in res.stderr
    assert res.stdout == ""
    assert not os.path.exists(pin)
