"""``bpfdsl run --engine auto`` (the default): the kernel where it can test-run the program,
the interpreter otherwise, and the output says which one ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import PROGS, ROOT

from bpfdsl.runtime.packets import udp_frame

FRAME = udp_frame(
    src_mac="02:00:00:00:00:01",
    dst_mac="02:00:00:00:00:02",
    src_ip="10.0.0.1",
    dst_ip="10.0.0.2",
    sport=1234,
    dport=9999,
).hex()


def run(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "bpfdsl", "-j", "run", *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd="/", env=env)


@pytest.mark.kernel
def test_auto_uses_kernel_for_xdp():
    r = run(str(PROGS / "xdp_udp_filter.bpfd"), "--hex", FRAME)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["engine"] == "kernel" and out["totals"] == {"XDP_DROP": 1}


def test_auto_uses_interp_where_the_kernel_cannot_test_run():
    # BPF_PROG_TEST_RUN refuses xdp(cpumap) programs: the interpreter runs it and says so.
    r = run(str(PROGS / "xdp_cpumap_steer.bpfd"), "--prog", "on_cpu", "--hex", FRAME)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["engine"] == "interp"
    assert "engine: interp (BPF_PROG_TEST_RUN refuses xdp(cpumap) programs)" in r.stderr


def test_auto_falls_back_to_interp_without_bpf(capsys):
    # As a user without CAP_BPF (the fake kernel refuses every bpf() with EPERM, as the
    # kernel does with unprivileged_bpf_disabled): the probe gives the reason, the
    # interpreter runs.
    from bpfdsl import cli
    from bpfdsl.kernel import fake

    with fake.installed(fake.FakeKernel(privileged=False)) as k:
        rc = cli.main(["-j", "run", str(PROGS / "xdp_udp_filter.bpfd"), "--hex", FRAME])
    out, err = capsys.readouterr()
    assert rc == 0, err
    res = json.loads(out)
    assert res["engine"] == "interp" and res["totals"] == {"XDP_DROP": 1}
    assert "engine: interp (bpf() not permitted: needs root (CAP_BPF + CAP_NET_ADMIN))" in err
    assert k.calls  # the probe asked (the fake), and was refused
