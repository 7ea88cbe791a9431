"""progs/xdp_router.bpfd forwards for real: two hosts in their own namespaces, a router
namespace between them with the program on its interfaces and the kernel's own forwarding
blocked by an nft ``forward`` chain that drops everything (``ip_forward`` and IPv6
``forwarding`` stay 1: bpf_fib_lookup returns BPF_FIB_LKUP_RET_FWD_DISABLED without them,
net/core/filter.c).  Frames reach the far host only through XDP; scapy checks the TTL / hop
limit went down by one, the IPv4 checksum is right and the MACs are the router's and the
next hop's.  Without the program (the control run) nothing arrives."""

from __future__ import annotations

import struct
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest
from support.netns import capture, send_frames, veth_star
from support.paths import PROGS
from support.redirect_testlib import load_bpfdsl, percpu_sum

from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.attach import attach_xdp

pytestmark = pytest.mark.kernel


def ip(ns: str, *args: str) -> str:
    out = subprocess.run(
        ["ip", "-n", ns, *args], capture_output=True, text=True, timeout=20, check=True
    )
    return out.stdout


def sysctl(ns: str, key: str, value: str) -> None:
    with netlink.in_netns(ns), open(f"/proc/sys/{key.replace('.', '/')}", "w") as f:
        f.write(value)


def mac(ns: str, dev: str) -> str:
    return ip(ns, "-br", "link", "show", dev).split()[2]


@dataclass
class Routed:
    h1: str
    r: str
    h2: str
    a0: str  # h1's interface
    a1: str  # router, towards h1
    b1: str  # router, towards h2
    b0: str  # h2's interface


@contextmanager
def routed() -> Iterator[Routed]:
    """h1 (10.1.0.2, fd01::2) -- a1 [router] b1 -- h2 (10.2.0.2, fd02::2), static neighbours,
    kernel forwarding blocked in the router; removed on exit, also on failure."""
    tag = uuid.uuid4().hex[:6]
    t = Routed(f"rth1{tag}", f"rtr{tag}", f"rth2{tag}", *(f"rt{x}{tag}" for x in "wxyz"))
    ports = [(t.a1, t.a0, t.h1), (t.b1, t.b0, t.h2)]
    addrs = [("10.1.0.1", "10.1.0.2"), ("10.2.0.1", "10.2.0.2")]
    with veth_star(t.r, ports, addrs=addrs) as (_pa, pb):
        for ns, dev, v6 in (
            (t.h1, t.a0, "fd01::2/64"),
            (t.r, t.a1, "fd01::1/64"),
            (t.r, t.b1, "fd02::1/64"),
            (t.h2, t.b0, "fd02::2/64"),
        ):
            ip(ns, "-6", "addr", "add", v6, "dev", dev, "nodad")
        for ns, gw4, gw6 in ((t.h1, "10.1.0.1", "fd01::1"), (t.h2, "10.2.0.1", "fd02::1")):
            ip(ns, "route", "add", "default", "via", gw4)
            ip(ns, "-6", "route", "add", "default", "via", gw6)
        # the next hop is known, so bpf_fib_lookup gives SUCCESS (not NO_NEIGH)
        netlink.add_neighbour(t.b1, "10.2.0.2", pb.b.mac, netns=t.r)
        ip(t.r, "-6", "neigh", "add", "fd02::2", "lladdr", pb.b.mac, "dev", t.b1)
        sysctl(t.r, "net.ipv4.ip_forward", "1")
        sysctl(t.r, "net.ipv6.conf.all.forwarding", "1")
        with netlink.in_netns(t.r):
            subprocess.run(
                ["nft", "add table inet fib17; add chain inet fib17 block "
                 "{ type filter hook forward priority 0; policy drop; }"],
                check=True, timeout=20,
            )  # fmt: skip
        # a veth hands redirected frames to its peer only with GRO (or XDP) there
        with netlink.in_netns(t.h2):
            subprocess.run(["ethtool", "-K", t.b0, "gro", "on"], check=True, timeout=20)
        yield t


def frames4(t: Routed, n: int, ttl: int = 64) -> list[bytes]:
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    eth = Ether(src=mac(t.h1, t.a0), dst=mac(t.r, t.a1))
    return [
        bytes(
            eth / IP(src="10.1.0.2", dst="10.2.0.2", ttl=ttl, id=i) / UDP(sport=4000 + i, dport=7)
        )
        for i in range(n)
    ]


def frames6(t: Routed, n: int, hlim: int = 64) -> list[bytes]:
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    eth = Ether(src=mac(t.h1, t.a0), dst=mac(t.r, t.a1))
    return [
        bytes(
            eth
            / IPv6(src="fd01::2", dst="fd02::2", hlim=hlim, fl=0x12345)
            / UDP(sport=4000 + i, dport=7)
        )
        for i in range(n)
    ]


def received(t: Routed, frames: list[bytes]) -> list:
    """Send ``frames`` from h1; the UDP frames to port 7 that reach h2 (scapy packets)."""
    from scapy.layers.inet import UDP
    from scapy.layers.l2 import Ether

    with capture(t.h2, t.b0) as cap:
        send_frames(t.h1, t.a0, frames)
        got = [Ether(f) for f in cap.frames(quiet=0.5, limit=5.0)]
    return [p for p in got if UDP in p and p[UDP].dport == 7]


@pytest.fixture(scope="module")
def net() -> Iterator[tuple[Routed, dict]]:
    with ExitStack() as stack:
        t = stack.enter_context(routed())
        # control: with the kernel's forwarding blocked, nothing crosses without XDP
        assert received(t, frames4(t, 2)) == []
        ld = stack.enter_context(load_bpfdsl(PROGS / "xdp_router.bpfd"))
        with netlink.in_netns(t.r):
            for dev in (t.a1, t.b1):
                att = attach_xdp(ld.progs["xdp_router"], dev)
                if att.link_fd is not None:  # the link goes with its fd (and the netns)
                    stack.callback(att.link_fd.close)
            out = netlink.ifindex(t.b1)
            # a devmap names the device in the netns of the process updating it
            S.map_update(ld.maps["tx_ports"], struct.pack("<I", out), struct.pack("<Ii", out, 0))
        yield t, ld.maps


def test_ipv4_forwarded_by_xdp(net) -> None:
    from scapy.layers.inet import IP

    t, maps = net
    before = percpu_sum(maps["forwarded"], 0)
    got = received(t, frames4(t, 5))
    assert len(got) == 5
    assert percpu_sum(maps["forwarded"], 0) - before == 5
    for p in got:
        assert p.src == mac(t.r, t.b1) and p.dst == mac(t.h2, t.b0)
        assert p[IP].ttl == 63
        sent = p[IP].chksum
        p[IP].chksum = None
        assert IP(bytes(p[IP]))[IP].chksum == sent  # the incremental update is exact


def test_ipv6_forwarded_by_xdp(net) -> None:
    from scapy.layers.inet6 import IPv6

    t, maps = net
    before = percpu_sum(maps["forwarded"], 0)
    got = received(t, frames6(t, 5))
    assert len(got) == 5
    assert percpu_sum(maps["forwarded"], 0) - before == 5
    for p in got:
        assert p.src == mac(t.r, t.b1) and p.dst == mac(t.h2, t.b0)
        assert p[IPv6].hlim == 63 and p[IPv6].fl == 0x12345


def test_ttl_one_goes_to_the_stack(net) -> None:
    """TTL / hop limit 1: XDP_PASS (the stack answers time exceeded), never forwarded."""
    t, maps = net
    before = percpu_sum(maps["forwarded"], 0)
    assert received(t, frames4(t, 2, ttl=1) + frames6(t, 2, hlim=1)) == []
    assert percpu_sum(maps["forwarded"], 0) == before
