"""`bpfdsl events` shows the records a ring buffer dropped: the program counts a failed
`ringbuf_reserve` in the map RING_drops (the kernel keeps no such count), and `events`
prints the count since it started -- in the text summary and a last JSON line -- equal to
the records sent minus the records it received, on a ring too small for them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
from support.netns import bpffs_dir
from support.paths import ROOT

from bpfdsl.kernel import syscall
from bpfdsl.runtime import pins
from bpfdsl.runtime.packets import udp_frame

SRC = """license "GPL"
struct big { a: u64, b: u64, c: u64, d: u64, e: u64, f: u64, g: u64, h: u64 }
map events: ringbuf<big>(max_entries: 4096)          // 56 records of 64 + 8 bytes
map events_drops: percpu_array<u64>(max_entries: 1)  // what `bpfdsl events` reports
xdp fn spam(ctx) {
    let r = ringbuf_reserve(events) else { events_drops[0] += 1; return XDP_PASS }
    r.a = ctx.len as u64
    ringbuf_submit(r)
    return XDP_PASS
}
"""
SENT = 2000


def bpfdsl(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "bpfdsl", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.kernel
@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_events_reports_the_records_a_full_ring_dropped(tmp_path, json_out):
    src = tmp_path / "spam.bpfd"
    src.write_text(SRC)
    pin = bpffs_dir("evd_")
    load = subprocess.run([sys.executable, "-m", "bpfdsl", "load", str(src), "--pin-dir", pin],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert load.returncode == 0, load.stderr
    p = None
    try:
        p = bpfdsl("events", f"{pin}:events", "--lines", "--duration", "30",
                   *(["--json"] if json_out else []))  # fmt: skip
        line = p.stderr.readline()
        assert line.startswith("reading "), line + p.stderr.read()
        frame = udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                          src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=2,
                          payload=b"x")  # fmt: skip
        with syscall.obj_get(f"{pin}/progs/spam") as fd:
            syscall.prog_test_run(int(fd), frame, repeat=SENT)  # faster than events reads
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        assert p.returncode == 0, err
    finally:
        if p is not None and p.poll() is None:
            p.kill()
            p.communicate(timeout=10)
        pins.unpin_dir(pin)
    if json_out:
        docs = [json.loads(ln) for ln in out.splitlines()]
        summary = docs.pop()["summary"]
        received = len(docs)
        assert summary == {"map": "events", "records": received, "lost": 0,
                           "dropped": SENT - received}  # fmt: skip
    else:
        received = len(out.splitlines())
        assert f"{received} record(s) from events, {SENT - received} dropped by the program" in err
    assert 0 < received < SENT  # the ring was too small: some dropped, some received
