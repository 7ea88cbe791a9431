"""Shared test fixtures.  Kernel tests use ``@pytest.mark.kernel`` (bpfdsl.testing.pytest_plugin)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.paths import ROOT


@pytest.fixture
def root() -> Path:
    return ROOT
