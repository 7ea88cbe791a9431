"""`bpfdsl compile` of a typical program takes under half a second as a whole process
(interpreter start, imports, compile, check, write), the one start-up goal bpfdsl has.

The time is the process's CPU time (user + system): on a machine shared with other work
(2 cores, several test suites) the wall time also counts the waits for a free CPU, which
say nothing about bpfdsl.  The fastest of a few runs counts."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

from bpfdsl.compiler import compile_file

UDP = ROOT / "progs" / "xdp_udp_filter.bpfd"
GOAL_S = 0.5
RUNS = 5


def _cpu_seconds_of_children() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def test_whole_process_compile_under_half_a_second(tmp_path: Path) -> None:
    out = tmp_path / "u.o"
    cmd = [sys.executable, "-m", "bpfdsl", "compile", str(UDP), "-o", str(out)]
    best = float("inf")
    for _ in range(RUNS):
        out.unlink(missing_ok=True)
        before = _cpu_seconds_of_children()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT)
        best = min(best, _cpu_seconds_of_children() - before)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert out.read_bytes() == compile_file(UDP).obj  # it did compile, and the same object
    assert 0 < best < GOAL_S, f"fastest of {RUNS} runs: {best:.3f} s of CPU"
