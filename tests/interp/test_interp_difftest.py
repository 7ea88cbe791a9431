"""A fixed small slice of scripts/difftest_interp.py runs in CI: every progs/ program the
kernel can test-run gives the same retval, output bytes and map contents on the
interpreter as on BPF_PROG_TEST_RUN, over capture frames, truncated and random frames."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
from support.paths import ROOT

SCRIPT = ROOT / "scripts" / "difftest_interp.py"


def _script():
    spec = importlib.util.spec_from_file_location("difftest_interp", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.kernel
def test_interp_matches_kernel_on_progs_slice() -> None:
    d = _script()
    objs = d.objects(with_c=False, only=None)
    if not objs:
        pytest.skip("no progs/*.bpfd compile yet")
    frames = d.pcap_frames(120) if d.PCAPS.is_dir() else []
    packets = frames + d.truncated(frames, 40, 3) + d.random_frames(150, 3)
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})  # per-CPU maps: both engines count on one CPU
    try:
        report = d.Report()
        for label, obj in objs:
            d.difftest(label, obj, packets, report, maps_every=25)
    finally:
        os.sched_setaffinity(0, old)
    assert report.runs >= len(objs) * 200
    assert report.map_checks > 0
    assert report.mismatches == []


@pytest.mark.kernel
def test_interp_matches_kernel_on_random_alu_programs() -> None:
    """Random scalar programs (every ALU op, signed div/mod, movsx, bswap, JMP/JMP32):
    the interpreter's r0 equals the kernel's, both halves."""
    d = _script()
    report = d.Report()
    d.alu_fuzz(120, 11, report)
    assert report.mismatches == []
    assert report.runs == 120
