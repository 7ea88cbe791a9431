"""`bpfdsl run --pcap` streams: each frame's line (or its entry of the JSON document) is
printed as soon as the frame is run, a capture of any length runs in bounded memory, and
Ctrl-C prints the summary of the frames run so far (exit 130) instead of losing them."""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.runtime.packets import iter_pcap, udp_frame

FRAMES = 400_000  # far more than the test waits for: the run is interrupted long before


def _write_pcap(path: Path, n: int) -> None:
    f = udp_frame(
        src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
        dst_ip="10.0.0.2", sport=1, dport=53, payload=b"x" * 18,
    )  # fmt: skip
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        out.write((struct.pack("<IIII", 0, 0, len(f), len(f)) + f) * n)


@pytest.fixture(scope="module")
def big_pcap(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("stream") / "big.pcap"
    _write_pcap(p, FRAMES)
    return p


@pytest.fixture(scope="module")
def drop_obj(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stream") / "xdp_drop.o"
    subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(ROOT / "progs" / "xdp_drop.bpfd"),
         "-o", str(out)], check=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    return out


def test_frames_are_read_one_at_a_time(big_pcap):
    stream = iter_pcap(big_pcap, limit=3)
    assert [f.index for f in stream] == [1, 2, 3]
    assert sum(1 for _ in iter_pcap(big_pcap, limit=1000)) == 1000


def _start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bpfdsl", *argv],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip


def _interrupt_after_lines(p: subprocess.Popen, lines: int) -> tuple[list[str], str, str]:
    """Read ``lines`` lines while the run goes on, then Ctrl-C it; (lines, rest, stderr)."""
    assert p.stdout is not None
    got = []
    deadline = time.monotonic() + 120
    while len(got) < lines and time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        got.append(line)
    assert p.poll() is None, "the run ended before it was interrupted: no streaming seen"
    p.send_signal(signal.SIGINT)
    # read the rest through the same buffered stream as the lines above (communicate()
    # would read the pipe's fd and miss what readline() buffered); a stuck run is killed
    killer = threading.Timer(30, p.kill)
    killer.start()
    try:
        rest = p.stdout.read()
        err = p.stderr.read() if p.stderr is not None else ""
        p.wait()
    finally:
        killer.cancel()
    assert p.returncode != -signal.SIGKILL, "run did not stop within 30 s of SIGINT"
    return got, rest, err


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
def test_text_lines_come_as_frames_run_and_ctrl_c_keeps_the_summary(big_pcap, drop_obj, engine):
    p = _start("run", str(drop_obj), "--pcap", str(big_pcap), "--engine", engine)
    got, rest, err = _interrupt_after_lines(p, 50)
    assert len(got) == 50 and all("XDP_DROP" in ln for ln in got)
    assert p.returncode == 130, err
    lines = got + rest.splitlines(keepends=True)
    summary = lines[-1]
    n = int(summary.split()[0])
    assert f"packet(s) through 'xdp_drop' ({engine}): XDP_DROP {n} (interrupted)" in summary
    assert 50 <= n < FRAMES
    assert sum(1 for ln in lines if ln.startswith("#")) == n  # a line per frame run
    assert f"interrupted after {n} packet(s)" in err


@pytest.mark.kernel
def test_the_json_document_streams_and_stays_whole_after_ctrl_c(big_pcap, drop_obj):
    p = _start("--json", "run", str(drop_obj), "--pcap", str(big_pcap), "--engine", "kernel")
    got, rest, err = _interrupt_after_lines(p, 20)
    assert p.returncode == 130, err
    doc = json.loads("".join(got) + rest)
    assert doc["interrupted"] is True and doc["program"] == "xdp_drop"
    n = len(doc["packets"])
    assert 19 <= n < FRAMES and doc["totals"] == {"XDP_DROP": n}
    assert [pk["index"] for pk in doc["packets"][:3]] == [1, 2, 3]


@pytest.mark.kernel
def test_memory_does_not_grow_with_the_capture(tmp_path, drop_obj):
    """Peak RSS of `run -q` over 5,000 and 50,000 frames: the same, within a few MB
    (before, every frame and its result were kept to the end)."""
    small, big = tmp_path / "s.pcap", tmp_path / "b.pcap"
    _write_pcap(small, 5_000)
    _write_pcap(big, 50_000)
    peaks = []
    for cap in (small, big):  # the peak RSS of one child, read by a parent of its own
        r = subprocess.run(
            [sys.executable, "-c", PEAK, sys.executable, "-m", "bpfdsl", "run",
             str(drop_obj), "--pcap", str(cap), "-q", "--engine", "interp"],
            capture_output=True, text=True, timeout=300, cwd=ROOT,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        peaks.append(int(r.stdout.strip().splitlines()[-1]))  # KiB
    assert peaks[1] - peaks[0] < 8 * 1024, peaks  # 45,000 frames more: under 8 MiB more


PEAK = """import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss if r.returncode == 0 else -1)
"""
