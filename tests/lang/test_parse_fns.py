"""Functions that parse: a ``fn`` may ``parse`` (and ``skip_ext``, ``load``), moving the
caller's cursor, and return header views or optionals (``-> T?``, ``return none``), so the
parsing code is written once and used by several programs -- of different context kinds
(xdp_md and sk_msg_md: one copy of the fn each).  Checked on the kernel and on the
interpreter: verdicts, the bytes a write through a returned view changed (checksums
recomputed by scapy), and the errors at their line and column."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrDestOpt, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Dot1Q, Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
LIB = """license "GPL"
map hits: array<u32, u64>(max_entries: 4)

// the upper-layer protocol after the IP header (IPv4, or IPv6 past its extension headers)
fn ip_proto(eth: ethernet) -> u8? {
    if eth.h_proto == ETH_P_IP {
        let ip = parse ipv4 else { return none }
        return ip.protocol
    }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return none }
        return skip_ext(ip6)
    }
    return none
}

// the destination port of a UDP or TCP header at the cursor
fn l4_dport(proto: u8) -> be16? {
    if proto == IPPROTO_UDP {
        let udp = parse udp else { return none }
        return udp.dest
    }
    if proto == IPPROTO_TCP {
        let tcp = parse tcp else { return none }
        return tcp.dest
    }
    return none
}

fn dport(eth: ethernet) -> be16? {
    let proto = ip_proto(eth) else { return none }
    return l4_dport(proto)
}
"""
PROGRAMS = """
xdp fn drop_dns(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let port = dport(eth) else { return XDP_PASS }
    if port == 53 { hits[0] += 1
        return XDP_DROP }
    return XDP_PASS
}

xdp fn count_web(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let port = dport(eth) else { return XDP_PASS }
    if port == 80 || port == 443 { hits[1] += 1 }
    return XDP_PASS
}

sk_msg fn first_bytes(msg) {
    let eth = parse ethernet else { return SK_PASS }
    let port = dport(eth) else { return SK_PASS }
    if port == 53 { return SK_DROP }
    return SK_PASS
}
"""


def frames() -> dict[str, tuple[bytes, int]]:
    """name -> (frame, destination port the fns find, 0 for none)."""
    v6ext = IPv6() / IPv6ExtHdrHopByHop() / IPv6ExtHdrDestOpt()
    return {
        "udp4": (bytes(ETH / IP() / UDP(dport=53) / b"q"), 53),
        "tcp4-options": (bytes(ETH / IP(options=b"\x01" * 8) / TCP(dport=443)), 443),
        "udp6-ext": (bytes(ETH / v6ext / UDP(dport=53)), 53),
        "tcp6": (bytes(ETH / IPv6() / TCP(dport=80)), 80),
        "icmp-like": (bytes(ETH / IP(proto=1) / (b"\x08\x00" * 8)), 0),
        "cut-udp": (bytes(ETH / IP() / UDP(dport=53))[:40], 0),
        "vlan": (bytes(ETH / Dot1Q() / IP() / UDP(dport=53)), 0),
    }


@pytest.mark.parametrize("name", list(frames()))
def test_one_fn_serves_two_programs(bpf_program, name: str) -> None:
    frame, port = frames()[name]
    prog = bpf_program(compile_source(LIB + PROGRAMS, "fns.bpfd").obj, "drop_dns")
    web = prog.program("count_web")
    assert prog.run(frame).verdict == ("XDP_DROP" if port == 53 else "XDP_PASS")
    assert web.run(frame).verdict == "XDP_PASS"
    assert prog.maps["hits"].total(0) == (port == 53)
    assert prog.maps["hits"].total(1) == (port in (80, 443))


@pytest.mark.kernel
def test_the_kernel_accepts_the_xdp_and_sk_msg_copies() -> None:
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(LIB + PROGRAMS, "fns.bpfd")
    assert res.programs == ["drop_dns", "count_web", "first_bytes"]
    with load_collection(read_object(res.obj)) as coll:
        assert set(coll.programs) == set(res.programs)


VIEW = """license "GPL"
// the UDP header of a datagram to `port` over IPv4, the cursor just past it
fn udp_to(port: u16) -> udp? {
    let eth = parse ethernet else { return none }
    if eth.h_proto != ETH_P_IP { return none }
    let ip = parse ipv4 else { return none }
    if ip.protocol != IPPROTO_UDP { return none }
    let udp = parse udp else { return none }
    if host(udp.dest) != port { return none }
    return udp
}

xdp fn redirect_port(ctx) {
    let udp = udp_to(5000) else { return XDP_PASS }
    udp.dest = 6000                    // its checksum is updated, as for a parsed view
    let first = parse byte else { return XDP_DROP }
    first.value = 0x2a
    udp.check = 0
    return XDP_TX
}

xdp fn nat_after_fn(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let port = l4(ip.protocol) else { return XDP_PASS }
    ip.daddr = 10.9.9.9                // the L4 checksum is found in the packet
    return XDP_TX
}

fn l4(proto: u8) -> be16? {
    if proto != IPPROTO_UDP { return none }
    let udp = parse udp else { return none }
    return udp.dest
}
"""


def checksums_fresh(frame: bytes) -> bool:
    pkt = Ether(frame)
    fresh = pkt.copy()
    for layer in (IP, UDP):
        del fresh[layer].chksum
    fresh = Ether(bytes(fresh))
    return all(pkt[la].chksum == fresh[la].chksum for la in (IP, UDP))


def test_write_through_a_returned_view(bpf_program) -> None:
    prog = bpf_program(compile_source(VIEW, "view.bpfd").obj, "redirect_port")
    frame = bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=5000) / b"abc")
    r = prog.run(frame)
    assert r.verdict == "XDP_TX"
    out = r.packet
    assert (out[UDP].dport, out[UDP].chksum, bytes(out[UDP].payload)) == (6000, 0, b"*bc")
    other = bytes(ETH / IP() / UDP(dport=5001) / b"abc")
    assert prog.run(other).data_out == other


def test_address_write_after_an_l4_parsed_by_a_fn(bpf_program) -> None:
    prog = bpf_program(compile_source(VIEW, "view.bpfd").obj, "nat_after_fn")
    frame = bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(sport=1, dport=7) / b"data")
    r = prog.run(frame)
    assert r.verdict == "XDP_TX" and r.packet[IP].dst == "10.9.9.9"
    assert checksums_fresh(r.data_out)


LOOP = """license "GPL"
map tags: array<u32, u64>(max_entries: 1)
fn vlan_proto(proto: be16) -> be16? {
    if proto != ETH_P_8021Q && proto != ETH_P_8021AD { return none }
    let tag = parse vlan else { return none }
    return tag.h_vlan_encapsulated_proto
}
xdp fn count_tags(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let proto = eth.h_proto
    for i in 0..3 {
        let inner = vlan_proto(proto) else { break }
        proto = inner
        tags[0] += 1
    }
    if proto != ETH_P_IP { return XDP_DROP }
    let ip = parse ipv4 else { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_parsing_fn_called_in_a_loop(bpf_program, n: int) -> None:
    frame = ETH
    for _ in range(n):
        frame = frame / Dot1Q(vlan=5)
    frame = bytes(frame / IP() / UDP())
    prog = bpf_program(compile_source(LOOP, "loop.bpfd").obj)
    assert prog.run(frame).verdict == "XDP_PASS"
    assert prog.maps["tags"].total(0) == n


@pytest.mark.parametrize(
    "src,code,line,col",
    [
        (
            "fn f() -> u8? { let b = parse byte else { return none }\n return b.value }\n"
            "sock_ops fn s(skops) {\n    let v = f() else { return 1 }\n    return 1\n}\n",
            "parse-no-data",
            5,
            13,
        ),
        (
            "fn f() -> u8 {\n    return none\n}\nxdp fn p(ctx) { return XDP_PASS }\n",
            "unknown-name",
            3,
            12,
        ),
        (
            "fn f() -> u8? { return none }\nxdp fn p(ctx) {\n    let v: u8 = f()\n    return XDP_PASS\n}\n",
            "unhandled-missing",
            4,
            17,
        ),
        (
            "fn f() -> u8? { return 300 }\nxdp fn p(ctx) { return XDP_PASS }\n",
            "out-of-range",
            2,
            24,
        ),
    ],
    ids=["no-packet-kind", "none-not-optional", "unhandled", "value-range"],
)
def test_fn_errors(src: str, code: str, line: int, col: int) -> None:
    text = 'license "GPL"\n' + src
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "e.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), d.render(text)


def test_a_fn_taking_a_view_may_use_offset(bpf_program) -> None:
    """offset() reads the context's data pointer: a fn using it gets the packet too."""
    src = """license "GPL"
map out: array<u32, u64>(max_entries: 1)
fn after(h: udp) -> u32 { return offset(h) + 8 }
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    out[0] = after(udp) as u64
    return XDP_PASS
}
"""
    prog = bpf_program(compile_source(src, "o.bpfd").obj)
    frame = bytes(ETH / IP(options=b"\x01" * 4) / UDP() / b"x")
    assert prog.run(frame).verdict == "XDP_PASS"
    assert prog.maps["out"].total(0) == 14 + 24 + 8


PORTS = """license "GPL"
struct ports { sport: be16, dport: be16 }
map flows: hash<ports, u64>(max_entries: 64)
map lens: array<u32, u64>(max_entries: 1)

// the L4 ports of a UDP or TCP header at the cursor: a struct, or none
fn l4_ports(proto: u8) -> ports? {
    if proto == IPPROTO_UDP {
        let udp = parse udp else { return none }
        return ports(sport: udp.source, dport: udp.dest)
    }
    if proto == IPPROTO_TCP {
        let tcp = parse tcp else { return none }
        return ports(sport: tcp.source, dport: tcp.dest)
    }
    return none
}

fn v4_ports(eth: ethernet) -> ports? {
    if eth.h_proto != ETH_P_IP { return none }
    let ip = parse ipv4 else { return none }
    return l4_ports(ip.protocol)
}

fn mac_of(eth: ethernet) -> mac_addr { return eth.h_source }

xdp fn count_flows(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let src = mac_of(eth)
    if src != 02:00:00:00:00:01 { return XDP_DROP }
    let p = v4_ports(eth) else { return XDP_PASS }
    flows[p] += 1
    if p.dport == 53 { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.parametrize(
    "l4,key",
    [(UDP(sport=1000, dport=53), (1000, 53)), (TCP(sport=7, dport=80), (7, 80)), (None, None)],
    ids=["udp", "tcp", "other"],
)
def test_fn_returning_an_optional_struct(bpf_program, l4, key) -> None:
    import struct

    frame = bytes(ETH / IP() / l4 if l4 is not None else ETH / IP(proto=1) / (b"x" * 8))
    prog = bpf_program(compile_source(PORTS, "ports.bpfd").obj)
    r = prog.run(frame)
    assert r.verdict == ("XDP_DROP" if key == (1000, 53) else "XDP_PASS")
    got = {bytes(k): v for k, v in prog.maps["flows"].items().items()}
    assert got == ({} if key is None else {struct.pack("!HH", *key): (1).to_bytes(8, "little")})
    other = bytes(Ether(src="02:00:00:00:00:09") / IP() / UDP(dport=53))
    assert prog.run(other).verdict == "XDP_DROP"  # mac_of: a mac_addr returned
