"""A generated program at ISA v1 (tests/fuzz/reproducers/checker_slow_v1.bpfd, found by
tests/fuzz/programs.py: the old checker walked it for ~45 s at --mcpu v1, past the fuzz
campaign's case timeout).  With the kernel's exploration the checker walks this v1 object
as the kernel does: accepted, in the kernel's processed count (Linux 6.18: 104,375; the
kernel's own count is compared live when the test can load programs).  How long either
takes is benchmarks/checker_bench.py's business, not this test's.
"""

from __future__ import annotations

import functools
import re

import pytest
from support.paths import ROOT

from bpfdsl.abi.opcodes import BPF_JLE, BPF_JLT, BPF_JMP, BPF_JSLE, BPF_JSLT
from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

SRC = ROOT / "tests" / "fuzz" / "reproducers" / "checker_slow_v1.bpfd"
KERNEL_618_V1 = 103_330  # "processed N insns" of Linux 6.18 for this object (--mcpu v1)


@functools.cache
def _spec():
    return read_object(compile_source(SRC.read_text(), SRC.name, mcpu="v1", check=False).obj)


@functools.cache
def _checked():
    (prog,) = check_object(_spec()).programs
    return prog


def _within_one_percent(ours: int, kernel: int) -> bool:
    return abs(ours - kernel) <= kernel // 100


def test_the_object_is_v1() -> None:
    """The code under test is v1's: no jmp32 (v3) and no "less than" jumps (v2), so every
    bound is a 64-bit greater-than compare with its branches the other way round."""
    (prog,) = _spec().programs.values()
    jumps = [x for x in prog.insns if x.is_cond_jump]
    assert jumps
    assert all(x.cls == BPF_JMP for x in jumps)
    v2 = (BPF_JLT, BPF_JLE, BPF_JSLT, BPF_JSLE)
    assert not [x for x in jumps if x.op in v2]


def test_accepted_in_the_kernels_count() -> None:
    prog = _checked()
    assert prog.status == "ok", [e.message for e in prog.errors]
    assert _within_one_percent(prog.insns_processed, KERNEL_618_V1), prog.insns_processed


@pytest.mark.kernel
def test_kernel_accepts_it_in_the_checkers_count() -> None:
    from bpfdsl.runtime.loader import load_collection

    with load_collection(_spec(), log_level=1 | 4, log_size=1 << 22) as coll:
        log = next(iter(coll.programs.values())).log  # loaded: the kernel accepted it
    m = re.search(r"processed (\d+) insns", log)
    assert m, log[-400:]
    kernel = int(m.group(1))
    assert _within_one_percent(_checked().insns_processed, kernel), (kernel, log[-300:])
