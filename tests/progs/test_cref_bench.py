"""Smoke tests of the benchmark scripts in benchmarks/: argument parsing and one tiny run each.

The tiny runs check what a reader of the tables relies on: the numbers are measured (a
straight-line program's verifier count equals its length, frames were counted, messages
were redirected and skipped TCP), and nothing is left behind (namespaces, pins, cgroups).
The benchmarks proper are run by hand (see benchmarks/*.py docstrings), never inside pytest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

BENCH = ROOT / "benchmarks"
SCRIPTS = ("compile_bench", "load_bench", "xdp_bench", "skmsg_bench")


def run_script(name: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run benchmarks/NAME.py; ``timeout`` guards against a hang only (the first run of a bench
    installs the tree into the bench venv: ~30 s idle, minutes on 2 loaded cores)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def leftovers() -> set[str]:
    """Benchmark namespaces, pins and cgroups currently present."""
    found = set()
    netns = Path("/run/netns")
    if netns.is_dir():
        mine_ns = ("bpfb-", "bpfdsl-bench-")  # load_bench's, `bpfdsl bench`'s
        found |= {f"netns:{p.name}" for p in netns.iterdir() if p.name.startswith(mine_ns)}
    bpffs = Path("/sys/fs/bpf")
    if bpffs.is_dir():
        mine = ("bpfdsl_bench_", "bpfdsl_lbench_", "bpfdsl_cbench_")  # the scripts' prefixes
        found |= {f"pin:{p.name}" for p in bpffs.iterdir() if p.name.startswith(mine)}
    cg = Path("/sys/fs/cgroup")
    if cg.is_dir():
        found |= {f"cg:{p.name}" for p in cg.iterdir() if p.name.startswith("bpfdsl-bench")}
    return found


def need_tools(*tools: str) -> None:
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} not installed")


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name: str) -> None:
    proc = run_script(name, "--help", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "--quick" in proc.stdout and "--json" in proc.stdout


@pytest.mark.parametrize(
    "name,args",
    [
        ("compile_bench", ["--runs", "0"]),
        ("compile_bench", ["--programs", "no_such_program"]),
        ("load_bench", ["--program", "no_such_program"]),
        ("xdp_bench", ["--scenarios", "warp"]),
        ("xdp_bench", ["--duration", "0"]),
        ("skmsg_bench", ["--sizes", "sixty"]),
        ("skmsg_bench", ["--millis", "0"]),
    ],
)
def test_bad_arguments(name: str, args: list[str]) -> None:
    """Bad arguments: argparse usage error (exit 2), no traceback."""
    proc = run_script(name, *args, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "error:" in proc.stderr


def test_compile_bench_clang_only(tmp_path: Path) -> None:
    """Without the kernel column: the table has the clang program and its insn count."""
    need_tools("clang-19")
    out = tmp_path / "r.json"
    proc = run_script(
        "compile_bench",
        "--no-kernel",
        "--programs",
        "xdp_drop",
        "--runs",
        "1",
        "--inproc-runs",
        "1",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    (row,) = res["programs"]
    assert row["section"] == "xdp" and row["insns_clang"] >= 2
    assert res["files"][0]["clang_ms"] > 0
    assert "goal" in proc.stdout


@pytest.mark.kernel
def test_compile_bench_processed_insns(tmp_path: Path) -> None:
    """A straight-line program: the kernel processes each instruction once."""
    need_tools("clang-19", "bpftool")
    out = tmp_path / "r.json"
    proc = run_script(
        "compile_bench",
        "--programs",
        "xdp_drop,xdp_pass",
        "--runs",
        "1",
        "--inproc-runs",
        "1",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    assert len(res["programs"]) == 2
    for row in res["programs"]:
        assert row["processed_clang"] == row["insns_clang"]
        if row["insns_ours"] is not None:
            assert row["processed_ours"] is not None


@pytest.mark.kernel
def test_load_bench_tiny(tmp_path: Path) -> None:
    need_tools("clang-19", "bpftool", "nsenter", "ip")
    before = leftovers()
    out = tmp_path / "r.json"
    proc = run_script("load_bench", "--runs", "1", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    clang = [r for r in rows if r["object"] == "clang"]
    assert clang and clang[0]["bpftool_total_ms"] > 0
    assert leftovers() <= before


@pytest.mark.kernel
def test_xdp_bench_tiny(tmp_path: Path) -> None:
    """The live-frame generator reaches the program under test (frames are counted)."""
    need_tools("clang-19", "bpftool", "nsenter", "ip")
    before = leftovers()
    out = tmp_path / "r.json"
    proc = run_script(
        "xdp_bench",
        "--scenarios",
        "drop",
        "--runs",
        "1",
        "--duration",
        "0.2",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    (pps,) = res["scenarios"]["drop"]["clang"]
    assert pps > 0
    assert leftovers() <= before


@pytest.mark.kernel
def test_skmsg_bench_tiny(tmp_path: Path) -> None:
    """Messages redirected by the clang program skip TCP (no segments per message)."""
    need_tools("clang-19", "bpftool", "nsenter", "ip", "gcc")
    before = leftovers()
    out = tmp_path / "r.json"
    proc = run_script(
        "skmsg_bench",
        "--sizes",
        "64,4k",
        "--runs",
        "1",
        "--millis",
        "30",
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    res = json.loads(out.read_text())
    data = res["data"]
    redirecting = [m for m in data if m != "plain"]  # clang, and bpfdsl once it compiles
    assert "clang" in redirecting
    for mode in redirecting:
        for size in ("64", "4096"):  # JSON keys
            assert data["plain"][size]["tput"][0] > 0
            assert data[mode][size]["tput"][0] > 0
            assert data[mode][size]["segs"][0] < data["plain"][size]["segs"][0]
        # 4 KiB messages over TCP on lo (MSS ~64 KiB): at least one segment per 16 messages
        assert data[mode]["4096"]["segs"][0] < 0.01
    assert data["plain"]["4096"]["segs"][0] >= 0.05
    assert leftovers() <= before


@pytest.mark.kernel
def test_userspace_bench_quick_gives_the_same_records_and_verdicts_as_c():
    """benchmarks/userspace_bench.py --quick: bpfdsl's events --json and run --pcap -q against
    the libbpf C references built in the same run; what is asserted is the behaviour (the
    same records, the same verdict totals), never a time."""
    if shutil.which("cc") is None or not Path("/usr/include/bpf/libbpf.h").exists():
        pytest.skip("needs cc and libbpf-dev")
    out = Path(os.environ.get("TMPDIR", "/tmp")) / f"ub-{os.getpid()}.json"
    try:
        r = run_script("userspace_bench", "--quick", "--json", str(out), timeout=300)
        assert r.returncode == 0, r.stderr
        data = json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)
    assert data["events"]["same"] is True and data["run"]["same"] is True
    assert "events --json" in r.stdout and "run --pcap -q" in r.stdout
