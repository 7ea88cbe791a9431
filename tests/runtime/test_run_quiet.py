"""`bpfdsl run --pcap -q`: the lean loop (one reusable test-run attr, no description, the
records of event maps dropped undecoded) gives the verdicts the described run gives, and the
rings are still emptied as the frames run (the batches of ``-q`` empty a ring once it is half
full: a run writing less than half a ring of records sees the room it would see if it were
emptied after each frame), so a program whose reservation fails on a full ring sees the room
it sees in the described run."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bpfdsl.cli import main
from bpfdsl.runtime.packets import udp_frame

# a 4 KiB ring holds ~128 of these records: without emptying it after each run the
# reservation fails from then on and the program drops
RING = """license "GPL"
struct event { len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: 4096)

xdp fn full(ctx) {
    let r = ringbuf_reserve(events) else { return XDP_DROP }
    r.len = ctx.len as u32
    r.seq = 1
    ringbuf_submit(r)
    if ctx.len > 100 { return XDP_TX }
    return XDP_PASS
}
"""


def _pcap(path: Path, n: int) -> None:
    with open(path, "wb") as out:
        out.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(n):
            f = udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                          src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=53,
                          payload=b"x" * (18 + 60 * (i % 3 == 0)), ident=i)  # fmt: skip
            out.write(struct.pack("<IIII", 0, i, len(f), len(f)) + f)
        out.write(struct.pack("<IIII", 0, n, 10, 10) + bytes(10))  # too short: skipped


def _totals(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
def test_quiet_gives_the_described_runs_verdicts_and_keeps_the_rings_empty(
    tmp_path, capsys, engine
):
    src = tmp_path / "full.bpfd"
    src.write_text(RING)
    cap = tmp_path / "f.pcap"
    n = 600
    _pcap(cap, n)
    assert main(["run", str(src), "--pcap", str(cap), "-q", "--engine", engine]) == 0
    quiet = _totals(capsys.readouterr().out)
    assert main(["run", str(src), "--pcap", str(cap), "--engine", engine]) == 0
    described = _totals(capsys.readouterr().out)
    assert quiet == described
    assert quiet == (
        f"{n + 1} packet(s) through 'full' ({engine}): XDP_PASS {n - n // 3}, "
        f"XDP_TX {n // 3}, skipped 1"
    )
