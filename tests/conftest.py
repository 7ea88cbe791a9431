"""Shared test fixtures.  Kernel tests use ``@pytest.mark.kernel`` (bpfdsl.testing.pytest_plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGS = ROOT / "progs"
DATA = ROOT / "tests" / "data"
PCAPS = ROOT / "tests" / "data" / "pcaps"  # tcpdump test corpus (BSD, see its README)


@pytest.fixture
def root() -> Path:
    return ROOT
