"""A devmap redirect into a veth whose peer has no XDP program loses every frame (veth
drops XDP_REDIRECTed frames unless the peer has an XDP program or GRO: the veth lacks
NETDEV_XDP_ACT_NDO_XMIT).  ``bpfdsl devmap set`` and ``bpfdsl attach`` say so, naming the
device, its peer and the remedy; the test shows on the kernel that the frames really are
lost, and that the remedy the warning gives makes them arrive.

Topology (made here, removed on exit): namespace R with ports ra, rb whose veth peers a, b
sit in namespaces A, B.  The forward program on ra redirects by ingress ifindex through the
devmap_hash tx_ports (progs/xdp_devmap_forward.bpfd) to rb, which delivers to b.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import uuid
from contextlib import contextmanager

import pytest
from support.netns import bpffs_dir, capture, send_frames, veth_star
from support.paths import ROOT

from bpfdsl.abi.net import NETDEV_XDP_ACT_NDO_XMIT
from bpfdsl.kernel import netlink
from bpfdsl.runtime.packets import udp_frame

pytestmark = pytest.mark.kernel
FORWARD = ROOT / "progs" / "xdp_devmap_forward.bpfd"
PASS = ROOT / "progs" / "xdp_pass.bpfd"
N = 20


def bpfdsl(*args: str, ns: str | None = None) -> subprocess.CompletedProcess:
    pre = ["nsenter", f"--net={netlink.NETNS_RUN_DIR}/{ns}"] if ns else []
    return subprocess.run(
        [*pre, sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@contextmanager
def topology():
    tag = uuid.uuid4().hex[:6]
    r, a, b = f"vwr{tag}", f"vwa{tag}", f"vwb{tag}"
    ports = [(f"ra{tag}", a, a), (f"rb{tag}", b, b)]  # each peer named as its namespace
    with veth_star(r, ports, disable_ipv6=True) as (pa, pb):
        yield r, a, b, pa.a.name, pb.a.name, {a: pa.b.mac, b: pb.b.mac}


def _frames(mac: str, marker: bytes) -> list[bytes]:
    return [
        udp_frame(
            src_mac=mac,
            dst_mac="ff:ff:ff:ff:ff:ff",
            src_ip="192.0.2.1",
            dst_ip="192.0.2.255",
            sport=5000,
            dport=6000,
            payload=marker + struct.pack("!I", i),
            ident=i,
        )
        for i in range(N)
    ]


def _arrived(a: str, b: str, mac: str) -> int:
    marker = b"VETHW-" + uuid.uuid4().bytes[:8]
    with capture(b, b) as cap:
        assert send_frames(a, a, _frames(mac, marker)) == N
        return sum(marker in f for f in cap.frames())


def test_redirect_into_veth_without_peer_xdp_warns_and_really_drops() -> None:
    pin, pass_pin = bpffs_dir("bpfdsl_vw_"), bpffs_dir("bpfdsl_vwp_")
    with topology() as (r, a, b, ra, rb, macs):
        try:
            p = bpfdsl("load", str(FORWARD), "--pin-dir", pin)
            assert p.returncode == 0, p.stderr
            # devmap set: rb's peer b has no XDP program
            p = bpfdsl("--json", "devmap", "set", f"{pin}:tx_ports", ra, rb, "--netns", r)
            assert p.returncode == 0, p.stderr
            out = json.loads(p.stdout)
            (w,) = out["warnings"]
            assert f"{rb} is a veth and its peer {b} (network namespace {b})" in w
            assert "has no XDP program" in w and "drops every frame" in w
            assert "warning[redirect-target-drops]" in p.stderr
            remedy = f"nsenter --net=/run/netns/{b} bpfdsl attach progs/xdp_pass.bpfd --dev {b}"
            assert remedy in p.stderr and f"ethtool -K {b} gro on" in p.stderr
            # attach: the program's devmap already points there, so attach says it too
            p = bpfdsl("attach", pin, "--prog", "forward", "--dev", ra, ns=r)
            assert p.returncode == 0, p.stderr
            assert f"devmap 'tx_ports' key {out['key']}: {rb} is a veth" in p.stderr
            # the kernel: every frame redirected into rb is lost
            assert _arrived(a, b, macs[a]) == 0
            # the remedy the warning names: an XDP program on the peer
            p = bpfdsl("attach", str(PASS), "--dev", b, "--pin-dir", pass_pin, ns=b)
            assert p.returncode == 0, p.stderr
            p = bpfdsl("--json", "devmap", "set", f"{pin}:tx_ports", ra, rb, "--netns", r)
            assert p.returncode == 0 and json.loads(p.stdout)["warnings"] == [], p.stderr
            assert "warning" not in p.stderr
            assert _arrived(a, b, macs[a]) == N
        finally:
            bpfdsl("detach", "--dev", b, ns=b)
            bpfdsl("detach", "--dev", ra, ns=r)
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)
            shutil.rmtree(pass_pin, ignore_errors=True)


def test_redirect_target_problem_cases() -> None:
    """GRO on the peer also gives the veth NDO_XMIT (no warning); a peer that is down
    takes the carrier away (warning); loopback cannot transmit redirected frames."""
    with topology() as (r, a, b, ra, rb, _macs):
        with netlink.in_netns(r):
            idx = netlink.ifindex(rb)
            assert "has no XDP program" in netlink.redirect_target_problem(idx)[0]
        if shutil.which("ethtool") is not None:
            subprocess.run(
                ["nsenter", f"--net=/run/netns/{b}", "ethtool", "-K", b, "gro", "on"],
                check=True,
                capture_output=True,
            )
            with netlink.in_netns(r):
                assert netlink.xdp_features(idx) & NETDEV_XDP_ACT_NDO_XMIT
                assert netlink.redirect_target_problem(idx) is None
            subprocess.run(
                ["nsenter", f"--net=/run/netns/{b}", "ip", "link", "set", b, "down"],
                check=True,
                capture_output=True,
            )
            with netlink.in_netns(r):
                assert "without carrier" in netlink.redirect_target_problem(idx)[0]
        with netlink.in_netns(r):
            assert (
                "cannot transmit XDP-redirected frames"
                in (netlink.redirect_target_problem(netlink.ifindex("lo"))[0])
            )
