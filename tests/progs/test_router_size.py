"""progs/xdp_router.bpfd is no larger than its C twin (tests/data/c/xdp_router.c, clang-19 -O2,
the flags of tests/data/c/build.sh): instructions in 8-byte slots as the kernel counts them,
and instructions the kernel verifier processes loading each (BPF_LOG_STATS' "processed N
insns").  The issue's goal (#17): <= 1.0x on both; benchmarks/compile_bench.py prints the same
figures for every reference program."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import DATA, ROOT

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import load_collection

PROCESSED = re.compile(r"processed (\d+) insns")


def _clang_object(tmp_path: Path) -> Path:
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    machine = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True)
    arch = machine.stdout.strip() or "x86_64-linux-gnu"
    out = tmp_path / "xdp_router.o"
    src = DATA / "c" / "xdp_router.c"
    cmd = ["clang-19", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}", "-c", str(src)]
    subprocess.run([*cmd, "-o", str(out)], check=True, capture_output=True, timeout=120)
    return out


def _ours(tmp_path: Path) -> Path:
    src = ROOT / "progs" / "xdp_router.bpfd"
    out = tmp_path / "ours.o"
    out.write_bytes(compile_source(src.read_text(), "xdp_router.bpfd").obj)
    return out


def _slots(obj: Path) -> int:
    (prog,) = read_object(obj).programs.values()
    return sum(i.width for i in prog.insns)


def test_router_is_no_larger_than_clangs(tmp_path):
    assert _slots(_ours(tmp_path)) <= _slots(_clang_object(tmp_path))


@pytest.mark.kernel
def test_router_verifies_in_no_more_insns_than_clangs(tmp_path):
    def processed(obj: Path) -> int:
        with load_collection(read_object(obj), log_level=1 | 4) as coll:
            (prog,) = coll.programs.values()
            m = PROCESSED.search(prog.log)
            assert m, prog.log[-500:]
            return int(m.group(1))

    assert processed(_ours(tmp_path)) <= processed(_clang_object(tmp_path))
