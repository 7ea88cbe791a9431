"""Several L4 views under one IP header: an IP address write updates the pseudo-header
checksum of exactly the L4 header that follows that IP header on the path taken -- never a
"checksum" inside the payload (a second ``parse udp`` reads the payload), never anything
in a later fragment (no L4 header there).  Checked on both engines: output bytes parsed by
scapy, every checksum recomputed, the payload byte for byte as sent."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment
from scapy.layers.l2 import Ether
from scapy.packet import Raw

from bpfdsl.compiler import compile_source

PAYLOAD = bytes(range(0x41, 0x41 + 24))  # bytes 6..7 (an inner "udp.check") are 0x47 0x48
HEAD = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
"""
PROGRAMS = {
    "sequential": """
    let udp = parse udp else { return XDP_PASS }
    let inner = parse udp else { return XDP_PASS }
    ip.daddr = 10.9.9.9
    return XDP_TX
}""",
    "after_a_branch": """
    if ip.ttl == 64 {
        let a = parse udp else { return XDP_PASS }
        a.source = 7
    }
    let b = parse udp else { return XDP_PASS }
    ip.daddr = 10.9.9.9
    return XDP_TX
}""",
    "after_match_arms": """
    match ip.ttl {
        64 => { let a = parse udp else { return XDP_PASS } }
        63 => { let c = parse ethernet else { return XDP_PASS } }
        _ => {}
    }
    let b = parse udp else { return XDP_PASS }
    ip.saddr = 10.8.8.8
    return XDP_TX
}""",
    "in_a_loop": """
    for i in 0..2 {
        let u = parse udp else { return XDP_PASS }
        if i == 1 { ip.daddr = 10.9.9.9 }
    }
    return XDP_TX
}""",
    "in_if_let": """
    if let u = parse udp {
        if let v = parse udp { ip.daddr = 10.9.9.9 }
        ip.saddr = 10.8.8.8
    }
    return XDP_TX
}""",
}


def udp4(ttl: int = 64, **ip):
    return (Ether(dst="02:00:00:00:00:02", src="02:00:00:00:00:01")
            / IP(src="192.0.2.1", dst="198.51.100.7", ttl=ttl, **ip)
            / UDP(sport=4000, dport=53) / PAYLOAD)  # fmt: skip


def checksums_ok(frame: bytes) -> None:
    """scapy recomputes the IPv4 and UDP checksums of ``frame``: each equals the one sent."""
    for layer in (IP, UDP):
        q = Ether(frame)
        q[layer].chksum = None
        assert Ether(frame)[layer].chksum == Ether(bytes(q))[layer].chksum, layer.__name__


@pytest.mark.parametrize("ttl", [64, 63, 1])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_address_write_updates_only_the_l4_header_after_the_ip_header(bpf_program, name, ttl):
    prog = bpf_program(compile_source(HEAD + PROGRAMS[name], f"{name}.bpfd").obj)
    sent = udp4(ttl)
    res = prog.run(sent)
    assert res.verdict == "XDP_TX"
    out = Ether(res.data_out)
    assert bytes(out[UDP].payload) == PAYLOAD
    assert out[IP].dst in ("10.9.9.9", sent[IP].dst) and out[IP].src in ("10.8.8.8", "192.0.2.1")
    assert (out[IP].src, out[IP].dst) != (sent[IP].src, sent[IP].dst)
    checksums_ok(res.data_out)


def test_later_ipv4_fragment_keeps_its_payload(bpf_program):
    """A fragment with offset != 0 holds payload where ``parse udp`` looks: only the IPv4
    header (and its checksum) changes."""
    prog = bpf_program(compile_source(HEAD + PROGRAMS["sequential"], "frag.bpfd").obj)
    sent = Ether() / IP(src="192.0.2.1", dst="198.51.100.7", proto=17, frag=100) / Raw(PAYLOAD)
    res = prog.run(sent)
    assert res.verdict == "XDP_TX"
    out = Ether(res.data_out)
    assert out[IP].dst == "10.9.9.9" and bytes(out[IP].payload) == PAYLOAD
    q = Ether(res.data_out)
    q[IP].chksum = None
    assert Ether(bytes(q))[IP].chksum == out[IP].chksum


V6 = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    let nh = skip_ext(ip6) else { return XDP_PASS }
    if nh != IPPROTO_UDP { return XDP_PASS }
    let u = parse udp else { return XDP_PASS }
    let inner = parse udp else { return XDP_PASS }
    ip6.saddr = 2001:db8::99
    return XDP_TX
}"""


@pytest.mark.parametrize("fragment", [False, True])
def test_ipv6_address_write_behind_extension_headers(bpf_program, fragment):
    """After skip_ext: the UDP header past the extension headers is updated, the view in
    the payload is not; in a later fragment nothing past the IPv6 header changes."""
    prog = bpf_program(compile_source(V6, "v6.bpfd").obj)
    ip6 = IPv6(src="2001:db8::1", dst="2001:db8::2")
    if fragment:
        sent = Ether() / ip6 / IPv6ExtHdrFragment(nh=17, offset=8, m=0, id=7) / Raw(PAYLOAD)
    else:
        sent = Ether() / ip6 / UDP(sport=4000, dport=53) / PAYLOAD
    res = prog.run(sent)
    assert res.verdict == "XDP_TX"
    out = Ether(res.data_out)
    assert out[IPv6].src == "2001:db8::99"
    if fragment:  # the fragment header and the payload after it: as sent
        assert res.data_out[14 + 40 :] == bytes(sent)[14 + 40 :]
    else:  # the UDP checksum covers the new source; the payload is as sent
        assert res.data_out[14 + 40 + 8 :] == PAYLOAD
        q = Ether(res.data_out)
        q[UDP].chksum = None
        assert Ether(bytes(q))[UDP].chksum == out[UDP].chksum != sent[UDP].chksum
