"""``bpfdsl demo`` end to end: it filters real traffic and leaves nothing behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support.paths import ROOT

from bpfdsl.kernel import netlink


def _ours() -> tuple[set[str], set[str]]:
    """bpfdsl demo namespaces and veths that exist now."""
    ns = (
        {n for n in os.listdir(netlink.NETNS_RUN_DIR) if n.startswith("bpfdsl-demo-")}
        if os.path.isdir(netlink.NETNS_RUN_DIR)
        else set()
    )
    devs = {n for n in netlink.interface_names() if n.startswith("bdo")}
    return ns, devs


@pytest.mark.kernel
def test_demo_drops_blocked_port_and_cleans_up():
    before = _ours()
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "demo", "--packets", "15"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    blocked, other = out["ports"][str(out["blocked_port"])], out["ports"]["10000"]
    assert blocked == {"sent": 15, "arrived": 0}
    assert other == {"sent": 15, "arrived": 15}
    assert out["maps"]["drops"] == [[0, 15]]  # the program's own counters, summed over CPUs
    assert out["maps"]["passes"] == [[0, 15]]
    assert out["mode"] == "native"
    after = _ours()
    assert after[0] <= before[0] and after[1] <= before[1]  # its namespace and veth are gone


@pytest.mark.kernel
def test_demo_text_output_and_sigterm_cleanup():
    before = _ours()
    p = subprocess.Popen(
        [sys.executable, "-m", "bpfdsl", "demo", "--packets", "10000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _ours()[0] <= before[0] and p.poll() is None:
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    after = _ours()
    assert after[0] <= before[0] and after[1] <= before[1]


def test_demo_needs_root_says_so_in_one_line(monkeypatch, capsys):
    from bpfdsl.runtime import demo

    monkeypatch.setattr(demo.os, "geteuid", lambda: 1000)
    assert demo.main() == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs root" in err
