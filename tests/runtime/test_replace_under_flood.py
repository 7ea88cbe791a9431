"""Replacing an XDP program under a flood: 20 `bpfdsl attach` replaces, racing a second
series of attaches of the same pin dir, while the live-frame generator
(bpfdsl.bench.livegen: BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES) floods
the interface from its veth peer.  Every version counts the frames it runs on in its
own slot of one shared (reused) per-CPU array and drops them: the sum of the slots must
equal the frames XDP ran on (veth's ``xdp_packets``), all dropped (``xdp_drops``), and
every frame sent must have reached XDP (none lost between two programs)."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from support.netns import bpffs_dir, veth_net

from bpfdsl.bench.counters import xdp_counts
from bpfdsl.bench.livegen import LiveFrameGenerator
from bpfdsl.kernel import netlink
from bpfdsl.runtime import attach

SRC = """license "GPL"
config slot: u32 = 0
map seen: percpu_array<u64>(max_entries: 64)   // frames run on, by program version
xdp fn flood_count(ctx) {
    let eth = parse ethernet else { seen[63] += 1; return XDP_DROP }
    if eth.h_proto != ETH_P_IP { seen[63] += 1; return XDP_DROP }   // the stack's (ND, ...)
    seen[slot] += 1
    return XDP_DROP
}
"""
REPLACES, RACERS = 20, 5
OTHER = 63  # frames not from the generator (the namespace's own IPv6 ND, ...)
CHUNK = 2_000  # frames per BPF_PROG_TEST_RUN call


def seen(net, pin: str) -> dict[int, int]:
    r = net.bpfdsl("map", "dump", f"{pin}:seen", "--sum", "--json")
    assert r.returncode == 0, r.stderr
    return {e["key"]: e["value"] for e in json.loads(r.stdout)["entries"] if e["value"]}


@pytest.mark.kernel
def test_replaces_racing_an_attach_under_a_flood_lose_and_misjudge_no_frame(tmp_path):
    src = tmp_path / "flood_count.bpfd"
    src.write_text(SRC)
    pin = bpffs_dir("flood_")
    frame = bytes(Ether() / IP(src="10.7.0.2", dst="10.7.0.1") / UDP(sport=1, dport=9) / b"x")
    frame = frame.ljust(60, b"\0")
    with veth_net("fl") as net:

        def attach_slot(slot: int) -> None:
            r = net.bpfdsl("attach", str(src), net.xdp_dev, "--mode", "native", "--pin-dir",
                           pin, "--set", f"slot={slot}", timeout=120)  # fmt: skip
            assert r.returncode == 0, r.stderr

        attach_slot(0)
        try:
            stop = threading.Event()
            sent: list[int] = []
            errors: list[BaseException] = []

            def flood() -> None:
                try:
                    with netlink.in_netns(net.peer_ns):
                        with LiveFrameGenerator(netlink.ifindex(net.peer_dev), frame) as gen:
                            deadline = time.monotonic() + 180
                            while not stop.is_set() and time.monotonic() < deadline:
                                gen.send(CHUNK)
                                sent.append(CHUNK)
                except BaseException as e:
                    errors.append(e)

            def race() -> None:
                try:
                    for i in range(RACERS):
                        attach_slot(REPLACES + 1 + i)
                except BaseException as e:
                    errors.append(e)

            with net.in_xdp_ns():
                c0 = xdp_counts(net.xdp_dev)
            with netlink.in_netns(net.peer_ns):
                p0 = xdp_counts(net.peer_dev)
            flooder = threading.Thread(target=flood)
            racer = threading.Thread(target=race)
            flooder.start()
            try:
                t0 = time.monotonic()
                while not sent and time.monotonic() - t0 < 10:
                    time.sleep(0.01)
                racer.start()
                for slot in range(1, REPLACES + 1):
                    attach_slot(slot)
                racer.join(timeout=300)
                assert not racer.is_alive()
            finally:
                stop.set()
                flooder.join(timeout=60)
            assert not flooder.is_alive() and not errors, errors
            time.sleep(0.3)  # the last frames through NAPI
            with net.in_xdp_ns():
                c = xdp_counts(net.xdp_dev) - c0
            with netlink.in_netns(net.peer_ns):
                p = xdp_counts(net.peer_dev) - p0
            counted = seen(net, pin)
        finally:
            d = net.bpfdsl("detach", net.xdp_dev)
            assert d.returncode == 0, d.stderr
        with net.in_xdp_ns():
            assert attach.xdp_attachment(net.xdp_dev) is None
    assert not os.path.exists(pin)
    total = sum(sent)
    print(f"sent {total}, xdp {c}, peer {p}, by slot {counted}")
    assert p.xmit == total and p.xmit_errors == 0  # every frame sent went to the XDP end
    assert sum(counted.values()) == c.packets  # each frame ran through exactly one program
    assert sum(v for k, v in counted.items() if k != OTHER) == total  # none lost, none twice
    assert c.drop == c.packets and c.passed == 0 and c.rx_drops == 0  # each got its verdict
    assert len(set(counted) - {OTHER}) >= 3  # frames went through many versions
