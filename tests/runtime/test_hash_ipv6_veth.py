"""IPv6 flow steering on a real veth (progs/xdp_cpumap_steer6.bpfd): flows of one /64
arrive on the CPU the Python model of hash() selects (counted by the on-CPU program per
CPU), and both CPUs get flows.  The test-run side (slot = model on kernel and
interpreter) is tests/backend/test_hash_ipv6.py."""

from __future__ import annotations

import time

import pytest
from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from support.netns import send_frames, veth_net
from support.paths import PROGS
from support.redirect_testlib import Loaded, load_bpfdsl, percpu_values, quiet_ipv6
from support.steer6 import flow_slot

from bpfdsl.abi.flags import XdpFlags
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import cpumap_set

pytestmark = pytest.mark.kernel
PROG = PROGS / "xdp_cpumap_steer6.bpfd"
N = 20  # frames per flow


def wait_total(ld: Loaded, want: int, limit: float = 5.0) -> list[int]:
    """Per-CPU on-CPU counters once their sum reaches ``want`` (or after ``limit`` s)."""
    end = time.monotonic() + limit
    while True:
        vals = percpu_values(ld.maps["on_cpu_count"], 0)
        if sum(vals) >= want or time.monotonic() > end:
            return vals
        time.sleep(0.02)


def test_ipv6_flows_of_one_64_land_on_the_hashed_cpu() -> None:
    if S.possible_cpus() < 2:
        pytest.skip("needs at least 2 CPUs")
    with load_bpfdsl(PROG, config={"n_cpus": 2, "drop_port": 9}) as ld:
        for slot in (0, 1):
            S.map_update(ld.maps["cpus"], slot.to_bytes(4, "little"), slot.to_bytes(4, "little"))
            cpumap_set(
                ld.maps["cpu_map"],
                slot,
                192,
                ld.progs["on_cpu"],
                map_name="cpu_map",
                prog_name="on_cpu",
            )
        with veth_net("s6") as net:
            quiet_ipv6(net.xdp_ns)
            quiet_ipv6(net.peer_ns)
            with net.in_xdp_ns():
                netlink.xdp_set(
                    netlink.ifindex(net.xdp_dev),
                    int(ld.progs["steer6"]),
                    XdpFlags.DRV_MODE,
                    dev=net.xdp_dev,
                )
            flows = {}
            for k in range(8):
                frame = (
                    Ether(src=net.peer_mac, dst=net.xdp_mac)
                    / IPv6(src=f"2001:db8:5:6::{k * 0x101 + 3:x}", dst="2001:db8:9::1")
                    / UDP(sport=4000, dport=4001)
                    / b"steer me"
                )
                flows[frame[IPv6].src] = (frame, flow_slot(frame, 2))  # slot == CPU here
            assert {cpu for _f, cpu in flows.values()} == {0, 1}, "flows must cover both CPUs"
            before = percpu_values(ld.maps["on_cpu_count"], 0)
            for src, (frame, cpu) in flows.items():
                assert send_frames(net.peer_ns, net.peer_dev, [bytes(frame)] * N) == N
                after = wait_total(ld, sum(before) + N)
                delta = [a - b for a, b in zip(after, before, strict=True)]
                want = [N if c == cpu else 0 for c in range(len(delta))]
                assert delta == want, f"flow from {src}: per-CPU counts {delta}, hash says {want}"
                before = after
