"""``bpfdsl --version``: the version, and which checker runs (compiled by mypyc, or Python
with the reason: a stale build falls back silently otherwise)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec

from support.paths import ROOT

from bpfdsl import __version__
from bpfdsl.checker import native


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
    assert r.stdout == f"bpfdsl {__version__}\nchecker: {want}\nevent batches: Python, {arrays}\n"


def test_version_with_the_pure_python_checker_forced():
    r = _version(BPFDSL_PURE_PYTHON="1")
    assert r.returncode == 0
    assert r.stdout.splitlines() == [
        f"bpfdsl {__version__}",
        "checker: Python (BPFDSL_PURE_PYTHON=1)",
        r.stdout.splitlines()[2],
    ]
    assert r.stdout.splitlines()[2].startswith("event batches: Python, ")
