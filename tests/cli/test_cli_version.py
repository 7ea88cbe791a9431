"""``bpfdsl --version``: the version, and which checker runs (compiled by mypyc, or Python
with the reason: a stale build falls back silently otherwise), and which loops ``run
--pcap`` uses (the C test-run loop and capture walk when built, issue #25)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec

from support.paths import ROOT

from bpfdsl import __version__
from bpfdsl.checker import native
from bpfdsl.kernel import syscall
from bpfdsl.runtime import pcapfile, xsk


def _version(**env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", "--version"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_version_names_the_checker_in_use():
    r = _version()
    assert r.returncode == 0 and r.stderr == ""
    want = "compiled by mypyc" if native.NATIVE else f"Python ({native.REASON})"
    arrays = "numpy arrays" if find_spec("numpy") else "no numpy arrays (pip install numpy)"
    walk = "C" if pcapfile.PCAP_WALK_C else "Python"
    assert r.stdout == (
        f"bpfdsl {__version__}\nchecker: {want}\nevent batches: Python, {arrays}\n"
        f"test runs: {syscall.TESTRUN_LOOP}, capture walk: {walk}\n"
        f"AF_XDP l2fwd step: {'C' if xsk.L2FWD_C else 'Python'}\n"
    )


def test_version_with_the_pure_python_checker_forced():
    r = _version(BPFDSL_PURE_PYTHON="1")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        f"bpfdsl {__version__}",
        "checker: Python (BPFDSL_PURE_PYTHON=1)",
        r.stdout.splitlines()[2],
        "test runs: Python (BPFDSL_PURE_PYTHON=1), capture walk: Python",
        "AF_XDP l2fwd step: Python",
    ]
    assert r.stdout.splitlines()[2].startswith("event batches: Python, ")


def test_version_names_the_test_run_loop_of_this_tree():
    """Without BPFDSL_PURE_PYTHON: the C loop exactly when its extension is built here."""
    env = {k: v for k, v in os.environ.items() if k != "BPFDSL_PURE_PYTHON"}
    r = subprocess.run([sys.executable, "-m", "bpfdsl", "--version"], capture_output=True,
                       text=True, timeout=60, cwd=ROOT, env=env)  # fmt: skip
    built = find_spec("bpfdsl.kernel._testrun") is not None
    walk = find_spec("bpfdsl.runtime._pcapwalk") is not None
    loop = "C (bpfdsl/kernel/_testrun.c)" if built else "Python (not compiled"
    assert r.stdout.splitlines()[-2].startswith(f"test runs: {loop}")
    assert r.stdout.splitlines()[-2].endswith(f"capture walk: {'C' if walk else 'Python'}")
    step = "C" if find_spec("bpfdsl.runtime._xsk") is not None else "Python"
    assert r.stdout.splitlines()[-1] == f"AF_XDP l2fwd step: {step}"
