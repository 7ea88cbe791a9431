"""progs/xdp_ratelimit.bpfd and program updates that keep their state.

The token bucket on both engines (a clock-free config: 1 token per second, so no refill
happens during the test); on a veth: the counters survive `bpfdsl attach` of a changed
object (counters before the update == counters after it), a replace in the middle of a
bounded packet stream counts every packet exactly once across the old and the new
program, `--fresh-maps` starts over, an incompatible map is refused with the map and the
field named and leaves everything as it was; one loaded program attached to two
interfaces counts the frames of both in its one set of maps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from support.netns import bpffs_dir, veth_net
from support.paths import ROOT

from bpfdsl.runtime import attach

PROG = ROOT / "progs" / "xdp_ratelimit.bpfd"
PORT = 7400


def udp(src: str) -> bytes:
    return bytes(Ether() / IP(src=src, dst="10.9.9.9") / UDP(sport=1, dport=PORT) / b"x")


def test_token_bucket_on_both_engines(bpf_program):
    prog = bpf_program(PROG, config={"rate_pps": 1, "burst": 3})
    verdicts = [prog.run(udp("10.0.0.1")).verdict for _ in range(5)]
    assert verdicts == ["XDP_PASS"] * 3 + ["XDP_DROP"] * 2  # a bucket of 3, no refill
    assert prog.run(udp("10.0.0.2")).verdict == "XDP_PASS"  # its own bucket
    assert (prog.maps["counters"].total(0), prog.maps["counters"].total(1)) == (4, 2)
    v6 = bytes(Ether(type=0x86DD) / b"\x60" / bytes(60))
    assert prog.run(v6).verdict == "XDP_PASS" and prog.maps["counters"].total(0) == 4


@pytest.mark.bpf_engines("interp")
def test_tokens_refill_with_the_clock(bpf_program):
    """Interpreter clock: after 2 ms at 1000 tokens/s a drained bucket has 2 tokens."""
    prog = bpf_program(PROG, config={"rate_pps": 1000, "burst": 2})
    assert [prog.run(udp("10.0.0.1")).verdict for _ in range(3)] == [
        "XDP_PASS", "XDP_PASS", "XDP_DROP",
    ]  # fmt: skip
    prog.interp.env.clock_ns += 2_000_000
    assert [prog.run(udp("10.0.0.1")).verdict for _ in range(3)] == [
        "XDP_PASS", "XDP_PASS", "XDP_DROP",
    ]  # fmt: skip


def version(tmp_path: Path, name: str, edit: tuple[str, str] | None = None) -> Path:
    """A copy of the rate limiter, edited (a changed object for an update)."""
    text = PROG.read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(*edit)
    p = tmp_path / f"{name}.bpfd"
    p.write_text(text)
    return p


V2 = ("config burst: u64 = 100", "config burst: u64 = 100000")  # a new default: no drops


def counters(net, pin: str) -> tuple[int, int]:
    r = net.bpfdsl("map", "dump", f"{pin}:counters", "--sum", "--json")
    assert r.returncode == 0, r.stderr
    vals = {e["key"]: e["value"] for e in json.loads(r.stdout)["entries"]}
    return vals[0], vals[1]


def attached_prog_id(net) -> int:
    with net.in_xdp_ns():
        cur = attach.xdp_attachment(net.xdp_dev)
    return cur.prog_id


@pytest.mark.kernel
def test_counters_survive_an_update_while_packets_flow(tmp_path):
    v1, v2 = version(tmp_path, "rl1"), version(tmp_path, "rl2", V2)
    pin = bpffs_dir("rlu_")
    with veth_net("ru") as net:
        r = net.bpfdsl("attach", "xdp", str(v1), "--dev", net.xdp_dev, "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            first = attached_prog_id(net)
            assert net.send_udp(PORT, 300, interval=0.0002) == 300
            time.sleep(0.2)
            before = counters(net, pin)
            assert sum(before) == 300 and before[1] > 0  # a burst of 100: some dropped
            r = net.bpfdsl("attach", "xdp", str(v2), "--dev", net.xdp_dev, "--pin-dir", pin)
            assert r.returncode == 0, r.stderr
            assert "kept the maps of the program it replaces: buckets, counters" in r.stdout
            assert attached_prog_id(net) != first
            assert counters(net, pin) == before  # the new program has the old state
            assert net.send_udp(PORT, 50, interval=0.0002) == 50
            time.sleep(0.2)
            after = counters(net, pin)
            assert sum(after) == 350 and after[1] >= before[1]
        finally:
            d = net.bpfdsl("detach", "--dev", net.xdp_dev)
            assert d.returncode == 0, d.stderr
    assert not os.path.exists(pin)


@pytest.mark.kernel
def test_replace_mid_stream_counts_every_packet_once(tmp_path):
    """Frames flow in batches of 100 before, during and after the replacing attach (the
    sender stops two batches after it returned, so it is mid-stream however long the
    attach takes on a loaded machine), and each one is counted by exactly one program."""
    v1 = version(tmp_path, "a", V2)
    v2 = version(tmp_path, "b", ("rate_pps: u64 = 1000", "rate_pps: u64 = 999"))
    pin = bpffs_dir("rlm_")
    batch, max_batches = 100, 300
    with veth_net("rm") as net:
        r = net.bpfdsl("attach", "xdp", str(v1), "--dev", net.xdp_dev, "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            first = attached_prog_id(net)
            sent: list[int] = []
            swapped = threading.Event()

            def send() -> None:
                after = 0
                while len(sent) < max_batches and after < 2:
                    after += swapped.is_set()
                    sent.append(net.send_udp(PORT, batch, interval=0.0005))

            sender = threading.Thread(target=send)
            sender.start()
            deadline = time.monotonic() + 10
            while sum(counters(net, pin)) < 2 * batch and time.monotonic() < deadline:
                time.sleep(0.02)
            r = net.bpfdsl("attach", "xdp", str(v2), "--dev", net.xdp_dev, "--pin-dir", pin)
            mid = sum(counters(net, pin))
            swapped.set()
            sender.join(timeout=120)
            assert not sender.is_alive()
            assert r.returncode == 0, r.stderr
            second = attached_prog_id(net)
            time.sleep(0.3)
            got = counters(net, pin)
        finally:
            net.bpfdsl("detach", "--dev", net.xdp_dev)
    total = sum(sent)
    assert sent == [batch] * len(sent) and len(sent) < max_batches
    assert second != first and 0 < mid < total  # the update happened mid-stream
    assert sum(got) == total  # each frame went through exactly one program, both counted


@pytest.mark.kernel
def test_fresh_maps_start_over_and_incompatible_maps_are_refused(tmp_path):
    v1 = version(tmp_path, "rl1")
    small = version(tmp_path, "rl2", ("max_entries: 65536", "max_entries: 1024"))
    pin = bpffs_dir("rlf_")
    with veth_net("rf") as net:
        r = net.bpfdsl("attach", "xdp", str(v1), "--dev", net.xdp_dev, "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            assert net.send_udp(PORT, 20) == 20
            time.sleep(0.2)
            assert counters(net, pin) == (20, 0)
            first = attached_prog_id(net)
            listing = sorted(os.listdir(pin))
            r = net.bpfdsl("attach", "xdp", str(small), "--dev", net.xdp_dev, "--pin-dir", pin)
            assert r.returncode == 1
            assert "error[map-incompatible]: map 'buckets'" in r.stderr
            assert "max_entries 65536 (object: 1024)" in r.stderr
            assert "--fresh-maps" in r.stderr  # the hint
            assert attached_prog_id(net) == first  # nothing changed
            assert sorted(os.listdir(pin)) == listing and counters(net, pin) == (20, 0)
            assert not [
                d
                for d in os.listdir(os.path.dirname(pin))
                if d.startswith(os.path.basename(pin) + "_next_")
            ]  # fmt: skip (no staging dir left)
            r = net.bpfdsl("attach", "xdp", str(small), "--dev", net.xdp_dev, "--pin-dir",
                           pin, "--fresh-maps")  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert "kept the maps" not in r.stdout
            assert counters(net, pin) == (0, 0)
            assert attached_prog_id(net) != first
        finally:
            net.bpfdsl("detach", "--dev", net.xdp_dev)


@pytest.mark.kernel
def test_one_loaded_program_on_two_interfaces(tmp_path):
    pin = bpffs_dir("rl2_")
    with veth_net("ra") as a, veth_net("rb") as b:
        r = a.bpfdsl("load", str(PROG), "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            for net in (a, b):
                r = net.bpfdsl("attach", "xdp", pin, "--dev", net.xdp_dev)
                assert r.returncode == 0, r.stderr
            assert sorted(n for n in os.listdir(pin) if n.startswith("link_")) == sorted(
                os.path.basename(attach.link_pin_path(pin, n.xdp_dev)) for n in (a, b)
            )
            ids = {attached_prog_id(n) for n in (a, b)}
            assert len(ids) == 1  # the same program on both
            assert a.send_udp(PORT, 10) == 10 and b.send_udp(PORT, 7) == 7
            time.sleep(0.2)
            assert counters(a, pin) == (17, 0)  # one set of maps counts both
            r = a.bpfdsl("detach", "--dev", a.xdp_dev)
            assert r.returncode == 0 and "still pinned" in r.stdout
            assert attached_prog_id(b) in ids  # the other attachment stays
        finally:
            for net in (a, b):
                net.bpfdsl("detach", "--dev", net.xdp_dev)
            u = subprocess.run([sys.executable, "-m", "bpfdsl", "unload", pin],
                               capture_output=True, text=True, timeout=60)  # fmt: skip
    assert u.returncode == 0, u.stderr
    assert not os.path.exists(pin)
