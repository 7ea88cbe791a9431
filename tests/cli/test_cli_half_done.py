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
from bpfdsl.abi.commands import BpfCmd
from bpfdsl.kernel import fake


def test_attach_unknown_interface_refused_before_load(capsys) -> None:
    # every bpf() goes to the fake kernel, which records it: no map, program or pin is made
    with fake.installed() as k:
        rc = cli.main(["attach", str(PROGS / "xdp_drop.bpfd"), "--dev", "nosuchdev0"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "error[unknown-interface]: no network interface named 'nosuchdev0'" in err
    made = {BpfCmd.MAP_CREATE, BpfCmd.PROG_LOAD, BpfCmd.BTF_LOAD, BpfCmd.OBJ_PIN}
    assert made.isdisjoint(k.calls), k.calls


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
