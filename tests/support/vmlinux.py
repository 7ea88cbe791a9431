"""The running kernel's own BTF (/sys/kernel/btf/vmlinux), the reference for the numbers
of bpfdsl.abi."""

from __future__ import annotations

import re
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

import pytest

VMLINUX = Path("/sys/kernel/btf/vmlinux")


@lru_cache(maxsize=1)
def kernel_enums() -> dict[str, int]:
    """Every enumerator of the running kernel's BTF (name -> value), from bpftool's C dump;
    skips the calling test without /sys/kernel/btf/vmlinux or bpftool."""
    if not VMLINUX.exists() or shutil.which("bpftool") is None:
        pytest.skip("needs /sys/kernel/btf/vmlinux and bpftool (scripts/test.sh installs it)")
    out = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(VMLINUX), "format", "c"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s+(\w+) = (-?\d+),$", out, re.M)}
