"""IPv6 address writes and the L4 checksum when a Routing header is present (SRv6 SRH,
type 4; type 0): RFC 8200 section 8.1 -- the pseudo-header carries the FINAL destination,
the routing header's last address while segments_left > 0, so rewriting ``ip6.daddr``
then leaves the UDP/TCP/ICMPv6 checksum as it is; with segments_left == 0 (or no routing
header) ip6.daddr is the final destination and the checksum follows it.

Checked against scapy's own computation: ``in6_pseudoheader`` (scapy/layers/inet6.py) uses
``addresses[-1]`` of an IPv6ExtHdrRouting and ``addresses[0]`` of an
IPv6ExtHdrSegmentRouting (the SRH lists segments in reverse) when ``segleft != 0``.  Each
program runs on the kernel (BPF_PROG_TEST_RUN) and the interpreter (``bpf_program``)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import (
    ICMPv6EchoRequest,
    IPv6,
    IPv6ExtHdrFragment,
    IPv6ExtHdrHopByHop,
    IPv6ExtHdrRouting,
    IPv6ExtHdrSegmentRouting,
)
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"
SRC, DST, FINAL, SEG = "2001:db8:1::1", "2001:db8:2::2", "2001:db8:f::f", "2001:db8:3::3"
NEW_DST, NEW_SRC = "2001:db8:99::9", "2001:db8:88::8"

# the write after the L4 header was parsed (it is in scope) ...
IN_SCOPE = """license "GPL"
xdp fn rw(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IPV6 { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    let proto = skip_ext(ip6) else { return XDP_PASS }
    if proto == IPPROTO_UDP {
        let udp = parse udp else { return XDP_PASS }
        WRITE
        return XDP_TX
    }
    if proto == IPPROTO_TCP {
        let tcp = parse tcp else { return XDP_PASS }
        WRITE
        return XDP_TX
    }
    if proto == IPPROTO_ICMPV6 {
        let ic = parse icmpv6 else { return XDP_PASS }
        WRITE
        return XDP_TX
    }
    return XDP_PASS
}"""
# ... and before (the L4 header is found in the packet at run time)
RUNTIME = """license "GPL"
xdp fn rw(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IPV6 { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    WRITE
    return XDP_TX
}"""
WRITES = {
    "daddr": f"ip6.daddr = {NEW_DST}",
    "saddr": f"ip6.saddr = {NEW_SRC}",
    "swap": "swap(ip6.saddr, ip6.daddr)",
}


def l4s():
    return [
        UDP(sport=1234, dport=5678) / b"udp payload",
        TCP(sport=1234, dport=80, flags="S", seq=77) / b"tcp",
        ICMPv6EchoRequest(id=9, seq=2, data=b"ping"),
    ]


def frames() -> list[tuple[str, Ether, bool]]:
    """(name, frame, final destination in a routing header)."""
    out = []
    for l4 in l4s():
        kind = type(l4).__name__
        ip6 = IPv6(src=SRC, dst=DST)
        srh = IPv6ExtHdrSegmentRouting(addresses=[FINAL, DST], segleft=1)
        cases = [
            ("plain", ip6 / l4, False),
            ("srh", ip6 / srh / l4, True),
            ("srh-last", ip6 / IPv6ExtHdrSegmentRouting(addresses=[DST], segleft=0) / l4, False),
            ("rh0", ip6 / IPv6ExtHdrRouting(addresses=[SEG, FINAL], segleft=2) / l4, True),
            ("hbh-srh", ip6 / IPv6ExtHdrHopByHop() / srh / l4, True),
            ("frag0", ip6 / IPv6ExtHdrFragment(offset=0, m=0, id=5) / l4, False),
        ]
        for name, pkt, rh in cases:
            out.append((f"{kind}-{name}", Ether(src=MAC_A, dst=MAC_B) / pkt, rh))
    return out


def l4_layer(pkt: Ether):
    for layer in (UDP, TCP, ICMPv6EchoRequest):
        if layer in pkt:
            return pkt[layer]
    raise AssertionError("no L4 layer")


def _cksum(layer) -> int:
    return layer.cksum if hasattr(layer, "cksum") else layer.chksum


def scapy_checksum(raw: bytes) -> int:
    """The L4 checksum scapy computes for frame ``raw`` (its in6_chksum)."""
    pkt = Ether(raw)
    layer = l4_layer(pkt)
    setattr(layer, "cksum" if hasattr(layer, "cksum") else "chksum", None)
    return _cksum(l4_layer(Ether(bytes(pkt))))


def test_scapy_pseudo_header_uses_the_final_destination() -> None:
    """What the other tests rely on: scapy's checksum of a frame with an active routing
    header does not depend on ip6.dst, and does without one."""
    for name, frame, rh in frames():
        moved = frame.copy()
        moved[IPv6].dst = NEW_DST
        same = scapy_checksum(bytes(frame)) == scapy_checksum(bytes(moved))
        assert same == rh, name


@pytest.mark.parametrize("where", ["in_scope", "runtime"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_ipv6_address_writes_keep_l4_checksum_with_routing_headers(
    bpf_program, where, write
) -> None:
    src = (IN_SCOPE if where == "in_scope" else RUNTIME).replace("WRITE", WRITES[write])
    prog = bpf_program(compile_source(src, f"srv6_{where}_{write}.bpfd").obj)
    for name, frame, rh in frames():
        raw = bytes(frame)
        r = prog.run(raw)
        assert r.verdict == "XDP_TX", name
        out = Ether(r.data_out)
        want_src, want_dst = {
            "daddr": (SRC, NEW_DST),
            "saddr": (NEW_SRC, DST),
            "swap": (DST, SRC),
        }[write]
        assert (out[IPv6].src, out[IPv6].dst) == (want_src, want_dst), name
        got = _cksum(l4_layer(out))
        assert got == scapy_checksum(r.data_out), f"{name}: L4 checksum is not scapy's"
        if write == "daddr":  # the final destination did not change: nor may the sum
            assert (got == _cksum(l4_layer(Ether(raw)))) == rh, name


def test_later_fragment_payload_is_not_taken_for_an_l4_header(bpf_program) -> None:
    """A non-first fragment carries no L4 header: a pseudo-header write found at run time
    must not touch its payload (bytes where a UDP checksum would sit)."""
    prog = bpf_program(compile_source(RUNTIME.replace("WRITE", WRITES["saddr"]), "frag.bpfd").obj)
    body = bytes(range(40))
    frame = (
        Ether(src=MAC_A, dst=MAC_B)
        / IPv6(src=SRC, dst=DST)
        / IPv6ExtHdrFragment(nh=17, offset=8, m=0, id=5)
        / body
    )
    r = prog.run(frame)
    assert r.verdict == "XDP_TX"
    assert r.data_out[-len(body) :] == body
    assert Ether(r.data_out)[IPv6].src == NEW_SRC


MANUAL = """license "GPL"
xdp fn rw(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IPV6 { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    if ip6.nexthdr != 43 { return XDP_PASS }
    for i in 0..40 {
        let skipped = parse byte else { return XDP_PASS }
    }
    let udp = parse udp else { return XDP_PASS }
    ip6.daddr = NEW
    return XDP_TX
}""".replace("NEW", NEW_DST)


@pytest.mark.parametrize("segleft", [0, 1])
def test_daddr_write_behind_a_routing_header_parsed_by_hand(bpf_program, segleft) -> None:
    """The L4 header in scope without skip_ext (here: a 40-byte SRH skipped byte by
    byte): the write walks the extension headers itself to find the routing header."""
    prog = bpf_program(compile_source(MANUAL, f"srv6_manual_{segleft}.bpfd").obj)
    addrs = [FINAL, DST] if segleft else [DST, SEG]
    srh = IPv6ExtHdrSegmentRouting(addresses=addrs, segleft=segleft)
    raw = bytes(
        Ether(src=MAC_A, dst=MAC_B) / IPv6(src=SRC, dst=DST) / srh / UDP(sport=7, dport=9) / b"x"
    )
    assert len(srh) == 40
    r = prog.run(raw)
    assert r.verdict == "XDP_TX"
    out = Ether(r.data_out)
    assert out[IPv6].dst == NEW_DST
    assert out[UDP].chksum == scapy_checksum(r.data_out)
    assert (out[UDP].chksum == Ether(raw)[UDP].chksum) == bool(segleft)
