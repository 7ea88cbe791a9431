"""The control plane: ``bpfdsl.open_map`` (typed get/set/remove, items() and batch writes
by the map's BTF, through BPF_MAP_*_BATCH) and ``bpfdsl map update --from FILE`` with
``map dump --json`` round-tripping 10,000 typed entries -- struct keys with addresses and
ports, struct values with a MAC, IPv4 and IPv6 prefixes, per-CPU values."""

from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
import sys

import pytest
from support.netns import bpffs_dir
from support.paths import ROOT

import bpfdsl

N = 10_000

SRC = """license "GPL"
struct flow { saddr: be32, daddr: be32, sport: be16, dport: be16, proto: u8 }
struct verdict { action: u32, hits: u64, next_hop: mac_addr }
map flows: hash<flow, verdict>(max_entries: 16384)
map v4: lpm_trie<ipv4_prefix, u32>(max_entries: 16384)
map v6: lpm_trie<ipv6_prefix, u32>(max_entries: 16384)
map per_cpu: percpu_hash<u32, u64>(max_entries: 16384)
map slots: array<u32, u64>(max_entries: 10000)
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if let a = v4.lookup(ip.saddr) { return XDP_DROP }
    return XDP_PASS
}
"""


def _flow(i: int) -> dict:
    return {
        "saddr": str(ipaddress.IPv4Address(0x0A000000 + i)),
        "daddr": "192.0.2.1",
        "sport": 1024 + i % 50000,
        "dport": 53,
        "proto": 17,
    }


def _verdict(i: int) -> dict:
    return {
        "action": i % 3,
        "hits": i * 1000,
        "next_hop": f"02:00:00:00:{i >> 8 & 255:02x}:{i & 255:02x}",
    }


def _entries() -> dict[str, list[tuple]]:
    return {
        "flows": [(_flow(i), _verdict(i)) for i in range(N)],
        "v4": [(f"{ipaddress.IPv4Address(0x0B000000 + (i << 8))}/24", i) for i in range(N)],
        "v6": [(str(ipaddress.IPv6Network(f"2001:db8:{i:x}::/48")), i) for i in range(N)],
        "per_cpu": [(i, i + 1) for i in range(N)],
        "slots": [(i, i * 7) for i in range(N)],
    }


def _bpfdsl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True, text=True, timeout=300, cwd=ROOT, input=stdin,
    )  # fmt: skip


@pytest.fixture
def two_loads(tmp_path):
    src = tmp_path / "cp.bpfd"
    src.write_text(SRC)
    dirs = [bpffs_dir("cpa_"), bpffs_dir("cpb_")]
    try:
        for d in dirs:
            r = _bpfdsl("load", str(src), "--pin-dir", d)
            assert r.returncode == 0, r.stderr
        yield dirs
    finally:
        for d in dirs:
            _bpfdsl("unload", d)
            shutil.rmtree(d, ignore_errors=True)


def _canon(rows) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


@pytest.mark.kernel
def test_python_api_writes_reads_and_round_trips_through_dump_and_update_from(two_loads, tmp_path):
    a, b = two_loads
    want = _entries()
    for name, rows in want.items():
        with bpfdsl.open_map(f"{a}:{name}") as m:
            assert m.update_batch(rows) == N
            got = list(m.items())
            assert len(got) == N
            if name == "per_cpu":  # a value per possible CPU, each the one written
                assert all(v == [k + 1] * m.ncpu for k, v in got)
            else:
                assert _canon(got) == _canon([(k, v) for k, v in rows]), name
    with bpfdsl.open_map(f"{a}:flows") as m:  # typed single-entry access
        assert m.get(_flow(5)) == _verdict(5)
        m.set(_flow(5), {"action": 9, "hits": 1, "next_hop": "aa:bb:cc:dd:ee:ff"})
        assert m.get(_flow(5))["next_hop"] == "aa:bb:cc:dd:ee:ff"
        assert m.remove(_flow(5)) and not m.remove(_flow(5)) and m.get(_flow(5)) is None
        assert m.delete_batch([_flow(i) for i in range(100)] + [_flow(N + 1)]) == 99
    # the CLI: dump --json of every map of A, update --from into B, dump B: the same
    for name in want:
        r = _bpfdsl("map", "dump", f"{a}:{name}", "--json")
        assert r.returncode == 0, r.stderr
        dump = tmp_path / f"{name}.json"
        dump.write_text(r.stdout)
        r = _bpfdsl("map", "update", f"{b}:{name}", "--from", str(dump))
        assert r.returncode == 0, r.stderr
        assert "wrote" in r.stdout
        r2 = _bpfdsl("map", "dump", f"{b}:{name}", "--json")
        assert _canon(json.loads(r2.stdout)["entries"]) == _canon(
            json.loads(dump.read_text())["entries"]
        )
    # JSON lines and CSV forms
    lines = "\n".join(json.dumps({"key": k, "value": v}) for k, v in want["v4"][:50])
    r = _bpfdsl("map", "update", f"{b}:v4", "--from", "-", stdin=lines)
    assert r.returncode == 0 and "wrote 50 entries" in r.stdout, r.stderr
    csv_file = tmp_path / "slots.csv"
    csv_file.write_text("key,value\n" + "".join(f"{i},{i * 11}\n" for i in range(20)))
    r = _bpfdsl("map", "update", f"{b}:slots", "--from", str(csv_file))
    assert r.returncode == 0, r.stderr
    with bpfdsl.open_map(f"{b}:slots") as m:
        assert [m.get(i) for i in (0, 19, 20)] == [0, 19 * 11, 20 * 7]


@pytest.mark.kernel
def test_a_bad_entry_is_named_by_file_and_line(two_loads, tmp_path):
    a, _ = two_loads
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"key": "10.0.0.0/8", "value": 1}\n{"key": "10.0.0.0/33", "value": 2}\n')
    r = _bpfdsl("map", "update", f"{a}:v4", "--from", str(bad))
    assert r.returncode == 2 and "bad key '10.0.0.0/33'" in r.stderr, r.stderr
    assert f"--> {bad}:2:1" in r.stderr and '2 | {"key": "10.0.0.0/33"' in r.stderr, r.stderr
    # a bad value after many good ones (more than one batch): located, and nothing written
    late = tmp_path / "late.jsonl"
    good = "".join(json.dumps({"key": i, "value": i}) + "\n" for i in range(9000))
    late.write_text(good + '{"key": 9000, "value": "many"}\n')
    r = _bpfdsl("map", "update", f"{a}:per_cpu", "--from", str(late))
    assert r.returncode == 2 and f"--> {late}:9001:1" in r.stderr, r.stderr
    csv_bad = tmp_path / "bad.csv"
    csv_bad.write_text('key,value\n1,2\n2,"x\ny"\n')
    r = _bpfdsl("map", "update", f"{a}:per_cpu", "--from", str(csv_bad))
    assert r.returncode == 2 and f"--> {csv_bad}:3:1" in r.stderr, r.stderr
    doc = tmp_path / "dump.json"
    doc.write_text(json.dumps({"entries": [{"key": 1, "value": 1}, {"key": 2, "value": -1}]}))
    r = _bpfdsl("map", "update", f"{a}:per_cpu", "--from", str(doc))
    assert r.returncode == 2 and f"{doc}: entry 2: " in r.stderr, r.stderr
    r = _bpfdsl("--json", "map", "dump", f"{a}:per_cpu")
    assert r.returncode == 0 and json.loads(r.stdout)["entries"] == [], r.stdout
    worse = tmp_path / "worse.jsonl"
    worse.write_text('{"key": 1, "value": 2}\nnot json\n')
    r = _bpfdsl("map", "update", f"{a}:slots", "--from", str(worse))
    assert r.returncode == 2 and f"{worse}:2: not JSON" in r.stderr, r.stderr
