"""`push` and `pop` (docs/language.md "Pushing and popping headers", issue #24).

The tunnel programs of progs/ are written with them; their adjust_head versions (a struct,
csum_fold(csum_diff(...)), adjust_head, parse, field copies) are kept in
tests/data/encap_workaround.  On the kernel (BPF_PROG_TEST_RUN with data_out) and on the
interpreter, each gives the same verdict, bytes and counters as its workaround version on
the frame corpus plus tunnel frames; the outer headers a push builds are checked with
scapy (IPv4 checksum, lengths, UDP checksum 0 over IPv4, the kept Ethernet header); a
pushed view is usable (its fields read and written, checksum kept); and what push cannot
build right is a located compile error.  Their C twins (tests/data/c) give the same
verdicts and bytes on both engines (here and tests/progs/test_cref_equiv.py) and tests/progs/test_encap_size.py (insns and
verifier-processed counts against clang-19)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption_NOP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, Dot1Q, Ether
from scapy.layers.vxlan import VXLAN
from support.frames import corpus
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

PROGS = ROOT / "progs"
OLD = ROOT / "tests" / "data" / "encap_workaround"
ENCAPS = ["xdp_ipip_encap", "xdp_vxlan_encap", "xdp_gue_encap"]
DECAPS = ["xdp_gre_decap", "xdp_vxlan_decap"]
MACS = {"src": "02:00:00:00:00:aa", "dst": "02:00:00:00:00:bb"}
INNER = Ether(**MACS) / IP(src="192.168.1.1", dst="192.168.1.2") / TCP(sport=4, dport=80)
TUNNELS = [
    bytes(
        Ether(**MACS)
        / IP(src="10.0.0.1", dst="10.0.0.2", options=opts)
        / UDP(sport=5555, dport=4789)
        / VXLAN(vni=7)
        / INNER
    )
    for opts in ([], [IPOption_NOP()] * 4)
] + [
    bytes(Ether(**MACS) / IP(src="10.0.0.1", dst="10.0.0.2") / GRE(proto=p, **kw) / inner)
    for p, inner, kw in [
        (0x6558, INNER, {}),
        (0x0800, INNER[IP], {"key_present": 1, "key": 9}),
        (0x86DD, IPv6(dst="2001:db8::1") / UDP(), {"chksum_present": 1}),
    ]
]


def _frames() -> list[bytes]:
    return corpus() + TUNNELS + [t[:n] for t in TUNNELS for n in (38, 50, 60)]


@pytest.mark.parametrize("name", ENCAPS)
def test_encapsulators_are_half_the_lines(name: str) -> None:
    new = (PROGS / f"{name}.bpfd").read_text().count("\n")
    old = (OLD / f"{name}.bpfd").read_text().count("\n")
    assert new <= old / 2, (new, old)


@pytest.mark.parametrize("name", ENCAPS + DECAPS)
def test_same_as_the_adjust_head_version(bpf_program, name: str) -> None:
    new, old = bpf_program(PROGS / f"{name}.bpfd"), bpf_program(OLD / f"{name}.bpfd")
    frames = _frames()
    changed = 0
    for f in frames:
        a, b = new.run(f), old.run(f)
        assert (a.verdict, a.data_out) == (b.verdict, b.data_out), f.hex()
        changed += a.data_out != f
    assert changed >= 2  # the frames exercise the push/pop paths
    if name in DECAPS:
        assert new.maps["decapped"].total(0) == old.maps["decapped"].total(0) > 0


@pytest.mark.parametrize("name", ENCAPS + DECAPS)
def test_same_as_the_c_twin(bpf_program, name: str) -> None:
    """tests/data/c/NAME.c built by clang-19: the same verdict and bytes on each engine
    (tests/progs/test_cref_equiv.py compares them on the kernel over the corpus alone)."""
    ours, c = bpf_program(PROGS / f"{name}.bpfd"), bpf_program(build(name).read_bytes())
    for f in _frames():
        a, b = ours.run(f), c.run(f)
        assert (a.verdict, a.data_out) == (b.verdict, b.data_out), f.hex()


def _check_outer_ipv4(o: IP) -> None:
    hdr = IP(bytes(o)[:20])
    del hdr.chksum  # scapy computes it again when building the bytes
    assert o.chksum == IP(bytes(hdr)).chksum, hex(o.chksum)
    assert (o.version, o.ihl, o.ttl) == (4, 5, 64)


def test_ipip_outer_header_by_scapy(bpf_program) -> None:
    prog = bpf_program(PROGS / "xdp_ipip_encap.bpfd")
    for n in (0, 1, 17, 300):
        inner = IP(src="192.0.2.9", dst="198.51.100.3", tos=0x28) / UDP(dport=53) / (b"q" * n)
        # short frames carry Ethernet padding: the outer length counts the inner datagram
        r = prog.run(bytes(Ether(**MACS) / inner) + b"\0" * 6)
        assert r.verdict == "XDP_TX"
        out = Ether(r.data_out)
        assert (out.src, out.dst, out.type) == (MACS["src"], MACS["dst"], 0x0800)
        o = out[IP]
        _check_outer_ipv4(o)
        assert (o.src, o.dst, o.proto, o.tos, o.len) == (
            "10.0.0.1",
            "198.51.100.3",
            4,
            0x28,
            len(inner) + 20,
        )
        assert bytes(o.payload)[: len(inner)] == bytes(inner)


def test_vxlan_outer_headers_by_scapy(bpf_program) -> None:
    prog = bpf_program(PROGS / "xdp_vxlan_encap.bpfd")
    for n in (0, 40, 500):
        frame = bytes(INNER / (b"p" * n))
        r = prog.run(frame)
        assert r.verdict == "XDP_TX"
        out = Ether(r.data_out)
        assert (out.src, out.dst) == (MACS["src"], MACS["dst"])
        o = out[IP]
        _check_outer_ipv4(o)
        assert o.flags.DF and o.len == 36 + len(frame) and o.proto == 17
        u = o[UDP]
        assert (u.dport, u.len, u.chksum) == (4789, 16 + len(frame), 0)
        assert 49152 <= u.sport
        vx = u[VXLAN]
        assert (vx.flags, vx.vni) == (0x08, 42)
        assert bytes(vx.payload) == frame


def test_gue_outer_headers_by_scapy(bpf_program) -> None:
    """progs/xdp_gue_encap.bpfd: outer IPv4 (checksum, lengths), UDP to port 6080 with
    checksum 0, the GUE version 0 header (draft-ietf-intarea-gue-09 section 3.1: version 0,
    C 0, hlen 0, proto_ctype 4, flags 0), then the inner datagram unchanged."""
    prog = bpf_program(PROGS / "xdp_gue_encap.bpfd")
    sports = set()
    for n, src in ((0, "192.0.2.9"), (1, "192.0.2.10"), (17, "203.0.113.1"), (300, "10.1.2.3")):
        inner = IP(src=src, dst="198.51.100.3", tos=0x28) / UDP(dport=53) / (b"q" * n)
        r = prog.run(bytes(Ether(**MACS) / inner) + b"\0" * 6)  # padding not counted
        assert r.verdict == "XDP_TX"
        out = Ether(r.data_out)
        assert (out.src, out.dst, out.type) == (MACS["src"], MACS["dst"], 0x0800)
        o = out[IP]
        _check_outer_ipv4(o)
        assert (o.src, o.dst, o.proto, o.tos, o.len) == (
            "10.0.0.1",
            "198.51.100.3",
            17,
            0x28,
            len(inner) + 32,
        )
        u = o[UDP]
        assert (u.dport, u.len, u.chksum) == (6080, len(inner) + 12, 0)
        assert 49152 <= u.sport
        sports.add(u.sport)
        gue = bytes(u.payload)
        assert gue[:4] == bytes([0x00, 4, 0, 0]), gue[:4].hex()
        assert gue[4 : 4 + len(inner)] == bytes(inner)
    assert len(sports) > 1  # the source port follows the inner source (flow entropy)


def test_vxlan_over_ipv6_udp_checksum_by_scapy(bpf_program) -> None:
    """progs/xdp_vxlan6_encap.bpfd: the UDP checksum over the IPv6 pseudo-header and the
    whole inner frame (RFC 6935), for every length modulo 4 and up to a large frame."""
    prog = bpf_program(PROGS / "xdp_vxlan6_encap.bpfd")
    for n in (0, 1, 2, 3, 5, 100, 1001, 1400):
        frame = bytes(INNER / bytes((7 * i + 3) % 256 for i in range(n)))
        r = prog.run(frame)
        assert r.verdict == "XDP_TX"
        out = Ether(r.data_out)
        assert (out.src, out.dst, out.type) == (MACS["src"], MACS["dst"], 0x86DD)
        o6 = out[IPv6]
        assert (o6.nh, o6.hlim, o6.plen) == (17, 64, 16 + len(frame))
        u = o6[UDP]
        again = out.copy()
        del again[UDP].chksum  # scapy computes it again when building the bytes
        assert u.chksum == Ether(bytes(again))[UDP].chksum != 0, (n, hex(u.chksum))
        assert (u.dport, u.len) == (4789, 16 + len(frame))
        assert bytes(u[VXLAN].payload) == frame


PUSHED_VIEW = """
license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let o = push ipv4 { protocol: IPPROTO_IPIP, saddr: 10.9.9.9, daddr: ip.saddr }
        before ip else { return XDP_ABORTED }
    o.ttl -= 1                  // the checksum push computed is kept up to date
    o.id = be16(0x1234)
    if o.protocol != IPPROTO_IPIP || host(o.tot_len) < 40 { return XDP_DROP }
    return XDP_TX
}
"""


def test_pushed_view_reads_and_writes(bpf_program) -> None:
    prog = bpf_program(compile_source(PUSHED_VIEW, "pushed.bpfd").obj)
    inner = IP(src="192.0.2.1", dst="192.0.2.2") / UDP() / b"abc"
    r = prog.run(bytes(Ether(**MACS) / inner))
    assert r.verdict == "XDP_TX"
    o = Ether(r.data_out)[IP]
    hdr = IP(bytes(o)[:20])
    del hdr.chksum
    assert o.chksum == IP(bytes(hdr)).chksum
    assert (o.ttl, o.id, o.src, o.dst, o.len) == (63, 0x1234, "10.9.9.9", "192.0.2.1", 51)


SIX_IN_FOUR_AND_IPV6_OUTER = """
license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {          // 6in4 (RFC 4213): the EtherType becomes IPv4
        let ip6 = parse ipv6 else { return XDP_PASS }
        let o = push ipv4 { protocol: 41, saddr: 10.0.0.1, daddr: 10.0.0.2 } before ip6
            else { return XDP_ABORTED }
        return XDP_TX
    }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }  // 4in6 (RFC 2473): ... becomes IPv6
    let o = push ipv6 { nexthdr: IPPROTO_IPIP, saddr: 2001:db8::1, daddr: 2001:db8::2,
                        priority: 3 } before ip else { return XDP_ABORTED }
    return XDP_TX
}
"""


def test_ipv6_outer_and_ethertype(bpf_program) -> None:
    prog = bpf_program(compile_source(SIX_IN_FOUR_AND_IPV6_OUTER, "six.bpfd").obj)
    v4 = IP(src="192.0.2.1", dst="192.0.2.2") / UDP() / b"four"
    out = Ether(prog.run(bytes(Ether(**MACS) / v4)).data_out)
    assert out.type == 0x86DD and out.src == MACS["src"]
    o6 = out[IPv6]
    assert (o6.version, o6.tc, o6.nh, o6.hlim, o6.plen) == (6, 0x30, 4, 64, len(v4))
    assert (o6.src, o6.dst) == ("2001:db8::1", "2001:db8::2")
    assert bytes(o6.payload) == bytes(v4)
    v6 = IPv6(src="2001:db8::5", dst="2001:db8::6") / UDP() / b"six"
    out = Ether(prog.run(bytes(Ether(**MACS) / v6)).data_out)
    assert out.type == 0x0800
    _check_outer_ipv4(out[IP])
    assert out[IP].len == 20 + len(v6) and bytes(out[IP].payload) == bytes(v6)


VLAN = """
license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_8021Q {                 // pop the tag: a fixed 4 bytes
        let tag = parse vlan else { return XDP_PASS }
        let inner = tag.h_vlan_encapsulated_proto
        pop tag else { return XDP_ABORTED }
        let neth = parse ethernet else { return XDP_ABORTED }
        neth.h_proto = inner
        return XDP_PASS
    }
    let ip = parse ipv4 else { return XDP_PASS }    // push one: the EtherType is 802.1Q
    let t = push vlan { h_vlan_TCI: be16(100), h_vlan_encapsulated_proto: ETH_P_IP }
        before ip else { return XDP_ABORTED }
    return XDP_TX
}
"""


def test_vlan_push_and_pop(bpf_program) -> None:
    prog = bpf_program(compile_source(VLAN, "vlan.bpfd").obj)
    plain = Ether(**MACS) / IP(src="192.0.2.1", dst="192.0.2.2") / UDP() / b"x"
    tagged = Ether(**MACS) / Dot1Q(vlan=100) / plain[IP]
    r = prog.run(bytes(plain))
    assert (r.verdict, r.data_out) == ("XDP_TX", bytes(tagged))
    r = prog.run(bytes(tagged))
    assert (r.verdict, r.data_out) == ("XDP_PASS", bytes(plain))


def _error(src: str) -> tuple[str, int]:
    with pytest.raises(DiagnosticError) as ei:
        compile_source('license "GPL"\n' + src, "e.bpfd")
    d = ei.value.diagnostics[0]
    return d.code, d.span.line


HEAD = """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
"""


@pytest.mark.parametrize(
    "body,code,line",
    [
        # a field push computes
        ("let o = push ipv4 { tot_len: be16(20) } before ip else { return 1 }", "push-field", 5),
        # UDP after no pushed IP header: no pseudo-header for its checksum
        ("let o = push udp { } before ip else { return 1 }", "push-header", 5),
        ("let o = push tcp { } before ip else { return 1 }", "push-header", 5),
        # the view after a header of variable length: its offset is not fixed
        (
            "let u = parse udp else { return 1 }\n"
            "let o = push vxlan { } before u else { return 1 }",
            "push-offset",
            6,
        ),
        ("let o = push ipv4 { } before ip\nreturn 2", "unhandled-missing", 5),
        ("pop eth through ip else { }", "else-must-leave", 5),
        ("pop ip through eth else { return 1 }", "pop-order", 5),
        # views are invalid after a push, as after adjust_head
        ("let o = push ipv4 { } before ip else { return 1 }\neth.h_proto = 0", "stale-header", 6),
        ("pop ip else { return 1 }\nip.ttl = 1", "stale-header", 6),
        ("let o = push ipv4 { flags: 1 } before ip else { return 1 }", "unknown-field", 5),
        # gue is pushed without its optional fields: hlen is the length's, read-only
        ("let o = push gue { hlen: 1 } before ip else { return 1 }", "read-only", 5),
    ],
)
def test_refused(body: str, code: str, line: int) -> None:
    assert _error(HEAD + body + "\nreturn 2\n}") == (code, line)


def test_variable_header_whose_bare_length_is_not_its_fixed_part_is_refused() -> None:
    src = (
        "header opt(length: 8 + n * 4, max_length: 64) { n: u8, pad: u8 }\n"
        + HEAD
        + "let o = push opt { } before ip else { return 1 }\nreturn 2\n}"
    )
    assert _error(src) == ("push-header", 6)


GUE_DECAP = """
license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let u = parse udp else { return XDP_PASS }
    if u.dest != be16(6080) { return XDP_PASS }
    let g = parse gue else { return XDP_DROP }
    if g.version != 0 || g.control != 0 || g.proto_ctype != IPPROTO_IPIP { return XDP_DROP }
    let inner = parse ipv4 else { return XDP_DROP }     // after the optional fields
    if inner.daddr == 198.51.100.3 { return XDP_TX }
    return XDP_DROP
}
"""


def test_parse_gue_skips_its_optional_fields(bpf_program) -> None:
    prog = bpf_program(compile_source(GUE_DECAP, "gue_decap.bpfd").obj)
    inner = bytes(IP(src="192.0.2.9", dst="198.51.100.3") / UDP())
    for hlen in (0, 1, 3):
        gue = bytes([hlen, 4, 0, 0]) + b"\xee" * (4 * hlen)
        f = bytes(Ether(**MACS) / IP() / UDP(sport=1, dport=6080) / (gue + inner))
        assert prog.run(f).verdict == "XDP_TX", hlen
        assert prog.run(f[: 14 + 20 + 8 + 4 * hlen + 2]).verdict == "XDP_DROP"


def test_refused_in_a_fn() -> None:
    src = "fn g(ip: ipv4) -> u32 {\n    pop ip else { return 1 }\n    return 0\n}"
    assert _error(src)[0] == "resize-in-fn"


BRANCH = """
license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IP {
        let ip = parse ipv4 else { return XDP_PASS }
        if ip.ttl > 1 {         // this path grows the packet, the other does not
            let o = push ipv4 { protocol: IPPROTO_IPIP, saddr: 10.0.0.1, daddr: ip.daddr }
                before ip else { return XDP_ABORTED }
        }
    }
    let e = parse ethernet else { return XDP_PASS }   // offset 0 on every path
    let outer = parse ipv4 else { return XDP_PASS }
    if outer.protocol == IPPROTO_IPIP { return XDP_TX }
    return XDP_DROP
}
"""


def test_push_on_one_path_then_a_parse_after_the_join(bpf_program) -> None:
    prog = bpf_program(compile_source(BRANCH, "branch.bpfd").obj)
    for ttl, verdict, grown in ((9, "XDP_TX", 20), (1, "XDP_DROP", 0)):
        frame = bytes(Ether(**MACS) / IP(dst="192.0.2.7", ttl=ttl) / UDP() / b"z")
        r = prog.run(frame)
        assert (r.verdict, len(r.data_out)) == (verdict, len(frame) + grown)
