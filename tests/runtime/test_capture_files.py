"""Capture files give the packets tcpdump gives (libpcap's sf-pcap.c / sf-pcapng.c rules):
records over 65535 bytes (BIG TCP, jumbograms) are read whole and the packets after them
too; a record longer than the file's snapshot length is cut to it; what libpcap refuses
ends the read with the packets before it.  Checked on generated captures (exact values)
and on tcpdump's corpus, against `tcpdump -r F -w -`."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys

import pytest
from support.paths import PCAPS, PROGS

from bpfdsl.runtime import packets

ETH = bytes.fromhex("020000000001020000000002") + b"\x08\x00"


def frame(n: int, seed: int = 0) -> bytes:
    return ETH + bytes((i * 7 + seed) & 0xFF for i in range(n - len(ETH)))


def pcap(recs, *, snaplen=262144, order="<", magic=0xA1B2C3D4, version=(2, 4), tail=b""):
    """A pcap file; a record is ``data`` or ``(data, caplen, wirelen)``."""
    out = struct.pack(order + "IHHiIII", magic, *version, 0, 0, snaplen, 1)
    for r in recs:
        data, caplen, wirelen = r if isinstance(r, tuple) else (r, len(r), len(r))
        out += struct.pack(order + "IIII", 1, 2, caplen, wirelen) + data
    return out + tail


def _block(kind: int, body: bytes, order: str = "<") -> bytes:
    body += bytes(-len(body) % 4)
    n = len(body) + 12
    return struct.pack(order + "II", kind, n) + body + struct.pack(order + "I", n)


def shb(order="<"):
    return _block(0x0A0D0D0A, struct.pack(order + "IHHq", 0x1A2B3C4D, 1, 0, -1), order)


def idb(snaplen=262144, order="<"):
    return _block(1, struct.pack(order + "HHI", 1, 0, snaplen), order)


def epb(data, iface=0, order="<"):
    return _block(6, struct.pack(order + "IIIII", iface, 0, 0, len(data), len(data)) + data, order)


def spb(data, wirelen, order="<"):
    return _block(3, struct.pack(order + "I", wirelen) + data, order)


BIG = frame(80_066, 1)  # the size of tcpdump's bigtcp-ipv4.pcap record
CASES = {
    # name: (file bytes, [(captured length, wire length)], warning part or None)
    "big_record_first": (
        pcap([BIG, frame(60), frame(1514)]),
        [(80066,) * 2, (60, 60), (1514,) * 2],
        None,
    ),
    "jumbo_over_snaplen_cut": (
        pcap([frame(60), frame(9000, 4), frame(100)], snaplen=1500),
        [(60, 60), (1500, 9000), (100, 100)],
        None,
    ),
    "snaplen_0_means_262144": (pcap([BIG, frame(60)], snaplen=0), [(80066,) * 2, (60, 60)], None),
    "snaplen_over_int_max": (pcap([BIG], snaplen=2**31), [(80066,) * 2], None),
    "over_262144_refused": (
        pcap([frame(60), (frame(300_000), 300_000, 300_000), frame(60)]),
        [(60, 60)],
        "invalid packet capture length 300000, bigger than snaplen of 262144",
    ),
    "cut_record_header": (
        pcap([frame(60), frame(70)], tail=b"\1\2\3"),
        [(60, 60), (70, 70)],
        "tried to read 16 header bytes, only got 3; truncated file",
    ),
    "cut_record_data": (
        pcap([frame(60), (frame(70)[:30], 70, 70)]),
        [(60, 60)],
        "tried to read 70 captured bytes, only got 30; truncated file",
    ),
    "big_endian": (pcap([frame(60), BIG], order=">"), [(60, 60), (80066,) * 2], None),
    "nanosecond_magic": (pcap([BIG], magic=0xA1B23C4D), [(80066,) * 2], None),
    "v2_2_lengths_swapped": (
        struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 2, 0, 0, 262144, 1)
        + struct.pack("<IIII", 1, 2, 70, 60)
        + frame(60),
        [(60, 70)],
        None,
    ),
    "pcapng_big_and_spb": (
        shb() + idb() + epb(BIG) + epb(frame(60)) + spb(frame(70), 70),
        [(80066,) * 2, (60, 60), (70, 70)],
        None,
    ),
    "pcapng_spb_cut_to_snaplen": (
        shb() + idb(snaplen=100) + spb(frame(200)[:100], 200) + epb(frame(61)),
        [(100, 200), (61, 61)],
        None,
    ),
    "pcapng_epb_over_snaplen_refused": (
        shb() + idb(snaplen=1500) + epb(frame(60)) + epb(frame(9000)) + epb(frame(61)),
        [(60, 60)],
        "invalid packet capture length 9000, bigger than snaplen of 1500",
    ),
    "pcapng_unknown_interface": (
        shb() + idb() + epb(frame(60)) + epb(frame(61), iface=3),
        [(60, 60)],
        "a packet arrived on interface 3, but there's no Interface Description Block",
    ),
    "pcapng_big_endian": (
        shb(">") + idb(order=">") + epb(BIG, order=">"),
        [(80066,) * 2],
        None,
    ),
}


def _tcpdump(path) -> list[tuple[bytes, int]]:
    """(data, wire length) of each packet `tcpdump -r path -w -` writes (a plain pcap)."""
    out = subprocess.run(["tcpdump", "-r", str(path), "-w", "-"], capture_output=True, timeout=60)
    d, recs, off = out.stdout, [], 24
    while off + 16 <= len(d):
        _s, _u, caplen, wirelen = struct.unpack_from("<IIII", d, off)
        recs.append((d[off + 16 : off + 16 + caplen], wirelen))
        off += 16 + caplen
    return recs


needs_tcpdump = pytest.mark.skipif(shutil.which("tcpdump") is None, reason="needs tcpdump")


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_capture(name, tmp_path):
    raw, lengths, warning = CASES[name]
    f = tmp_path / f"{name}.pcap"
    f.write_bytes(raw)
    warnings: list[str] = []
    got = packets.read_pcap(f, warnings=warnings)
    assert [(len(g.data), g.wirelen) for g in got] == lengths
    assert [g.index for g in got] == list(range(1, len(got) + 1))
    for g in got:  # the bytes are the record's first bytes
        assert raw.find(g.data) > 0
    if warning is None:
        assert warnings == []
    else:
        assert len(warnings) == 1 and warning in warnings[0], warnings
        assert f"read {len(got)} whole packet(s)" in warnings[0]


@needs_tcpdump
@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_capture_same_as_tcpdump(name, tmp_path):
    f = tmp_path / f"{name}.pcap"
    f.write_bytes(CASES[name][0])
    assert [(g.data, g.wirelen) for g in packets.read_pcap(f)] == _tcpdump(f)


@needs_tcpdump
def test_tcpdump_corpus_same_packets_and_bytes():
    """Every capture of tcpdump's corpus (BIG TCP, jumbograms, huge TIPC messages, fuzzed
    files whose records exceed their snaplen): the packets and bytes tcpdump reads."""
    files = sorted(PCAPS.glob("*.pcap"))
    assert len(files) > 200
    big = 0
    for f in files:
        got = [(g.data, g.wirelen) for g in packets.read_pcap(f)]
        assert got == _tcpdump(f), f.name
        big += any(len(d) > 65535 for d, _ in got)
    assert big >= 10  # bigtcp-*.pcap, ipv6_jumbogram_*.pcap, huge-tipc-messages.pcap


def test_huge_tipc_messages_all_read():
    """Was: 2 of its 13 packets, and a false 'truncated file' warning."""
    warnings: list[str] = []
    got = packets.read_pcap(PCAPS / "huge-tipc-messages.pcap", warnings=warnings)
    assert len(got) == 13 and warnings == []
    assert max(len(g.data) for g in got) > 65535


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_run_big_record_first_runs_the_rest(engine, tmp_path):
    """Was: 'the capture holds no packet'.  The 80 KB record is more than an XDP test run
    takes (73152 bytes): skipped with the reason, the packets after it run."""
    f = tmp_path / "big.pcap"
    f.write_bytes(CASES["big_record_first"][0])
    r = _run("-j", "run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(f), "--engine", engine)
    assert r.returncode == 0, r.stderr
    assert "truncated" not in r.stderr and "Traceback" not in r.stderr
    rows = json.loads(r.stdout)["packets"]
    assert [p["length"] for p in rows] == [80066, 60, 1514]
    assert "longer than an XDP test run takes (73152 bytes" in rows[0]["skipped"]
    assert [p["verdict"] for p in rows[1:]] == ["XDP_PASS", "XDP_PASS"]
