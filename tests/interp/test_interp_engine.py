"""The interpreter as a ``bpfdsl run`` engine: same RunResult shape as the kernel engine,
runs the kinds the kernel refuses, skips frames it cannot model, and ``bpfdsl run
--engine interp`` works without root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.runtime.testrun import PacketSkipped, RunResult, open_engine

UDP_9999 = bytes.fromhex(
    "ffffffffffff000000000001080045000024000100004011"
    "7cc27f0000017f0000013039270f0010000061626364656667"
)


def _spec():
    from bpfdsl.compiler import compile_file
    from bpfdsl.obj.collection import read_object

    src = ROOT / "progs" / "xdp_udp_filter.bpfd"
    if not src.exists():
        pytest.skip("progs/xdp_udp_filter.bpfd not written yet")
    return read_object(compile_file(str(src)).obj)


def test_interp_engine_runs_like_kernel_engine() -> None:
    eng = open_engine("interp", _spec(), config={"port": 9999})
    try:
        r = eng.run("udp_filter", UDP_9999, repeat=3)
        assert isinstance(r, RunResult)
        assert (r.retval, r.data_out) == (1, UDP_9999)
        assert r.duration_ns > 0
        drops = eng.collection.maps["drops"].get(0)
        assert sum(int.from_bytes(v, "little") for v in drops) == 3  # repeat runs count
        big = eng.run("udp_filter", UDP_9999[:-8] + bytes(4000))  # linear part + frags
        assert len(big.data_out) == len(UDP_9999) - 8 + 4000
        with pytest.raises(PacketSkipped, match="at least 14 bytes"):
            eng.run("udp_filter", bytes(13))
    finally:
        eng.close()


def test_interp_cli_run_without_kernel(tmp_path: Path) -> None:
    src = ROOT / "progs" / "xdp_udp_filter.bpfd"
    if not src.exists():
        pytest.skip("progs/xdp_udp_filter.bpfd not written yet")
    cmd = [
        sys.executable,
        "-m",
        "bpfdsl",
        "run",
        str(src),
        "--engine",
        "interp",
        "--hex",
        UDP_9999.hex(),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "XDP_DROP" in out.stdout and "(interp)" in out.stdout
