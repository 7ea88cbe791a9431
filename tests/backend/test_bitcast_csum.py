"""``raw``/``as_be`` (bit-casts between host and network order of one width, no swap) and
``csum_fold``/``csum_replace`` (the kernel's ``csum_fold`` and RFC 1624 eqn. 3) for headers
declared without a ``checksum:`` rule: on both engines the checksum a program keeps or
computes verifies (the one's-complement sum of the header is 0xffff), and the bit-casts keep
the bytes as stored.  Constant arguments fold at compile time to the run-time values."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

SRC = """license "GPL"
header tun { kind: be16, check: be16, id: be32, seq: be32 }   // no checksum rule
struct tw { kind: be16, check: be16, id: be32, seq: be32 }
map out: array<u32, u64>(max_entries: 8)
config NEW_ID: u32 = 0
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let t = parse tun else { return XDP_PASS }
    udp.check = 0
    out[0] = raw(t.kind) as u64                       // the bits as stored
    out[1] = raw(t.id) as u64
    out[2] = raw(csum_fold(0x1fffe)) as u64           // constant: folded at compile time
    out[3] = raw(csum_replace(be16(0x1234), be32(1), be32(2))) as u64
    let n = be32(NEW_ID)
    if t.kind == 1 {                                  // keep it right, RFC 1624
        t.check = csum_replace(t.check, t.id, n)
        t.id = n
    } else {                                          // compute it fresh
        t.id = n
        t.seq = as_be(raw(t.seq) ^ 0xff00ff00)
        let w = tw(kind: t.kind, check: be16(0), id: t.id, seq: t.seq)
        t.check = csum_fold(csum_diff(none, w, 0))
    }
    return XDP_TX
}
"""


def ones_sum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def tun(kind: int, ident: int, seq: int) -> bytes:
    h = struct.pack("!HHII", kind, 0, ident, seq)
    c = ~ones_sum(h) & 0xFFFF
    return struct.pack("!HHII", kind, c, ident, seq)


def frame(payload: bytes) -> bytes:
    return bytes(Ether() / IP(src="192.0.2.1", dst="192.0.2.2") / UDP(sport=1, dport=2) / payload)


TUN_OFF = 14 + 20 + 8


@pytest.mark.parametrize("kind", [1, 2])
@pytest.mark.parametrize("new_id", [0, 0xDEADBEEF, 0x0000FFFF, 0xFFFF0000])
def test_checksums_verify(bpf_program, kind: int, new_id: int) -> None:
    prog = bpf_program(compile_source(SRC, "t.bpfd").obj, config={"NEW_ID": new_id})
    for ident, seq in ((0x01020304, 0x0A0B0C0D), (0xFFFFFFFF, 0), (0, 0xFFFFFFFF)):
        r = prog.run(frame(tun(kind, ident, seq)))
        assert r.verdict == "XDP_TX"
        h = r.data_out[TUN_OFF : TUN_OFF + 12]
        k, _c, i, s = struct.unpack("!HHII", h)
        assert (k, i) == (kind, new_id)
        assert s == (seq if kind == 1 else seq ^ 0x00FF00FF), hex(s)  # as_be(raw ^ m): bytes
        assert ones_sum(h) == 0xFFFF, h.hex()  # the checksum verifies
        out = [prog.maps["out"].total(j) for j in range(4)]
        # raw(): the bits as stored, read little-endian (BPF targets here are LE)
        assert out[0] == int.from_bytes(h[0:2], "little")
        assert out[1] == int.from_bytes(struct.pack("!I", ident), "little")
        assert out[2] == ~0xFFFF & 0xFFFF  # 0x1fffe folds to 0xffff, complemented 0
        # RFC 1624 eqn. 3 on 0x1234 as stored, for 1 -> 2 in the last word
        hc = int.from_bytes(b"\x12\x34", "little")
        m, m2 = 0x0100, 0x0200  # be32(1) as stored: words 00 00 and 00 01 (LE 0x0100)
        s = (~hc & 0xFFFF) + 0xFFFF + 0 + (~m & 0xFFFF) + m2
        while s >> 16:
            s = (s & 0xFFFF) + (s >> 16)
        want = ~s & 0xFFFF
        assert out[3] == want


@pytest.mark.parametrize(
    "call, code",
    [
        ("raw(1 as u16)", "type-mismatch"),  # already host order
        ("as_be(be16(1))", "type-mismatch"),
        ("as_be(1 as u8)", "type-mismatch"),  # no be8
        ("csum_replace(be16(0), be16(1), be32(2))", "type-mismatch"),
        ("csum_replace(be16(0), 1 as u16, 2 as u16)", "type-mismatch"),
        ("csum_fold(be32(1))", "type-mismatch"),
        ("raw()", "arg-count"),
    ],
)
def test_refused_with_the_spelling(call: str, code: str) -> None:
    src = f'license "GPL"\nxdp fn f(ctx) {{\n    let x = {call}\n    return XDP_PASS\n}}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd")
    codes = [d.code for d in ei.value.diagnostics]
    assert code in codes, codes


# An IPIP encapsulator (RFC 2003) with the forms above: the outer IPv4 header built as a
# struct, its checksum from csum_fold(csum_diff(...)) (no byte swap, no hand fold), written
# whole into a declared header after adjust_head.
IPIP = """license "GPL"
header ip4o { vihl: u8, tos: u8, tot_len: be16, id: be16, frag_off: be16, ttl: u8,
              protocol: u8, check: be16, saddr: be32, daddr: be32 }
struct ip4s { vihl: u8, tos: u8, tot_len: be16, id: be16, frag_off: be16, ttl: u8,
              protocol: u8, check: be16, saddr: be32, daddr: be32 }
xdp fn ipip(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let dst = eth.h_dest
    let src = eth.h_source
    let o = ip4s(vihl: 0x45, tos: ip.tos, tot_len: be16(host(ip.tot_len) + 20), ttl: 64,
                 protocol: IPPROTO_IPIP, saddr: 10.0.0.1, daddr: ip.daddr)
    o.check = csum_fold(csum_diff(none, o, 0))
    if adjust_head(-20) != 0 { return XDP_ABORTED }
    let neth = parse ethernet else { return XDP_ABORTED }
    let oip = parse ip4o else { return XDP_ABORTED }
    neth.h_dest = dst
    neth.h_source = src
    neth.h_proto = ETH_P_IP
    oip = o
    return XDP_TX
}
"""


def test_ipip_outer_header_written_whole(bpf_program) -> None:
    from scapy.layers.inet import IP as SIP

    prog = bpf_program(compile_source(IPIP, "ipip.bpfd").obj)
    inner = (
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
        / SIP(src="192.0.2.1", dst="198.51.100.9", tos=0x28)
        / UDP(sport=7, dport=9)
        / (b"p" * 33)
    )
    r = prog.run(bytes(inner))
    assert r.verdict == "XDP_TX"
    out = Ether(r.data_out)
    assert out.src == "02:00:00:00:00:01" and out.dst == "02:00:00:00:00:02"
    o = out[SIP]
    assert (o.src, o.dst, o.proto, o.ttl, o.tos, o.len) == (
        "10.0.0.1",
        "198.51.100.9",
        4,
        64,
        0x28,
        len(bytes(inner)) - 14 + 20,
    )
    want = o.chksum
    o.chksum = None
    assert SIP(bytes(o)).chksum == want  # scapy's checksum of the outer header
    assert bytes(o.payload)[: len(bytes(inner)) - 14] == bytes(inner)[14:]


@pytest.mark.parametrize(
    "decl, code",
    [
        ("header h { a: be16, b: be16 }\\nstruct s { a: be16, c: be16 }", "type-mismatch"),
        ("header h { a: be16, b: be32 }\\nstruct s { a: be16, b: be32 }", "type-mismatch"),
        (
            "header h(checksum: b) { a: be16, b: be16 }\\nstruct s { a: be16, b: be16 }",
            "header-write",
        ),
        ("header h { a: bit<4>, b: bit<4>, c: u8 }\\nstruct s { a: u8, c: u8 }", "header-write"),
    ],
)
def test_whole_write_refused(decl: str, code: str) -> None:
    decl = decl.replace("\\n", "\n")
    src = (
        f'license "GPL"\n{decl}\nxdp fn f(ctx) {{\n'
        "    let eth = parse ethernet else { return XDP_PASS }\n"
        "    let v = parse h else { return XDP_PASS }\n"
        "    v = s()\n    return XDP_PASS\n}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd")
    codes = [d.code for d in ei.value.diagnostics]
    assert code in codes, codes


def test_whole_write_in_a_udp_payload_warns() -> None:
    """A whole write of a header under UDP changes payload bytes the UDP checksum covers:
    the payload-checksum warning, as for a field write there; gone once udp.check is set."""
    body = """license "GPL"
header tun { kind: be16, id: be16 }
struct tuns { kind: be16, id: be16 }
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let t = parse tun else { return XDP_PASS }
    t = tuns(kind: be16(1), id: be16(2))
    %s
    return XDP_TX
}
"""
    warned = [w for w in compile_source(body % "", "w.bpfd").warnings]
    assert [w.code for w in warned].count("payload-checksum") == 1
    fixed = compile_source(body % "udp.check = 0", "w.bpfd").warnings
    assert not [w for w in fixed if w.code == "payload-checksum"]
