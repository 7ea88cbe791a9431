"""The example programs of progs/ do what their comments say, on the kernel
(BPF_PROG_TEST_RUN) and on the userspace interpreter alike: every test runs once per
engine through the plugin's ``bpf_program`` fixture (``bpf_engine`` parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether

PROGS = Path(__file__).resolve().parent.parent / "progs"
MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


def prog_path(name: str) -> Path:
    p = PROGS / name
    if not p.exists():
        pytest.skip(f"progs/{name} is not written yet")
    return p


def udp4(src: str = "10.1.2.3", dport: int = 9999) -> Ether:
    return (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src=src, dst="10.9.9.9")
        / UDP(sport=1234, dport=dport)
        / b"payload!"
    )


def checksums_valid(frame: bytes) -> bool:
    """True when every IP/UDP/TCP/ICMP checksum in ``frame`` equals a fresh computation."""
    pkt = Ether(frame)
    fresh = pkt.copy()
    for layer in (IP, UDP, TCP, ICMP):
        if layer in fresh:
            fresh[layer].chksum = None
    fresh = Ether(bytes(fresh))
    return all(pkt[la].chksum == fresh[la].chksum for la in (IP, UDP, TCP, ICMP) if la in pkt)


def test_progs_xdp_pass_and_drop(bpf_program) -> None:
    assert bpf_program(prog_path("xdp_pass.bpfd")).run(udp4()).verdict == "XDP_PASS"
    assert bpf_program(prog_path("xdp_drop.bpfd")).run(udp4()).verdict == "XDP_DROP"


def test_progs_udp_filter_drops_port_and_counts(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_udp_filter.bpfd"))
    r = prog.run(udp4(dport=9999))
    assert r.verdict == "XDP_DROP"
    assert prog.run(udp4(dport=53)).verdict == "XDP_PASS"
    v6 = Ether() / IPv6(src="fd00::1", dst="fd00::2") / UDP(dport=9999) / b"x"
    assert prog.run(v6).verdict == "XDP_DROP"
    assert prog.maps["drops"].total(0) == 2
    assert prog.maps["passes"].total(0) == 1


def test_progs_udp_filter_port_is_a_load_time_config(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_udp_filter.bpfd"), config={"port": 5353})
    assert prog.run(udp4(dport=5353)).verdict == "XDP_DROP"
    assert prog.run(udp4(dport=9999)).verdict == "XDP_PASS"


def _v4_prefix(addr: str, plen: int) -> bytes:
    return plen.to_bytes(4, "little") + bytes(int(x) for x in addr.split("."))


def test_progs_acl_longest_prefix_and_vlan(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_acl.bpfd"))
    prog.maps["v4_block"].set(_v4_prefix("10.0.0.0", 8), 1)
    assert prog.run(udp4(src="10.200.1.1")).verdict == "XDP_DROP"
    assert prog.run(udp4(src="11.0.0.1")).verdict == "XDP_PASS"
    tagged = Ether() / Dot1AD(vlan=5) / Dot1Q(vlan=7) / IP(src="10.1.1.1") / UDP() / b"x"
    assert prog.run(tagged).verdict == "XDP_DROP"
    v6key = (48).to_bytes(4, "little") + bytes.fromhex("fd000000000a") + bytes(10)
    prog.maps["v6_block"].set(v6key, 1)
    v6 = Ether() / IPv6(src="fd00:0:a::5", dst="fd00::1") / UDP() / b"x"
    assert prog.run(v6).verdict == "XDP_DROP"
    assert prog.maps["dropped"].total(0) == 2
    assert prog.maps["dropped"].total(1) == 1


def test_progs_reflect_swaps_and_keeps_checksums(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_reflect.bpfd"))
    r = prog.run(udp4(src="10.1.2.3", dport=7))
    assert r.verdict == "XDP_TX"
    out = r.packet
    assert (out.src, out.dst) == (MAC_B, MAC_A)
    assert (out[IP].src, out[IP].dst) == ("10.9.9.9", "10.1.2.3")
    assert (out[UDP].sport, out[UDP].dport) == (7, 1234)
    assert checksums_valid(r.data_out)


def test_progs_pong_answers_ping_with_valid_checksums(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_pong.bpfd"))
    ping = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.0.0.1", dst="10.0.0.2", ttl=9)
        / ICMP(type=8, id=3, seq=1)
        / b"abc"
    )
    r = prog.run(ping)
    assert r.verdict == "XDP_TX"
    out = r.packet
    assert out[ICMP].type == 0 and out[IP].ttl == 64
    assert (out[IP].src, out[IP].dst) == ("10.0.0.2", "10.0.0.1")
    assert checksums_valid(r.data_out)
    assert prog.run(Ether() / IP() / ICMP(type=0)).verdict == "XDP_PASS"
    assert prog.maps["reflected"].total(0) == 1


def test_progs_vlan_strip_pops_outer_tag(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_vlan_strip.bpfd"))
    inner = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=5) / b"data"
    r = prog.run(Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=42) / inner)
    assert r.verdict == "XDP_PASS"
    assert r.data_out == bytes(Ether(src=MAC_A, dst=MAC_B, type=0x0800) / inner)
    assert prog.run(udp4()).data_out == bytes(udp4())  # untagged: unchanged
    assert prog.maps["popped"].total(0) == 1
