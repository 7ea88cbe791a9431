"""Test frames shared by the engine-agreement tests: every protocol the programs parse, with
valid checksums, and their truncations."""

from __future__ import annotations


def corpus() -> list[bytes]:
    """Frames (Ethernet first) with valid checksums, plus every truncation >= 14 bytes."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP, IPOption_NOP
    from scapy.layers.inet6 import (
        IPv6,
        IPv6ExtHdrDestOpt,
        IPv6ExtHdrFragment,
        IPv6ExtHdrHopByHop,
        IPv6ExtHdrRouting,
    )
    from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    ip_ok = IP(src="10.0.0.1", dst="10.0.0.2")
    ip_bad = IP(src="192.0.2.77", dst="10.0.0.2")
    ip6_ok = IPv6(src="2001:db8::1", dst="2001:db8::2")
    ip6_bad = IPv6(src="2001:db8:bad::5", dst="2001:db8::2")
    pay = b"x" * 12
    l4s = [
        UDP(sport=1234, dport=9999) / pay,
        UDP(sport=1234, dport=53) / pay,
        TCP(sport=1234, dport=80, flags="S"),
        TCP(sport=1234, dport=9999) / pay,
    ]
    frames = []
    for ip in (ip_ok, ip_bad, IP(src="198.51.100.7", dst="10.0.0.9", ttl=3)):
        for l4 in l4s:
            frames.append(eth / ip / l4)
        frames.append(eth / ip / ICMP(type=8, id=7, seq=1) / pay)
        frames.append(eth / ip / ICMP(type=0, id=7, seq=1) / pay)
    frames.append(
        eth
        / IP(src="10.0.0.1", dst="10.0.0.2", options=[IPOption_NOP()] * 4)
        / UDP(dport=9999)
        / pay
    )
    for ip6 in (ip6_ok, ip6_bad):
        for l4 in l4s:
            frames.append(eth / ip6 / l4)
        frames.append(
            eth / ip6 / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt() / UDP(dport=9999) / pay
        )
        frames.append(
            eth / ip6 / IPv6ExtHdrRouting() / IPv6ExtHdrFragment() / UDP(dport=9999) / pay
        )
    for n_ext in (6, 7):  # the walk's bound: 6 extension headers pass, a 7th gives up
        f = eth / ip6_ok
        for _ in range(n_ext):
            f = f / IPv6ExtHdrDestOpt()
        frames.append(f / UDP(dport=9999) / pay)
    for tags in (
        [Dot1Q(vlan=5)],
        [Dot1AD(vlan=6), Dot1Q(vlan=7)],
        [Dot1AD(vlan=1), Dot1Q(vlan=2), Dot1Q(vlan=3)],
    ):
        for inner in (
            ip_bad / UDP(dport=9999) / pay,
            ip6_bad / UDP(dport=9999) / pay,
            ip_ok / TCP(dport=80),
        ):
            f = eth
            for t in tags:
                f = f / t
            frames.append(f / inner)
    lldp = Ether(src="02:00:00:00:00:01", dst="01:80:c2:00:00:0e", type=0x88CC)
    frames.append(bytes(lldp) + bytes(30))  # not IP
    out = []
    for f in frames:
        raw = bytes(f)
        out += [raw[:n] for n in range(14, len(raw) + 1)]
    return out
