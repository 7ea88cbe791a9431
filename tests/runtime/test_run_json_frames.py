"""``bpfdsl run --json`` gives each frame's output bytes (``data_out``, hex, what ``--hex``
takes back), the same on the kernel and the interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from support.paths import PROGS, ROOT

from bpfdsl.runtime.packets import udp_frame


def _run(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.kernel
@pytest.mark.parametrize("engine", ["kernel", "interp"])
def test_data_out_is_the_reflected_frame(engine):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    sent = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=1234,
        dport=7,
    )
    out = _run(str(PROGS / "xdp_reflect.bpfd"), "--hex", sent.hex(), "--engine", engine)
    (p,) = out["packets"]
    assert p["verdict"] == "XDP_TX"
    got = Ether(bytes.fromhex(p["data_out"]))
    assert len(bytes.fromhex(p["data_out"])) == p["length_out"] == len(sent)
    assert (got.src, got.dst) == ("02:00:00:00:00:02", "02:00:00:00:00:01")
    assert (got[IP].src, got[IP].dst) == ("10.0.0.2", "10.0.0.1")
    assert (got[UDP].sport, got[UDP].dport) == (7, 1234)


@pytest.mark.kernel
def test_data_out_is_null_for_a_frame_not_run():
    """A 13-byte frame (the kernel runs XDP on 14 and more): skipped, no output bytes, and
    exit 1 (no packet was run)."""
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "run", str(PROGS / "xdp_pass.bpfd")]
        + ["--hex", "00" * 13],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 1
    (p,) = json.loads(r.stdout)["packets"]
    assert p["retval"] is None and p["data_out"] is None and "14 bytes" in p["skipped"]


EVERYTHING = """license "GPL"
struct ev { len: u32 }
map m: hash<u32, u64>(max_entries: 16)
map dm: devmap(max_entries: 4)
map events: ringbuf<ev>(max_entries: 4096)
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    m[1] += 1
    ringbuf_output(events, ev(len: ctx.len as u32))
    eth.h_dest = eth.h_source
    return redirect_map(dm, 0, XDP_PASS)
}
"""


def _documented_fields() -> list[str]:
    """The field names of docs/tutorial.md's table of `run --json` packet entries."""
    text = (ROOT / "docs" / "tutorial.md").read_text()
    start = text.index("`bpfdsl run --json` prints one JSON document")
    rows = text[start:].split("\n\n")[1].splitlines()[2:]  # the table, after its header
    return [row.split("`")[1] for row in rows]


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_every_run_json_field_is_documented(tmp_path, engine):
    """A frame that changes bytes, a map entry, sends a record and misses a redirect has
    every field of a packet entry, and they are the rows of the docs' table, in order."""
    src = tmp_path / "all.bpfd"
    src.write_text(EVERYTHING)
    frame = udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                      src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1, dport=2, payload=b"x")  # fmt: skip
    doc = _run(str(src), "--engine", engine, "--hex", frame.hex())
    assert list(doc) == ["program", "engine", "repeat", "packets", "totals"]
    (entry,) = doc["packets"]
    assert list(entry) == _documented_fields()
    assert entry["outcome"] == {
        "redirect_miss": {"map": "dm", "key": 0, "flags": "XDP_PASS", "why": "empty"}
    }
    assert entry["map_changes"] == [{"map": "m", "key": 1, "old": None, "new": 1}]
    # a ring buffer is shared by the CPUs: no `cpu`, on either engine
    assert entry["events"] == [{"map": "events", "record": {"len": len(frame)}}]
    assert entry["length_out"] == len(frame) and entry["duration_ns"] > 0
