"""Behaviour of the example programs and of language features, through BPF_PROG_TEST_RUN on
packets built with scapy (an independent packet library that also checks checksums)."""

from __future__ import annotations

import socket
import struct

import pytest
from support.flowhash import flow_hash
from support.progrun import (
    ICMP,
    IP,
    MAC_A,
    MAC_B,
    TCP,
    UDP,
    XDP_ABORTED,
    XDP_DROP,
    XDP_PASS,
    XDP_TX,
    Ether,
    IPv6,
    Prog,
    S,
    checksums_ok,
    cuts,
    eth,
    udp4,
)

from bpfdsl.compiler import compile_source

pytestmark = pytest.mark.kernel


# ---- xdp_pass / xdp_drop ----
def test_pass_and_drop_verdicts():
    with Prog("xdp_pass.bpfd") as p:
        assert p.verdict(udp4()) == XDP_PASS
    with Prog("xdp_drop.bpfd") as p:
        assert p.verdict(udp4()) == XDP_DROP


# ---- xdp_udp_filter ----
def test_udp_filter_drops_configured_port_and_counts():
    with Prog("xdp_udp_filter.bpfd") as p:
        assert p.verdict(udp4(9999)) == XDP_DROP
        assert p.verdict(udp4(53)) == XDP_PASS
        assert p.verdict(eth() / IP() / TCP(dport=9999)) == XDP_PASS
        assert p.verdict(eth() / IPv6() / UDP(dport=9999)) == XDP_DROP
        assert (p.counter("drops"), p.counter("passes")) == (2, 2)


def test_udp_filter_port_set_at_load_time():
    with Prog("xdp_udp_filter.bpfd", config={"port": 5353}) as p:
        assert p.verdict(udp4(5353)) == XDP_DROP
        assert p.verdict(udp4(9999)) == XDP_PASS


def test_udp_filter_ipv4_options_use_ihl():
    pkt = eth() / IP(ihl=7, proto=17) / (b"\x01" * 8) / UDP(dport=9999)
    with Prog("xdp_udp_filter.bpfd") as p:
        assert p.verdict(pkt) == XDP_DROP
        assert p.verdict(eth() / IP(ihl=4, proto=17) / UDP(dport=9999)) == XDP_PASS


@pytest.mark.parametrize(
    "ext",
    [["HopByHop"], ["HopByHop", "Routing", "DestOpt"], ["DestOpt", "Fragment"], ["HopByHop"] * 6],
)
def test_udp_filter_ipv6_extension_headers(ext):
    pkt = eth() / IPv6()
    for e in ext:
        pkt = pkt / S[f"IPv6ExtHdr{e}"]()
    with Prog("xdp_udp_filter.bpfd") as p:
        assert p.verdict(pkt / UDP(dport=9999)) == XDP_DROP
        assert p.verdict(pkt / UDP(dport=53)) == XDP_PASS


def test_udp_filter_too_many_extension_headers_pass():
    pkt = eth() / IPv6()
    for _ in range(7):
        pkt = pkt / S["IPv6ExtHdrDestOpt"]()
    with Prog("xdp_udp_filter.bpfd") as p:
        assert p.verdict(pkt / UDP(dport=9999)) == XDP_PASS


@pytest.mark.parametrize("family", ["ipv4", "ipv6", "ipv6-ext"])
def test_udp_filter_truncated_frames_take_else_path(family):
    if family == "ipv4":
        pkt, end = udp4(9999), 14 + 20 + 8
    elif family == "ipv6":
        pkt, end = eth() / IPv6() / UDP(dport=9999) / b"abcd", 14 + 40 + 8
    else:
        pkt = eth() / IPv6() / S["IPv6ExtHdrHopByHop"]() / UDP(dport=9999) / b"abcd"
        end = 14 + 40 + 8 + 8
    with Prog("xdp_udp_filter.bpfd") as p:
        for frame in cuts(pkt, 14, end):
            assert p.verdict(frame) == XDP_PASS, len(frame)
        assert p.counter("drops") == 0
        assert p.verdict(bytes(pkt)[:end]) == XDP_DROP


# ---- xdp_acl ----
def _acl_fill(p):
    p.update("v4_block", struct.pack("<I", 8) + socket.inet_aton("10.0.0.0"), b"\x01")
    p.update(
        "v6_block", struct.pack("<I", 32) + socket.inet_pton(socket.AF_INET6, "2001:db8::"), b"\x01"
    )


@pytest.mark.parametrize("tags", [[], ["Dot1Q"], ["Dot1AD", "Dot1Q"]])
def test_acl_blocks_prefixes_behind_vlans(tags):
    def frame(l3):
        pkt = eth()
        for t in tags:
            pkt = pkt / S[t](vlan=7)
        return pkt / l3 / UDP(dport=1)

    with Prog("xdp_acl.bpfd") as p:
        _acl_fill(p)
        assert p.verdict(frame(IP(src="10.1.2.3"))) == XDP_DROP
        assert p.verdict(frame(IP(src="11.1.2.3"))) == XDP_PASS
        assert p.verdict(frame(IPv6(src="2001:db8:1::5"))) == XDP_DROP
        assert p.verdict(frame(IPv6(src="2001:db9::5"))) == XDP_PASS
        assert (p.counter("dropped", 0), p.counter("dropped", 1)) == (1, 1)


def test_acl_truncated_frames_pass():
    with Prog("xdp_acl.bpfd") as p:
        _acl_fill(p)
        pkt = eth() / S["Dot1AD"](vlan=1) / S["Dot1Q"](vlan=2) / IP(src="10.0.0.1")
        for frame in cuts(pkt, 14, 14 + 8 + 20):
            assert p.verdict(frame) == XDP_PASS, len(frame)
        assert p.verdict(bytes(pkt)) == XDP_DROP


# ---- xdp_reflect / xdp_pong ----
@pytest.mark.parametrize("l4", ["udp", "tcp"])
def test_reflect_swaps_and_keeps_checksums(l4):
    seg = UDP(sport=1111, dport=2222) if l4 == "udp" else TCP(sport=1111, dport=2222, flags="S")
    pkt = eth() / IP(src="192.0.2.1", dst="198.51.100.7") / seg / b"hello"
    with Prog("xdp_reflect.bpfd") as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    o = Ether(out)
    assert (o.src, o.dst) == (MAC_B, MAC_A)
    assert (o[IP].src, o[IP].dst) == ("198.51.100.7", "192.0.2.1")
    layer = UDP if l4 == "udp" else TCP
    assert (o[layer].sport, o[layer].dport) == (2222, 1111)
    checksums_ok(out)


def test_reflect_passes_other_traffic():
    with Prog("xdp_reflect.bpfd") as p:
        assert p.verdict(eth() / IP() / ICMP()) == XDP_PASS
        assert p.verdict(eth() / IPv6() / UDP()) == XDP_PASS
        for frame in cuts(udp4(), 14, 42):
            assert p.verdict(frame) == XDP_PASS


def test_pong_answers_ping_with_valid_checksums():
    pkt = eth() / IP(src="192.0.2.1", dst="192.0.2.9", ttl=5) / ICMP(type=8, id=7, seq=1) / b"ab"
    with Prog("xdp_pong.bpfd") as p:
        rv, out = p.run(pkt)
        assert rv == XDP_TX
        o = Ether(out)
        assert (o[IP].src, o[IP].dst, o[IP].ttl, o[ICMP].type) == ("192.0.2.9", "192.0.2.1", 64, 0)
        checksums_ok(out)
        rv, out = p.run(eth() / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=5, dport=6))
        assert rv == XDP_TX
        o = Ether(out)
        assert (o[IPv6].src, o[IPv6].dst, o[IPv6].hlim) == ("2001:db8::2", "2001:db8::1", 64)
        assert (o[UDP].sport, o[UDP].dport) == (6, 5)
        checksums_ok(out)
        assert p.counter("reflected") == 2


# ---- xdp_vlan_strip (adjust_head) ----
@pytest.mark.parametrize("outer", ["Dot1Q", "Dot1AD"])
def test_vlan_strip_pops_outer_tag(outer):
    inner = IP(src="192.0.2.1", dst="192.0.2.2") / UDP(dport=7) / b"data"
    pkt = Ether(src=MAC_A, dst=MAC_B) / S[outer](vlan=42) / S["Dot1Q"](vlan=43) / inner
    want = Ether(src=MAC_A, dst=MAC_B) / S["Dot1Q"](vlan=43) / inner
    with Prog("xdp_vlan_strip.bpfd") as p:
        rv, out = p.run(pkt)
        assert rv == XDP_PASS
        assert out == bytes(want)
        rv, out = p.run(want)
        assert out == bytes(Ether(src=MAC_A, dst=MAC_B) / inner)
        assert p.counter("popped") == 2
        assert p.run(udp4())[1] == bytes(udp4())


# ---- checksum updates on field writes (RFC 1624 incl. pseudo-header) ----
NAT = """
license "GPL"
xdp fn nat(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        if ip6.nexthdr != IPPROTO_UDP { return XDP_PASS }
        let udp = parse udp else { return XDP_PASS }
        ip6.daddr = 2001:db8::99
        udp.dest = 8080
        return XDP_TX
    }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol == IPPROTO_UDP {
        let udp = parse udp else { return XDP_PASS }
        ip.daddr = 10.9.9.9
        udp.dest = 8080
        ip.ttl -= 1
        return XDP_TX
    }
    if ip.protocol == IPPROTO_TCP {
        let tcp = parse tcp else { return XDP_PASS }
        ip.saddr = 192.168.1.1
        tcp.source = 4444
        return XDP_TX
    }
    return XDP_PASS
}
"""


@pytest.mark.parametrize("case", ["udp4", "tcp4", "udp6"])
def test_field_writes_update_checksums(case):
    if case == "udp4":
        pkt = eth() / IP(src="203.0.113.5", dst="192.0.2.2", ttl=9) / UDP(sport=9, dport=53) / b"q"
    elif case == "tcp4":
        pkt = eth() / IP(src="203.0.113.5", dst="192.0.2.2") / TCP(sport=9, dport=80) / b"GET"
    else:
        pkt = eth() / IPv6(src="2001:db8::5", dst="2001:db8::6") / UDP(sport=9, dport=53) / b"q"
    with Prog(NAT) as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    o = Ether(out)
    if case == "udp4":
        assert (o[IP].dst, o[UDP].dport, o[IP].ttl) == ("10.9.9.9", 8080, 8)
    elif case == "tcp4":
        assert (o[IP].src, o[TCP].sport) == ("192.168.1.1", 4444)
    else:
        assert (o[IPv6].dst, o[UDP].dport) == ("2001:db8::99", 8080)
    checksums_ok(out)


def test_udp_zero_checksum_stays_zero():
    pkt = eth() / IP(src="203.0.113.5", dst="192.0.2.2") / UDP(sport=9, dport=53, chksum=0) / b"q"
    with Prog(NAT) as p:
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    o = Ether(out)
    assert o[UDP].chksum == 0 and o[IP].dst == "10.9.9.9"
    q = Ether(out)
    q[IP].chksum = None
    assert Ether(bytes(q))[IP].chksum == o[IP].chksum


# ---- FIELD-BUGS B04: packet length is a 64-bit scalar ----
def test_packet_length_threshold_b04():
    src = """license "GPL"
xdp fn minlen(ctx) {
    if ctx.len < 64 { return XDP_DROP }
    return XDP_PASS
}"""
    with Prog(src) as p:
        for n, want in ((14, XDP_DROP), (63, XDP_DROP), (64, XDP_PASS), (1500, XDP_PASS)):
            assert p.verdict(bytes(udp4())[:14] + b"\0" * (n - 14)) == want, n
    asm = compile_source(src, "t.bpfd", emit="asm").asm
    code = [ln.strip() for ln in asm.split("minlen:")[1].split(".Lfunc_end0")[0].splitlines()]
    import re

    assert any(re.fullmatch(r"r\d -= r\d", ln) for ln in code), code  # 64-bit data_end - data
    assert not any(re.match(r"w\d [-+*/|&^]?= w\d", ln) for ln in code), code  # no ALU32


# ---- FIELD-BUGS B07: struct with a 64-bit member after a 32-bit one ----
def test_struct_layout_natural_alignment_b07(tmp_path):
    src = """license "GPL"
struct rec { a: i32, b: i64 }
map recs: hash<u32, rec>(max_entries: 4)
xdp fn store_rec(ctx) {
    recs[0] = rec(a: ctx.ingress_ifindex as i32, b: 0x1122334455667788)
    return XDP_PASS
}"""
    with Prog(src) as p:
        assert p.verdict(udp4()) == XDP_PASS
        v = p.lookup("recs", struct.pack("<I", 0))
    assert len(v) == 16
    assert v[4:8] == b"\0\0\0\0"
    assert struct.unpack_from("<q", v, 8)[0] == 0x1122334455667788
    obj = tmp_path / "b07.o"
    obj.write_bytes(compile_source(src, "b07.bpfd").obj)
    import subprocess

    dump = subprocess.run(
        ["bpftool", "btf", "dump", "file", str(obj)], capture_output=True, text=True, timeout=30
    ).stdout
    assert "'a' type_id=" in dump and "bits_offset=0" in dump
    assert "'b' type_id=" in dump and "bits_offset=64" in dump


# ---- FIELD-BUGS B06: adjust_tail, then fresh pointers, bounded payload writes ----
B06 = """license "GPL"
config target: u32 = 4
map scratch: array<u32, u8>(max_entries: 32)
xdp fn respond(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let payload = ctx.len - 42
    let delta = (target as i64 - payload as i64) as i32
    if delta != 0 {
        if adjust_tail(delta) != 0 { return XDP_ABORTED }
    }
    let eth2 = parse ethernet else { return XDP_ABORTED }
    let ip2 = parse ipv4 else { return XDP_ABORTED }
    let udp2 = parse udp else { return XDP_ABORTED }
    for i in 0..32 {
        if i >= target { break }
        let b = parse byte else { break }
        let v = scratch.lookup(i) else { break }
        b.value = v
    }
    return XDP_TX
}"""


@pytest.mark.parametrize("target", [4, 20])
def test_adjust_tail_then_payload_writes_b06(target):
    pkt = udp4(payload=b"\xee" * 10)
    with Prog(B06, config={"target": target}) as p:
        for i in range(32):
            p.update("scratch", struct.pack("<I", i), bytes([0x40 + i]))
        rv, out = p.run(pkt)
    assert rv == XDP_TX
    assert len(out) == 42 + target
    assert out[42:] == bytes(0x40 + i for i in range(target))


# ---- redirect family: empty slots fall back as declared ----
@pytest.mark.parametrize(
    "name", ["xdp_xsk_redirect.bpfd", "xdp_devmap_forward.bpfd", "xdp_cpumap_steer.bpfd"]
)
def test_redirect_to_empty_slot_falls_back_to_pass(name):
    with Prog(name, config={"n_cpus": 2} if "cpumap" in name else None) as p:
        assert p.verdict(udp4()) == XDP_PASS


def test_hash_is_fnv1a_over_words_with_fmix32():
    src = """license "GPL"
map out: array<u32, u32>(max_entries: 1)
xdp fn h(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    out[0] = hash(ip.saddr, ip.daddr, ip.protocol)
    return XDP_PASS
}"""

    fnv1a = flow_hash

    with Prog(src) as p:
        p.verdict(udp4(src="10.1.2.3", dst="10.4.5.6"))
        got = struct.unpack("<I", p.lookup("out", struct.pack("<I", 0)))[0]
    word = lambda a: struct.unpack("<I", socket.inet_aton(a))[0]  # noqa: E731
    assert got == fnv1a(word("10.1.2.3"), word("10.4.5.6"), 17)


def test_redirect_to_ifindex_and_every_action():
    src = """license "GPL"
xdp fn act(ctx) {
    let eth = parse ethernet else { return XDP_ABORTED }
    let ip = parse ipv4 else { return XDP_PASS }
    match ip.tos {
        0 => return XDP_ABORTED,
        1 => return XDP_DROP,
        2 => return XDP_PASS,
        3 => return XDP_TX,
        4 => return XDP_REDIRECT,
        _ => {}
    }
    return redirect(1, 0)
}"""
    with Prog(src) as p:
        for tos in range(5):
            assert p.verdict(eth() / IP(tos=tos) / UDP()) == tos
        assert p.verdict(eth() / IP(tos=9) / UDP()) == 4  # bpf_redirect -> XDP_REDIRECT


def test_parse_in_loop_keeps_pointer_compares():
    """Found by mutation fuzzing: LLVM's loop passes turned two bounds checks in a loop into
    arithmetic on data_end, which the verifier rejects; the loop must load and verify."""
    src = """license "GPL"
xdp fn two_tags(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let proto = eth.h_proto
    for i in 0..2 {
        let tag = parse vlan else { return XDP_ABORTED }
        proto = tag.h_vlan_encapsulated_proto
    }
    if proto == ETH_P_IP { return XDP_DROP }
    return XDP_PASS
}"""
    with Prog(src) as p:
        qinq = eth() / S["Dot1AD"](vlan=1) / S["Dot1Q"](vlan=2) / IP() / UDP()
        assert p.verdict(qinq) == XDP_DROP
        assert p.verdict(bytes(qinq)[: 14 + 6]) == XDP_ABORTED


def test_division_by_zero_and_wide_shifts_follow_bpf():
    """x / 0 = 0, x % 0 = x and shift amounts modulo the width: the BPF ISA's rules, kept
    even where LLVM would call them undefined."""
    src = """license "GPL"
map out: array<u32, u64>(max_entries: 4)
xdp fn ub(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let d = ip.tos as u64
    out[0] = 100 / d
    out[1] = 100 % d
    out[2] = (1 as u64) << (ip.ttl as u64)
    return XDP_PASS
}"""
    with Prog(src) as p:
        for tos, ttl, want in ((0, 70, [0, 100, 64]), (7, 3, [14, 2, 8])):
            p.verdict(eth() / IP(tos=tos, ttl=ttl) / UDP())
            got = [struct.unpack("<Q", p.lookup("out", struct.pack("<I", i)))[0] for i in range(3)]
            assert got == want


def test_arrays_in_map_values_and_structs():
    src = """license "GPL"
struct s { a: [u8; 6], n: u32 }
map m: array<u32, [u64; 4]>(max_entries: 2)
map st: hash<u32, s>(max_entries: 2)
xdp(frags) fn f(ctx) {
    if let eth = parse ethernet {
        let k = s(n: 3)
        k.a[2] = 7
        st[1] = k
        if let v = m.lookup(1) {
            v[2] += 5
            v[0] = v[2] + 1
            for i in 0..4 { v[i] += 1 }
        }
    } else {
        return XDP_ABORTED
    }
    return XDP_PASS
}"""
    with Prog(src) as p:
        assert p.verdict(udp4()) == XDP_PASS
        assert struct.unpack("<4Q", p.lookup("m", struct.pack("<I", 1))) == (7, 1, 6, 1)
        assert p.lookup("st", struct.pack("<I", 1)) == bytes([0, 0, 7, 0, 0, 0, 0, 0, 3, 0, 0, 0])


@pytest.mark.parametrize("form", ["lookup", "fallback"])
def test_xskmap_both_forms_fall_back_to_pass_b10(form):
    body = {
        "lookup": """if let s = xsks.lookup(ctx.rx_queue_index) {
        if s.queue_id == ctx.rx_queue_index { return redirect_map(xsks, s.queue_id, XDP_DROP) }
    }
    return XDP_PASS""",
        "fallback": "return redirect_map(xsks, ctx.rx_queue_index, XDP_PASS)",
    }[form]
    src = f"""license "GPL"
map xsks: xskmap(max_entries: 64)
xdp fn xsk(ctx) {{
    {body}
}}"""
    with Prog(src) as p:
        assert p.verdict(udp4()) == XDP_PASS


def test_hash_spreads_flows_of_one_prefix():
    """Flows of one /8 (same low byte in every be32 word) spread over a power-of-two modulo."""
    src = """license "GPL"
map out: array<u32, u32>(max_entries: 1)
xdp fn h(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    out[0] = hash(ip.saddr, ip.daddr, ip.protocol) % 4
    return XDP_PASS
}"""
    with Prog(src) as p:
        for net in (
            lambda k: f"10.{k * 37 % 256}.{k * 11 % 256}.{k + 2}",  # one /8
            lambda k: f"192.168.1.{k * 13 % 256}",
        ):  # one /24: only the last octet
            seen = set()
            for k in range(16):
                p.verdict(udp4(src=net(k), dst="10.0.0.1"))
                seen.add(struct.unpack("<I", p.lookup("out", struct.pack("<I", 0)))[0])
            assert seen == {0, 1, 2, 3}


@pytest.mark.parametrize("seed", range(4))
def test_random_field_writes_keep_every_checksum_valid(seed):
    """Random header writes (IPv4 fields, addresses, ports, ICMP type, IPv6 addresses) on
    random packets: scapy recomputes every checksum and finds the one the program left."""
    import random

    rnd = random.Random(seed)
    v4 = [
        "ip.ttl = {u8}",
        "ip.tos = {u8}",
        "ip.id = {u16}",
        "ip.saddr = {ip4}",
        "ip.daddr = {ip4}",
        "ip.frag_off = 0",
        "ip.ttl -= 1",
    ]
    l4 = ["l4.source = {u16}", "l4.dest = {u16}"]
    v6 = ["ip6.saddr = {ip6}", "ip6.daddr = {ip6}", "ip6.hop_limit = {u8}"]

    def fill(s):
        return s.format(
            u8=rnd.randrange(256),
            u16=rnd.randrange(65536),
            ip4=".".join(str(rnd.randrange(256)) for _ in range(4)),
            ip6="2001:db8::" + format(rnd.randrange(65536), "x"),
        )

    kind = rnd.choice(["udp", "tcp"])
    w4 = [fill(rnd.choice(v4 + l4)) for _ in range(4)]
    w6 = [fill(rnd.choice(v6 + l4)) for _ in range(3)]
    src = f"""license "GPL"
xdp fn rw(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    if eth.h_proto == ETH_P_IP {{
        let ip = parse ipv4 else {{ return XDP_PASS }}
        let l4 = parse {kind} else {{ return XDP_PASS }}
        {chr(10).join("        " + w for w in w4)}
        return XDP_TX
    }}
    let ip6 = parse ipv6 else {{ return XDP_PASS }}
    let l4 = parse {kind} else {{ return XDP_PASS }}
    {chr(10).join("    " + w for w in w6)}
    return XDP_TX
}}"""
    seg = (
        (lambda: UDP(sport=rnd.randrange(65536), dport=rnd.randrange(65536)))
        if kind == "udp"
        else (
            lambda: TCP(
                sport=rnd.randrange(65536), dport=rnd.randrange(65536), seq=rnd.randrange(2**32)
            )
        )
    )
    with Prog(src) as p:
        for _ in range(8):
            pay = bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40)))
            ip4 = IP(
                src=f"198.51.100.{rnd.randrange(256)}",
                dst=f"203.0.113.{rnd.randrange(256)}",
                ttl=rnd.randrange(1, 256),
                id=rnd.randrange(65536),
            )
            for pkt in (
                eth() / ip4 / seg() / pay,
                eth()
                / IPv6(src="2001:db8::1", dst=f"2001:db8::{rnd.randrange(1, 999)}")
                / seg()
                / pay,
            ):
                rv, out = p.run(pkt)
                assert rv == XDP_TX
                checksums_ok(out)


def test_icmp_and_icmpv6_writes_keep_checksums():
    """ICMP checksums cover the ICMP message; ICMPv6's also the IPv6 pseudo-header."""
    from scapy.all import ICMPv6EchoRequest

    src = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        if ip6.nexthdr != IPPROTO_ICMPV6 { return XDP_PASS }
        let ic = parse icmpv6 else { return XDP_PASS }
        ip6.daddr = 2001:db8::77
        ic.icmp6_type = ICMPV6_ECHO_REPLY
        return XDP_TX
    }
    let ip = parse ipv4 else { return XDP_PASS }
    let ic = parse icmp else { return XDP_PASS }
    ic.type = ICMP_ECHOREPLY
    ic.sequence = 99
    ip.daddr = 10.1.1.1
    return XDP_TX
}"""
    v6 = eth() / IPv6(src="2001:db8::1", dst="2001:db8::2") / ICMPv6EchoRequest(id=5, data=b"hi")
    v4 = eth() / IP(src="10.0.0.1", dst="10.0.0.2") / ICMP(id=3, seq=4) / b"abc"
    with Prog(src) as p:
        for pkt in (v6, v4):
            rv, out = p.run(pkt)
            assert rv == XDP_TX
            layer = Ether(out).getlayer(2)
            field = "cksum" if hasattr(layer, "cksum") else "chksum"
            q = Ether(out)
            setattr(q.getlayer(2), field, None)
            assert getattr(Ether(bytes(q)).getlayer(2), field) == getattr(layer, field)
        assert Ether(p.run(v4)[1])[ICMP].seq == 99
