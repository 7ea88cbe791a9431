"""`bpfdsl compile` of a typical program takes under half a second as a whole process
(interpreter start, imports, compile, check, write), the one start-up goal bpfdsl has."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from bpfdsl.compiler import compile_file

ROOT = Path(__file__).resolve().parent.parent
UDP = ROOT / "progs" / "xdp_udp_filter.bpfd"
GOAL_S = 0.5
RUNS = 7  # the fastest run counts: other processes on the machine only ever add time


def test_whole_process_compile_under_half_a_second(tmp_path: Path) -> None:
    out = tmp_path / "u.o"
    cmd = [sys.executable, "-m", "bpfdsl", "compile", str(UDP), "-o", str(out)]
    best = float("inf")
    for _ in range(RUNS):
        out.unlink(missing_ok=True)
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
        best = min(best, time.perf_counter() - start)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes() == compile_file(UDP).obj  # it did compile, and the same object
    assert best < GOAL_S, f"fastest of {RUNS} runs: {best:.3f} s"
