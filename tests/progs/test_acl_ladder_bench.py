"""Smoke test of benchmarks/acl_ladder_bench.py: a --quick run measures both compilers on the
kernel (positive processed-instruction counts, the ratio is ours / clang's) for the scalar
and the struct-key rules, times compile
+ check, and exits 0.  The benchmark proper is run by hand, never inside pytest."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import ROOT


@pytest.mark.kernel
def test_acl_ladder_bench_quick_run(tmp_path):
    out = tmp_path / "acl.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "acl_ladder_bench.py"), "--quick", "--json",
         str(out)],
        capture_output=True, text=True, timeout=600, env=env, cwd=ROOT,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(out.read_text())
    rows = [(row["variant"], row["rules"]) for row in data["ladder"]]
    assert rows == [("scalar", 25), ("scalar", 50), ("struct-key", 25), ("struct-key", 50)]
    for row in data["ladder"]:
        assert row["ours"] > 0 and row["clang"] > 0 and row["clang_v3"] > 0
        assert row["ratio"] == pytest.approx(row["ours"] / row["clang"])
    for k in (0, 2):  # more rules, more work
        assert data["ladder"][k + 1]["ours"] > data["ladder"][k]["ours"]
    assert 0 < data["compile"]["cpu_s"] and 0 < data["compile"]["wall_s"]
    assert "verified_insns" in r.stdout and "compile + check" in r.stdout
