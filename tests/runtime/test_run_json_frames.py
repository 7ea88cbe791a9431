"""``bpfdsl run --json`` gives each frame's output bytes (``data_out``, hex, what ``--hex``
takes back), the same on the kernel and the interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import PROGS, ROOT

from bpfdsl.runtime.packets import udp_frame


def _run(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
def test_data_out_is_the_reflected_frame(engine):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    sent = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=1234,
        dport=7,
    )
    out = _run(str(PROGS / "xdp_reflect.bpfd"), "--hex", sent.hex(), "--engine", engine)
    (p,) = out["packets"]
    assert p["verdict"] == "XDP_TX"
    got = Ether(bytes.fromhex(p["data_out"]))
    assert len(bytes.fromhex(p["data_out"])) == p["length_out"] == len(sent)
    assert (got.src, got.dst) == ("02:00:00:00:00:02", "02:00:00:00:00:01")
    assert (got[IP].src, got[IP].dst) == ("10.0.0.2", "10.0.0.1")
    assert (got[UDP].sport, got[UDP].dport) == (7, 1234)


@pytest.mark.kernel
def test_data_out_is_null_for_a_frame_not_run():
    """A 13-byte frame (the kernel runs XDP on 14 and more): skipped, no output bytes, and
    exit 1 (no packet was run)."""
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "run", str(PROGS / "xdp_pass.bpfd")]
        + ["--hex", "00" * 13],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 1
    (p,) = json.loads(r.stdout)["packets"]
    assert p["retval"] is None and p["data_out"] is None and "14 bytes" in p["skipped"]
