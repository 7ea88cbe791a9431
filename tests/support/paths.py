"""Paths of the repository the tests read: the tree's root, progs/, tests/data/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PROGS = ROOT / "progs"
DATA = ROOT / "tests" / "data"
PCAPS = ROOT / "tests" / "data" / "pcaps"  # tcpdump test corpus (BSD, see its README)
