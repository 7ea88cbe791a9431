"""A test run of a plain XDP program (not ``xdp(frags)``) on a frame longer than 3520 bytes
(4096 - 256 headroom - 320 skb_shared_info: bpf_prog_test_run_xdp's linear part,
net/bpf/test_run.c) gives the program only the linear part: the rest is in page frags it
cannot read.  The kernel does it without a word; `bpfdsl run`, ``iter_packets`` and the
pytest plugin's ``BpfProgram.run`` must say so, naming the frames, and only then."""

from __future__ import annotations

import struct
import warnings
from pathlib import Path

import pytest

from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.spec import choose_program
from bpfdsl.runtime.testrun import (
    InterpEngine,
    KernelEngine,
    LinearOnlyWarning,
    iter_packets,
)
from bpfdsl.testing.pytest_plugin import BpfProgram

SRC = """license "GPL"
map seen: array<u64>(max_entries: 1)

KIND fn look(ctx) {
    seen[0] = ctx.len as u64
    if ctx.len > 3000 { return XDP_DROP }
    return XDP_PASS
}
"""
LENGTHS = [100, 4000, 3520, 9000, 200]  # frames #2 and #4 are longer than the linear part


def _spec(kind: str):
    return read_object(compile_source(SRC.replace("KIND", kind), "look.bpfd").obj)


def _frame(n: int) -> bytes:
    return b"\x02" * 12 + b"\x08\x00" + bytes(n - 14)


def _pcap(path: Path) -> None:
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, n in enumerate(LENGTHS):
            out.write(struct.pack("<IIII", 0, i, n, n) + _frame(n))


@pytest.mark.kernel
@pytest.mark.parametrize("engine", [KernelEngine, InterpEngine], ids=["kernel", "interp"])
def test_a_plain_program_sees_only_the_linear_part(engine):
    """What the warning says is what happens: ctx.len of a 4000-byte frame is 3520 for a
    plain program (an xdp(frags) program's ctx.len is its linear part too, but it can read
    the rest with xdp_load_bytes)."""
    e = engine(_spec("xdp"))
    try:
        for n, seen in ((4000, 3520), (3520, 3520), (9000, 3520), (200, 200)):
            r = e.run("look", _frame(n))
            assert e.snapshot_maps()["seen"][bytes(4)] == struct.pack("<Q", seen)
            assert r.data_out == _frame(n)  # the frags come back all the same
    finally:
        e.close()


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
@pytest.mark.parametrize("quiet", [True, False], ids=["quiet", "described"])
def test_run_warns_naming_the_truncated_frames(tmp_path, capsys, engine, quiet):
    src = tmp_path / "look.bpfd"
    src.write_text(SRC.replace("KIND", "xdp"))
    cap = tmp_path / "f.pcap"
    _pcap(cap)
    args = ["run", str(src), "--pcap", str(cap), "--engine", engine] + ["-q"] * quiet
    assert main(args) == 0
    out, err = capsys.readouterr()
    lines = [ln for ln in err.splitlines() if "xdp(frags)" in ln]
    assert len(lines) == 1  # one warning for the run, not one per frame
    assert lines[0].startswith("warning: ")
    assert "2 frames (#2, #4)" in lines[0] and "3520" in lines[0]
    assert out.strip().splitlines()[-1].endswith("XDP_DROP 3, XDP_PASS 2")


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
def test_run_of_a_frags_program_or_short_frames_says_nothing(tmp_path, capsys, engine):
    cap = tmp_path / "f.pcap"
    _pcap(cap)
    for kind, extra in (("xdp(frags)", []), ("xdp", ["--limit", "1"])):
        src = tmp_path / "look.bpfd"
        src.write_text(SRC.replace("KIND", kind))
        assert main(["run", str(src), "--pcap", str(cap), "--engine", engine, *extra]) == 0
        assert "xdp(frags)" not in capsys.readouterr().err


@pytest.mark.kernel
@pytest.mark.parametrize("describe", [True, False])
def test_iter_packets_warns_once_when_the_iteration_ends(describe):
    spec = _spec("xdp")
    name, kind = choose_program(spec, None)
    e = KernelEngine(spec)
    try:
        frames = [(i + 1, _frame(n)) for i, n in enumerate(LENGTHS)]
        with pytest.warns(LinearOnlyWarning) as got:
            verdicts = [r.verdict for r in iter_packets(e, name, kind, frames, describe=describe)]
        assert verdicts == ["XDP_PASS", "XDP_DROP", "XDP_DROP", "XDP_DROP", "XDP_PASS"]
        assert len(got) == 1 and "2 frames (#2, #4)" in str(got[0].message)
        gen = iter_packets(e, name, kind, frames, describe=describe)
        with pytest.warns(LinearOnlyWarning, match="frame #2 is"):
            next(gen), next(gen)
            gen.close()  # stopped early: the frames run so far
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            list(iter_packets(e, name, kind, frames[:1] + frames[2:3], describe=describe))
    finally:
        e.close()


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["interp", "kernel"])
def test_plugin_run_warns_on_a_long_frame_for_a_plain_program(engine):
    for kind, warns in (("xdp", True), ("xdp(frags)", False)):
        prog = BpfProgram(engine, _spec(kind), None, None)
        try:
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                assert prog.run(_frame(3520)).verdict == "XDP_DROP"
                assert prog.run(_frame(4000)).verdict == "XDP_DROP"
            assert [str(w.message) for w in got if w.category is LinearOnlyWarning] == (
                [got[0].message.args[0]] if warns else []
            )
            if warns:
                assert "4000-byte frame" in str(got[0].message)
        finally:
            prog.close()
