"""progs/xdp_ipip_encap.bpfd, xdp_vxlan_encap.bpfd, xdp_vxlan6_encap.bpfd and
xdp_gue_encap.bpfd on real traffic: UDP frames sent from the peer of a veth pair between
two test namespaces come back (XDP_TX, generic mode) encapsulated in outer headers whose
checksums, lengths and addresses scapy verifies on the wire."""

from __future__ import annotations

from typing import Any

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether
from support.netns import capture, veth_net
from support.paths import PROGS
from support.redirect_testlib import load_bpfdsl, quiet_ipv6

from bpfdsl.runtime.attach import attach_xdp

pytestmark = pytest.mark.kernel


def _through_the_program(
    tag: str, source: str, prog: str, n: int, fill: bytes, step: int
) -> tuple[Any, list[Ether]]:
    """``n`` UDP datagrams (payload ``fill`` * step * i bytes) sent into a veth pair whose
    XDP side runs ``prog`` of progs/``source`` (generic mode): the pair and the frames
    captured at the peer, as scapy Ethers."""
    with veth_net(tag) as net, load_bpfdsl(PROGS / source) as ld:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        with net.in_xdp_ns():
            att = attach_xdp(ld.progs[prog], net.xdp_dev, mode="generic")
        try:
            with capture(net.peer_ns, net.peer_dev) as cap:
                sent = [net.send_udp(7000 + i, 1, payload=fill * (step * i)) for i in range(n)]
                assert sum(sent) == n
                frames = [Ether(f) for f in cap.frames()]
        finally:
            if att.link_fd is not None:
                att.link_fd.close()
    return net, frames


def test_ipip_outer_checksums_on_the_wire() -> None:
    net, frames = _through_the_program("e24i", "xdp_ipip_encap.bpfd", "ipip_encap", 8, b"x", 7)
    outer = [f for f in frames if IP in f and f[IP].proto == 4]
    assert len(outer) == 8, [f.summary() for f in frames]
    for f in outer:
        o = f[IP]
        inner = o.payload
        assert isinstance(inner, IP) and UDP in inner
        assert (o.src, o.dst, o.ttl, o.ihl, o.flags, o.frag) == (
            "10.0.0.1",
            net.xdp_ip,
            64,
            5,
            0,
            0,
        )
        assert o.len == inner.len + 20
        hdr = IP(bytes(o)[:20])
        del hdr.chksum  # scapy computes it again when building the bytes
        assert o.chksum == IP(bytes(hdr)).chksum, hex(o.chksum)
        assert f.src == net.peer_mac and f.dst == net.xdp_mac  # the MACs kept


def test_vxlan_outer_headers_on_the_wire() -> None:
    """progs/xdp_vxlan_encap.bpfd: the outer IPv4 checksum verifies, the UDP checksum is 0
    (none, RFC 7348 over IPv4), the lengths count the inner frame, VNI 42."""
    net, frames = _through_the_program("e24v", "xdp_vxlan_encap.bpfd", "vxlan_encap", 6, b"y", 5)
    outer = [f for f in frames if UDP in f and f[UDP].dport == 4789]
    assert len(outer) == 6, [f.summary() for f in frames]
    for f in outer:
        o = f[IP]
        hdr = IP(bytes(o)[:20])
        del hdr.chksum
        assert o.chksum == IP(bytes(hdr)).chksum, hex(o.chksum)
        assert (o.src, o.dst, o.ttl, o.flags.DF) == ("10.0.0.1", "10.0.0.2", 64, True)
        u = o[UDP]
        assert u.chksum == 0 and 49152 <= u.sport
        vx = bytes(u.payload)
        assert vx[:8] == bytes.fromhex("0800000000002a00")  # I flag, VNI 42
        inner = Ether(vx[8:])
        assert o.len == 20 + 8 + 8 + len(vx[8:]) and u.len == 8 + len(vx)
        assert inner[IP].dst == net.xdp_ip and inner.src == net.peer_mac


def test_gue_outer_headers_on_the_wire() -> None:
    """progs/xdp_gue_encap.bpfd: the outer IPv4 checksum verifies, UDP to port 6080 with
    checksum 0 (allowed over IPv4), the GUE version 0 header (proto_ctype 4, hlen 0) and
    the inner datagram after it; the lengths count it."""
    net, frames = _through_the_program("e24g", "xdp_gue_encap.bpfd", "gue_encap", 6, b"g", 9)
    outer = [f for f in frames if UDP in f and f[UDP].dport == 6080]
    assert len(outer) == 6, [f.summary() for f in frames]
    for f in outer:
        o = f[IP]
        hdr = IP(bytes(o)[:20])
        del hdr.chksum  # scapy computes it again when building the bytes
        assert o.chksum == IP(bytes(hdr)).chksum, hex(o.chksum)
        assert (o.src, o.dst, o.ttl, o.proto) == ("10.0.0.1", net.xdp_ip, 64, 17)
        u = o[UDP]
        assert u.chksum == 0 and 49152 <= u.sport
        gue = bytes(u.payload)
        assert gue[:4] == bytes([0, 4, 0, 0]), gue[:4].hex()
        inner = IP(gue[4:])
        assert o.len == 32 + inner.len and u.len == 12 + inner.len
        assert inner.dst == net.xdp_ip and UDP in inner
        assert f.src == net.peer_mac and f.dst == net.xdp_mac  # the MACs kept


def test_vxlan_over_ipv6_udp_checksum_on_the_wire() -> None:
    """progs/xdp_vxlan6_encap.bpfd: the outer UDP checksum over the IPv6 pseudo-header and
    the whole inner frame (RFC 6935) verifies in scapy, the lengths count the inner frame."""
    net, frames = _through_the_program("e24s", "xdp_vxlan6_encap.bpfd", "vxlan6_encap", 6, b"z", 3)
    outer = [f for f in frames if IPv6 in f and UDP in f and f[UDP].dport == 4789]
    assert len(outer) == 6, [f.summary() for f in frames]
    for f in outer:
        u = f[UDP]
        again = f.copy()
        del again[UDP].chksum
        assert u.chksum == Ether(bytes(again))[UDP].chksum != 0, hex(u.chksum)
        inner = Ether(bytes(u.payload)[8:])
        assert f[IPv6].plen == u.len == 16 + len(inner)
        assert inner[IP].dst == net.xdp_ip and inner.src == net.peer_mac
