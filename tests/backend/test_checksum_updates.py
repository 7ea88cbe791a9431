"""Checksums the generated code keeps valid: pseudo-header writes whose L4 header is not in
scope, udp.len, swaps that keep the sums, and a payload write before XDP_TX (a warning
unless the UDP checksum is set).  Bytes are checked by an independent sum: scapy rebuilds
every checksum, or (udp.len) the RFC 768 sum over the pseudo-header with the written
length.  The statements that would break a checksum are compile errors
(tests/lang/errors/checksums/)."""

from __future__ import annotations

import struct

import pytest
from scapy.all import ICMPv6EchoRequest, IPv6ExtHdrHopByHop
from support.progrun import IP, TCP, UDP, XDP_TX, Ether, IPv6, Prog, checksums_ok, eth

from bpfdsl.compiler import compile_source

pytestmark = pytest.mark.kernel


def v6_l4_ok(frame: bytes) -> None:
    """scapy recomputes the UDP/TCP/ICMPv6 checksum of an IPv6 frame: it must be the sent one."""
    p = Ether(frame)
    for layer, field in ((UDP, "chksum"), (TCP, "chksum"), (ICMPv6EchoRequest, "cksum")):
        if layer in p:
            q = Ether(frame)
            q[layer].setfieldval(field, None)
            want = Ether(bytes(q))[layer].getfieldval(field)
            assert p[layer].getfieldval(field) == want, layer.__name__


PKTS = [
    eth() / IP(src="1.2.3.4", dst="5.6.7.8") / UDP(sport=1, dport=53) / b"hello",
    eth() / IP(src="1.2.3.4", dst="5.6.7.8", options=b"\x01\x01\x01\x00") / UDP(dport=53) / b"o",
    eth() / IP(src="1.2.3.4", dst="5.6.7.8") / TCP(sport=1, dport=80) / (b"x" * 9),
    eth() / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=5, dport=53) / b"v6",
    eth() / IPv6(src="fd00::1", dst="2001:db8::2") / IPv6ExtHdrHopByHop() / UDP(dport=7) / b"e",
    eth() / IPv6(src="fd00::1", dst="2001:db8::2") / TCP(sport=3, dport=4) / b"t",
    eth() / IPv6(src="2001:db8::1", dst="2001:db8::2") / ICMPv6EchoRequest(id=1, seq=2),
]

# (a) write before `parse udp`; (b) the L4 header was parsed in an inner block that ended
BEFORE_AND_AFTER = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        if ip6.nexthdr == IPPROTO_UDP {
            let u = parse udp else { return XDP_PASS }
            u.source = 7
        }
        ip6.saddr = 2001:db8:ffff::7
        return XDP_TX
    }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    ip.daddr = 172.16.1.1
    if ip.protocol == IPPROTO_UDP {
        let udp = parse udp else { return XDP_PASS }
        udp.dest = 99
    }
    ip.saddr = 100.64.0.1
    return XDP_TX
}"""


def test_address_writes_outside_the_l4_scope_update_l4_checksums():
    with Prog(BEFORE_AND_AFTER) as p:
        for pkt in PKTS:
            rv, out = p.run(pkt)
            assert rv == XDP_TX
            o = Ether(out)
            if IP in o:
                assert (o[IP].src, o[IP].dst) == ("100.64.0.1", "172.16.1.1")
                checksums_ok(out)
            else:
                assert o[IPv6].src == "2001:db8:ffff::7"
                v6_l4_ok(out)


def test_udp_len_write_counts_in_header_and_pseudo_header():
    src = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    udp.len = be16(host(udp.len) - 2)
    return XDP_TX
}"""
    pkt = eth() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=6) / b"abcdef"
    with Prog(src) as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    ip = out[14:34]
    ulen = struct.unpack(">H", out[38:40])[0]
    assert ulen == 8 + 6 - 2
    seg = out[34 : 34 + 8 + 6]  # the sum covers the bytes as sent (RFC 768 with len field)
    data = ip[12:20] + struct.pack(">BBH", 0, 17, ulen) + seg + b"\0" * (len(seg) % 2)
    s = sum(struct.unpack(f">{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    assert s == 0xFFFF


HEAD = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
"""


def test_swaps_that_keep_sums_still_compile_and_keep_them():
    src = (
        HEAD
        + """    let u = parse udp else { return XDP_PASS }
    swap(ip.saddr, ip.daddr)
    swap(u.source, u.dest)
    swap(ip.id, ip.frag_off)
    return XDP_TX
}"""
    )
    pkt = eth() / IP(src="1.2.3.4", dst="5.6.7.8", id=0x4000) / UDP(sport=1, dport=2) / b"zz"
    with Prog(src) as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    o = Ether(out)
    assert (o[IP].src, o[UDP].sport, o[IP].id, str(o[IP].flags)) == ("5.6.7.8", 2, 0, "DF")
    checksums_ok(out)


STAMP = """license "GPL"
map pattern: array<u32, u8>(max_entries: 16)
xdp fn stamp(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    for i in 0..4 {
        let b = parse byte else { break }
        let v = pattern.lookup(i) else { break }
        b.value = v + 1
    }
%s    return XDP_TX
}"""


def test_payload_write_before_xdp_tx_warns_unless_checksum_is_set():
    res = compile_source(STAMP % "", "s.bpfd")
    (w,) = [w for w in res.warnings if w.code == "payload-checksum"]
    assert (w.severity, w.span.line, w.span.col) == ("warning", 10, 9)
    assert "UDP checksum of `udp` (line 6) stale" in w.message
    fixed = STAMP % "    udp.check = 0\n"
    assert not [w for w in compile_source(fixed, "s.bpfd").warnings if w.code == "payload-checksum"]
    pkt = eth() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=5, dport=6) / b"abcdef"
    with Prog(fixed) as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    assert out[42:48] == b"\x01\x01\x01\x01ef"  # pattern is all zero: each byte becomes 1
    assert out[40:42] == b"\0\0"  # UDP over IPv4: no checksum, valid as sent
    q = Ether(out)
    del q[IP].chksum
    assert bytes(Ether(bytes(q)))[14:34] == out[14:34]
