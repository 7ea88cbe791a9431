"""`bpfdsl compile --time-report` and CompileResult.timings: stage times a user can act on."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT

from bpfdsl.compiler import compile_source

UDP = ROOT / "progs" / "xdp_udp_filter.bpfd"


def test_timings_cover_every_stage_in_order() -> None:
    res = compile_source(UDP.read_text(), str(UDP))
    assert list(res.timings) == ["front", "codegen", "llvm", "check", "total"]
    stages = [v for k, v in res.timings.items() if k != "total"]
    assert all(v > 0 for v in stages)
    assert abs(sum(stages) - res.timings["total"]) < 0.01 * res.timings["total"] + 0.01


def test_no_check_has_no_check_stage() -> None:
    res = compile_source(UDP.read_text(), str(UDP), check=False)
    assert "check" not in res.timings and res.timings["llvm"] > 0


def test_cli_time_report(tmp_path: Path) -> None:
    out = tmp_path / "u.o"
    cmd = [sys.executable, "-m", "bpfdsl", "compile", str(UDP), "-o", str(out), "--time-report"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"time \(ms\): front ([\d.]+)  codegen ([\d.]+)  llvm ([\d.]+)  check ([\d.]+)"
                  r"  total ([\d.]+)", proc.stderr)  # fmt: skip
    assert m, proc.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_cli_time_report_json(tmp_path: Path) -> None:
    """With --json the timings are in the JSON document, not text on stderr."""
    import json

    out = tmp_path / "u.o"
    cmd = [sys.executable, "-m", "bpfdsl", "--json", "compile", str(UDP), "-o", str(out)]
    proc = subprocess.run([*cmd, "--time-report"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc["timings_ms"]) == {"front", "codegen", "llvm", "check", "total"}
    assert "time (ms)" not in proc.stderr
