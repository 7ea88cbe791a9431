"""`bpfdsl run --pcap -q` in batches (issue #25): the capture mapped and read as spans
(pcapfile.CaptureReader.spans, the walk in C or Python), each batch run by one
TestRunner.run_spans call (the C loop of bpfdsl/kernel/_testrun.c when built, else the
same loop in Python), event rings emptied once half full.  Both loops give the verdicts of
the described run, frame by frame, on the tcpdump corpus; batches come while the capture
is still being written."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from array import array
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import pytest
from support import filter_corpus
from support.paths import PCAPS, ROOT

from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import packets, pcapfile, testrun
from bpfdsl.runtime.pcapfile import CaptureFormatError, open_capture

C_LOOP = find_spec("bpfdsl.kernel._testrun") is not None

# 16 bytes a record in a 4 KiB ring: 256 runs fill it, and the program then aborts; UDP
# gets XDP_TX, TCP XDP_DROP, other IPv4 and non-IP XDP_PASS, a cut IPv4 header XDP_DROP
SORT = """license "GPL"
struct event { len: u32, seq: u32 }
map events: ringbuf<event>(max_entries: 4096)

xdp fn sort(ctx) {
    let r = ringbuf_reserve(events) else { return XDP_ABORTED }
    r.len = ctx.len as u32
    r.seq = 1
    ringbuf_submit(r)
    let eth = parse ethernet else { return XDP_DROP }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_DROP }
    if ip.protocol == IPPROTO_UDP { return XDP_TX }
    if ip.protocol == IPPROTO_TCP { return XDP_DROP }
    return XDP_PASS
}
"""


def _bpfdsl(*argv: str, pure: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BPFDSL_PURE_PYTHON"}
    if pure:
        env["BPFDSL_PURE_PYTHON"] = "1"
    r = subprocess.run([sys.executable, "-m", "bpfdsl", *argv], capture_output=True,
                       text=True, timeout=600, cwd=ROOT, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return r


def _totals(line: str) -> dict[str, int]:
    """{verdict: frames} of the summary line of `run -q`."""
    parts = line.strip().split(": ", 1)[1].split(", ")
    return {k: int(v) for k, v in (p.split() for p in parts)}


@pytest.fixture(scope="module")
def sort_obj(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("batches")
    (d / "sort.bpfd").write_text(SORT)
    out = d / "sort.o"
    subprocess.run([sys.executable, "-m", "bpfdsl", "compile", str(d / "sort.bpfd"), "-o",
                    str(out)], check=True, timeout=120, cwd=ROOT)  # fmt: skip
    return out


@pytest.mark.kernel
def test_both_loops_give_the_per_frame_verdicts_on_the_corpus(tmp_path, sort_obj):
    """Every Ethernet record of the tcpdump corpus (short frames, BIG TCP records past
    what a test run takes, frames over a page) in one capture: ``-q`` through the C loop
    and through the Python loop gives the totals of the verdicts the described run
    (``--json``, one test run and one ring read per frame) gives frame by frame."""
    cap = tmp_path / "corpus.pcap"
    frames = filter_corpus.frames()
    filter_corpus.write_pcap(cap, frames, as_seen=True)
    doc = json.loads(_bpfdsl("--json", "run", str(sort_obj), "--pcap", str(cap),
                             "--engine", "kernel", pure=True).stdout)  # fmt: skip
    per_frame: dict[str, int] = {}
    for p in doc["packets"]:
        v = p["verdict"] or "skipped"
        per_frame[v] = per_frame.get(v, 0) + 1
    assert len(doc["packets"]) == len(frames)
    assert per_frame.get("skipped", 0) > 0 and per_frame["XDP_TX"] > 0
    assert per_frame["XDP_DROP"] > 0 and per_frame["XDP_PASS"] > 0
    assert "XDP_ABORTED" not in per_frame  # the ring was emptied as the frames ran
    quiet = ["run", str(sort_obj), "--pcap", str(cap), "-q", "--engine", "kernel"]
    py = _totals(_bpfdsl(*quiet, pure=True).stdout)
    assert py == per_frame
    if not C_LOOP:
        pytest.skip("bpfdsl/kernel/_testrun.c not built (BPFDSL_COMPILE=1): Python loop only")
    assert _totals(_bpfdsl(*quiet, pure=False).stdout) == per_frame


def _engine(obj: Path) -> tuple[testrun.KernelEngine, int]:
    spec = read_object(obj.read_bytes())
    e = testrun.KernelEngine(spec)
    return e, int(e._coll.programs["sort"].fd)


def _spans(cap: Path) -> Iterator[pcapfile.RecordSpans]:
    return packets.iter_pcap_spans(cap, chunk=500)  # each batch used before the next


@pytest.mark.kernel
@pytest.mark.parametrize("loop", ["C", "Python"])
def test_run_spans_gives_each_frames_retval(tmp_path, sort_obj, monkeypatch, loop):
    """run_spans' retvals, frame by frame, are those of one TestRunner.run per frame; a
    frame the kernel refuses stops the batch at it, with its errno."""
    if loop == "C" and syscall._testrun is None:
        pytest.skip(f"no C loop here: {syscall.TESTRUN_LOOP}")
    if loop == "Python":
        monkeypatch.setattr(syscall, "_testrun", None)
    cap = tmp_path / "c.pcap"
    filter_corpus.write_pcap(cap, filter_corpus.sample(filter_corpus.frames(), 7), as_seen=True)
    e, fd = _engine(sort_obj)
    try:
        skips = e._events.skip_positions()
        assert skips
        one = syscall.TestRunner(fd)
        for sp in _spans(cap):
            got = array("q", bytes(8 * len(sp)))
            i = 0
            while i < len(sp):
                nxt, err, _counts = syscall.TestRunner(fd).run_spans(
                    sp.data, sp.offsets, sp.lengths, i, len(sp), min_len=14, skips=skips,
                    retvals=got,
                )  # fmt: skip
                if nxt == len(sp):
                    break
                assert err != 0 and sp.lengths[nxt] > 3520  # only records over a test run
                got[nxt] = -2
                i = nxt + 1
            for k in range(len(sp)):
                e.skip_events()
                n = sp.lengths[k]
                if n < 14:
                    want = -1
                else:
                    try:
                        want = one.run(bytes(sp.frame(k)))[0]
                    except syscall.BpfError:
                        want = -2
                assert got[k] == want, (sp.first + k, n)
    finally:
        e.close()


@pytest.mark.kernel
@pytest.mark.parametrize("loop", ["C", "Python"])
def test_ring_positions_are_copied_once_least_bytes_wait(tmp_path, sort_obj, monkeypatch, loop):
    """The drain rule of run_spans' ``skips``: after a run, the position at src is copied
    to dst only when it is ``least`` or more past it (half the ring, for event rings)."""
    if loop == "C" and syscall._testrun is None:
        pytest.skip(f"no C loop here: {syscall.TESTRUN_LOOP}")
    if loop == "Python":
        monkeypatch.setattr(syscall, "_testrun", None)
    frame = bytes(64)
    e, fd = _engine(sort_obj)
    try:
        src = bytearray(struct.pack("<Q", 1000))
        near, far = bytearray(struct.pack("<Q", 990)), bytearray(struct.pack("<Q", 900))
        skips = ((src, 0, near, 0, 50), (src, 0, far, 0, 50))
        offs, lens = array("Q", [0, 0]), array("I", [64, 64])
        tr = syscall.TestRunner(fd)
        nxt, err, counts = tr.run_spans(frame, offs, lens, skips=skips)
        assert (nxt, err, sum(counts.values())) == (2, 0, 2)
        assert struct.unpack("<Q", near)[0] == 990  # 10 bytes waiting: left
        assert struct.unpack("<Q", far)[0] == 1000  # 100 bytes waiting: emptied
        # the same runner's run() afterwards runs its own packet, not the batch's
        ip4 = packets.udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                                src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=53)  # fmt: skip
        assert tr.run(ip4)[0] == 3  # XDP_TX (UDP), where the zero frame got XDP_PASS
        assert counts == {2: 2}
    finally:
        e.close()


def _all_captures() -> list[Path]:
    return sorted(PCAPS.glob("*.pcap*"))


def _records(path: Path, limit: int | None) -> tuple[list, str | None, bool]:
    r = open_capture(path, limit=limit)
    recs = [(x.index, x.data, x.wirelen) for x in r]
    return recs, r.error, r.cut


def _spanned(path: Path, limit: int | None, chunk: int) -> tuple[list, str | None, bool]:
    r = open_capture(path, limit=limit)
    out = [(sp.first + k, bytes(sp.frame(k)), sp.wirelens[k])
           for sp in r.spans(chunk) for k in range(len(sp))]  # fmt: skip
    return out, r.error, r.cut


def _pcap_bytes(order: str, records: list[tuple[int, int, bytes]], snaplen: int = 65535) -> bytes:
    """A pcap file in byte order ``order`` of (caplen, wirelen, data) records."""
    out = struct.pack(order + "IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, 1)
    for i, (caplen, wirelen, data) in enumerate(records):
        out += struct.pack(order + "IIII", i, 0, caplen, wirelen) + data
    return out


@pytest.mark.parametrize("walk", ["C", "Python"])
def test_spans_are_the_records_libpcap_reads(tmp_path, monkeypatch, walk):
    """Every capture of the corpus, the whole file and its first 3 records, in batches
    of 5: the spans hold the records iterating gives (bytes, wire lengths, indexes), and
    the read ends the same way; also a big-endian file, a record cut to the snapshot
    length and a file cut inside a record."""
    if walk == "C" and not pcapfile.PCAP_WALK_C:
        pytest.skip("no C walk here (not built, or BPFDSL_PURE_PYTHON set)")
    if walk == "Python":
        monkeypatch.setattr(pcapfile, "_pcapwalk", None)
    frame = bytes(range(60))
    extra = {
        "big.pcap": _pcap_bytes(">", [(60, 60, frame)] * 7),
        "snap.pcap": _pcap_bytes("<", [(60, 60, frame), (60, 80, frame), (60, 60, frame)], 40),
        "cut.pcap": _pcap_bytes("<", [(60, 60, frame)] * 3)[:-10],
    }
    paths = _all_captures()
    for name, data in extra.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    compared = 0
    for path in paths:
        for limit in (None, 3):
            try:
                want = _records(path, limit)
            except CaptureFormatError:
                continue
            assert _spanned(path, limit, 5) == want, (path.name, limit)
            compared += 1
    assert compared > 300
    assert len(_records(tmp_path / "big.pcap", None)[0]) == 7
    assert _records(tmp_path / "snap.pcap", None)[0][0][1] == frame[:40]
    assert _records(tmp_path / "cut.pcap", None)[2] is True


def test_batches_come_while_the_capture_is_still_written(tmp_path):
    """A capture read from a pipe: the first batch is counted while the writer still
    holds the rest back (nothing waits for the end of the capture)."""
    fifo = tmp_path / "cap.fifo"
    os.mkfifo(fifo)
    frame = packets.udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                              src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=53)  # fmt: skip
    rec = struct.pack("<IIII", 0, 0, len(frame), len(frame)) + frame
    first_seen = threading.Event()
    held_back = []

    def write() -> None:
        with open(fifo, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
            f.write(rec * 4096)
            f.flush()
            held_back.append(not first_seen.wait(60))  # the rest only once a batch came
            f.write(rec * 100)

    w = threading.Thread(target=write)
    w.start()
    try:
        engine = testrun.InterpEngine(read_object(_drop_object(tmp_path)))
        spec_kind = engine.collection.programs["xdp_drop"].kind
        reader = open_capture(fifo)  # a pipe: not mapped, records copied into batches
        gen = testrun.count_verdicts(engine, "xdp_drop", spec_kind, reader.spans())
        counts, verdicts = next(gen)
        first_seen.set()
        assert (counts.frames, verdicts) == (4096, {"XDP_DROP": 4096})
        rest = list(gen)
        assert sum(c.frames for c, _v in rest) == 100
    finally:
        first_seen.set()
        w.join(60)
    assert held_back == [False]


def _drop_object(tmp_path: Path) -> bytes:
    out = tmp_path / "xdp_drop.o"
    subprocess.run([sys.executable, "-m", "bpfdsl", "compile",
                    str(ROOT / "progs" / "xdp_drop.bpfd"), "-o", str(out)],
                   check=True, timeout=120, cwd=ROOT)  # fmt: skip
    return out.read_bytes()
