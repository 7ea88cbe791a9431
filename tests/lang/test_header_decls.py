"""Headers a program declares with ``header NAME { ... }`` and the standard library's
(bpfdsl/lang/headers.bpfd): ``parse`` treats them like the built-in ones (the kernel accepts
the bounds checks, a short packet takes ``else``), bit<N> fields read as the numbers scapy
wrote and are written without touching their neighbours, lengths computed from fields move
the cursor (and bound it), fields with ``if`` are there only when their flag is, a declared
checksum stays valid after writes.  Every behaviour is run on the kernel and on the
interpreter; bad declarations are errors at their line and column."""

from __future__ import annotations

import struct

import pytest
from scapy.contrib.geneve import GENEVE
from scapy.contrib.mpls import MPLS
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrFragment, IPv6ExtHdrHopByHop, IPv6ExtHdrRouting
from scapy.layers.l2 import ARP, GRE, Ether
from scapy.layers.vxlan import VXLAN

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def obj(src: str) -> bytes:
    return compile_source('license "GPL"\nmap out: array<u32, u64>(max_entries: 16)\n' + src).obj


def outs(prog, n: int) -> list[int]:
    return [prog.maps["out"].total(i) for i in range(n)]


# The declaration of the task: RFC 7348's VXLAN header, 8 bytes.
VXLAN_DECL = """
header my_vxlan {              // RFC 7348: 8 bytes
    flags: bit<8>,
    reserved1: bit<24>,
    vni: bit<24>,
    reserved2: bit<8>,
}
"""
READ_VXLAN = (
    VXLAN_DECL
    + """
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let v = parse my_vxlan else { return XDP_DROP }
    out[0] = v.flags as u64
    out[1] = v.reserved1 as u64
    out[2] = v.vni as u64
    out[3] = v.reserved2 as u64
    let inner = parse ethernet else { return XDP_ABORTED }
    out[4] = host(inner.h_proto) as u64
    return XDP_TX
}
"""
)


def vxlan_frame(vni: int = 0xABCDEF, flags: int = 0x08, reserved2: int = 0x5A) -> bytes:
    inner = Ether(type=0x86DD) / IPv6()
    return bytes(
        ETH
        / IP()
        / UDP(dport=4789)
        / VXLAN(vni=vni, flags=flags, reserved1=0x123456, reserved2=reserved2)
        / inner
    )


def test_declared_vxlan_reads_like_scapy_wrote_it(bpf_program) -> None:
    prog = bpf_program(obj(READ_VXLAN))
    assert prog.run(vxlan_frame()).verdict == "XDP_TX"
    assert outs(prog, 5) == [0x08, 0x123456, 0xABCDEF, 0x5A, 0x86DD]


@pytest.mark.parametrize("cut", [1, 7])
def test_declared_header_short_packet_takes_else(bpf_program, cut: int) -> None:
    """8 bytes are checked (the verifier's `pkt + 8 > pkt_end`): 7 of them are not enough."""
    frame = vxlan_frame()[: 14 + 20 + 8 + cut]
    prog = bpf_program(obj(READ_VXLAN))
    assert prog.run(frame).verdict == "XDP_DROP"
    assert outs(prog, 1) == [0]


WRITE_BITS = """
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_MPLS_UC {
        let m = parse mpls else { return XDP_PASS }
        m.tc = 5
        m.label += 1
        m.ttl -= 1
        return XDP_TX
    }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol == IPPROTO_TCP {
        let tcp = parse tcp else { return XDP_PASS }
        tcp.syn = 0
        tcp.fin = 1
        tcp.res1 = 0b1010
        return XDP_TX
    }
    let udp = parse udp else { return XDP_PASS }
    let v = parse vxlan else { return XDP_PASS }
    v.vni = 0x010203
    v.reserved1 = 0
    return XDP_TX
}
"""


def test_bit_field_writes_keep_the_neighbouring_bits(bpf_program) -> None:
    prog = bpf_program(obj(WRITE_BITS))
    r = prog.run(vxlan_frame(vni=0xFFFFFF, reserved2=0xA5))
    assert r.verdict == "XDP_TX"
    v = r.packet[VXLAN]
    assert (v.flags, v.reserved1, v.vni, v.reserved2) == (0x08, 0, 0x010203, 0xA5)
    frame = bytes(ETH / MPLS(label=0xFFFFE, cos=2, s=1, ttl=64) / IP() / UDP())
    r = prog.run(frame)
    m = MPLS(r.data_out[14:])
    assert (m.label, m.cos, m.s, m.ttl) == (0xFFFFF, 5, 1, 63)
    assert r.data_out[18:] == frame[18:]


def test_tcp_flag_writes_keep_the_checksum(bpf_program) -> None:
    frame = bytes(ETH / IP(src="10.0.0.1", dst="10.0.0.2") / TCP(flags="SA") / b"data")
    r = bpf_program(obj(WRITE_BITS)).run(frame)
    tcp = r.packet[TCP]
    assert str(tcp.flags) == "FA" and tcp.reserved == 0b101  # scapy: res1 as 3+1 bits
    fresh = Ether(r.data_out)
    del fresh[TCP].chksum
    assert Ether(bytes(fresh))[TCP].chksum == tcp.chksum


VARLEN = """
header tlv(length: 2 + len, max_length: 34) {
    type: u8,
    len: u8,
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    for i in 0..4 {
        let t = parse tlv else { return XDP_DROP }
        if t.type == 0 {
            let b = parse byte else { return XDP_ABORTED }
            out[0] = b.value as u64
            out[1] = i as u64
            return XDP_TX
        }
    }
    return XDP_PASS
}
"""


@pytest.mark.parametrize(
    "tlvs,verdict,outs_",
    [
        (b"\x01\x03abc\x02\x00\x00\x00Z", "XDP_TX", [ord("Z"), 2]),
        (b"\x00\x1f" + bytes(31) + b"Q", "XDP_TX", [ord("Q"), 0]),  # 2 + 31 = 33 bytes
        (b"\x01\x20" + bytes(32) + b"\x00\x00Q", "XDP_TX", [ord("Q"), 1]),  # 2 + 32 = 34
        (b"\x01\x21" + bytes(40), "XDP_DROP", [0, 0]),  # 35 > max_length 34
        (b"\x01\x05ab", "XDP_DROP", [0, 0]),  # cursor moved past the end: next parse fails
    ],
    ids=["three", "longest-but-one", "at-the-bound", "over-the-bound", "past-the-end"],
)
def test_length_from_fields_moves_the_cursor(bpf_program, tlvs, verdict, outs_) -> None:
    prog = bpf_program(obj(VARLEN))
    assert prog.run(bytes(ETH) + tlvs).verdict == verdict
    assert outs(prog, 2) == outs_


CHECKSUMMED = """
header probe(checksum: check) {
    kind: u8,
    hops: bit<4>,
    flag: bit<4>,
    check: be16,
    id: be32,
    tag: [u8; 4],
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let p = parse probe else { return XDP_PASS }
    p.hops += 1
    p.id = be32(host(p.id) + 7)
    p.tag[1] = 0x42
    p.kind = 9
    return XDP_TX
}
"""


def inet_sum(b: bytes) -> int:
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def test_declared_checksum_stays_valid(bpf_program) -> None:
    body = bytearray(b"\x01\x3a\x00\x00\x00\x00\x01\x00abcd")
    body[2:4] = struct.pack("!H", 0xFFFF - inet_sum(bytes(body)))
    assert inet_sum(bytes(body)) == 0xFFFF  # a valid RFC 1071 checksum to start with
    r = bpf_program(obj(CHECKSUMMED)).run(bytes(ETH) + bytes(body))
    out = r.data_out[14:]
    assert out[0] == 9 and out[1] == 0x4A and out[4:8] == struct.pack("!I", 0x107)
    assert out[8:] == b"aBcd"
    assert inet_sum(out) == 0xFFFF


GRE_FIELDS = """
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let gre = parse gre else { return XDP_DROP }
    if let k = gre.key { out[0] = host(k) as u64 } else { out[0] = 0xff }
    if let s = gre.seq { out[1] = host(s) as u64 } else { out[1] = 0xff }
    if let c = gre.csum { out[2] = host(c) as u64 } else { out[2] = 0xff }
    let inner = parse ethernet else { return XDP_ABORTED }
    out[3] = host(inner.h_proto) as u64
    return XDP_TX
}
"""


@pytest.mark.parametrize(
    "fields,want",
    [
        ({}, [0xFF, 0xFF, 0xFF]),
        ({"key_present": 1, "key": 77}, [77, 0xFF, 0xFF]),
        ({"seqnum_present": 1, "sequence_number": 8}, [0xFF, 8, 0xFF]),
        ({"chksum_present": 1, "chksum": 0x1234, "key_present": 1, "key": 3}, [3, 0xFF, 0x1234]),
    ],
    ids=["none", "key", "seq", "csum-key"],
)
def test_gre_optional_fields(bpf_program, fields: dict, want: list[int]) -> None:
    frame = bytes(ETH / IP() / GRE(proto=0x6558, **fields) / Ether(type=0x0806) / ARP())
    prog = bpf_program(obj(GRE_FIELDS))
    assert prog.run(frame).verdict == "XDP_TX"
    assert outs(prog, 4) == [*want, 0x0806]
    cut = bytes(ETH / IP() / GRE(proto=0x6558, key_present=1, key=1))[:-2]
    prog = bpf_program(obj(GRE_FIELDS))
    # the key is cut short: the packet does not hold the whole header, parse runs else
    assert prog.run(cut).verdict == "XDP_DROP"


LIBRARY = """
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_ARP {
        let a = parse arp else { return XDP_DROP }
        out[0] = host(a.ar_op) as u64
        out[1] = host(a.ar_tip) as u64
        return XDP_TX
    }
    if eth.h_proto == ETH_P_MPLS_UC {
        for i in 0..4 {
            let m = parse mpls else { return XDP_DROP }
            out[i] = m.label as u64
            if m.bos == 1 { return XDP_TX }
        }
        return XDP_DROP
    }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_DROP }
        let hop = parse ipv6_opt else { return XDP_DROP }
        let rt = parse ipv6_rt else { return XDP_DROP }
        let frag = parse ipv6_frag else { return XDP_DROP }
        out[0] = rt.segments_left as u64
        out[1] = frag.frag_off as u64
        out[2] = frag.m as u64
        out[3] = host(frag.identification) as u64
        out[4] = frag.nexthdr as u64
        return XDP_TX
    }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let g = parse geneve else { return XDP_DROP }
    out[0] = g.opt_len as u64
    out[1] = g.vni as u64
    out[2] = host(g.proto_type) as u64
    out[3] = g.critical as u64
    let inner = parse ethernet else { return XDP_DROP }
    out[4] = host(inner.h_proto) as u64
    return XDP_TX
}
"""


def test_library_headers_on_real_packets(bpf_program) -> None:
    prog = bpf_program(obj(LIBRARY))
    arp = ETH / ARP(op=2, pdst="192.0.2.77")
    assert prog.run(arp).verdict == "XDP_TX"
    assert outs(prog, 2) == [2, 0xC000024D]
    stack = ETH / MPLS(label=100, s=0) / MPLS(label=200, s=0) / MPLS(label=0xFFFFF, s=1) / IP()
    assert prog.run(stack).verdict == "XDP_TX"
    assert outs(prog, 3) == [100, 200, 0xFFFFF]
    v6 = (
        ETH
        / IPv6()
        / IPv6ExtHdrHopByHop(options=[])
        / IPv6ExtHdrRouting(addresses=["2001:db8::1", "2001:db8::2"], segleft=1)
        / IPv6ExtHdrFragment(offset=185, m=1, id=0xDEADBEEF, nh=17)
        / (b"x" * 8)
    )
    assert prog.run(v6).verdict == "XDP_TX"
    assert outs(prog, 5) == [1, 185, 1, 0xDEADBEEF, 17]
    opts = b"\x01\x02\x80\x01" + b"\x00" * 4  # one 8-byte option (class, type, length 1)
    gen = ETH / IP() / UDP(dport=6081) / GENEVE(vni=0x654321, proto=0x6558, optionlen=2, critical=1)
    frame = bytes(gen / opts / Ether(type=0x88CC))
    prog = bpf_program(obj(LIBRARY))
    assert prog.run(frame).verdict == "XDP_TX"
    assert outs(prog, 5) == [2, 0x654321, 0x6558, 1, 0x88CC]


def test_a_declaration_replaces_the_library_header(bpf_program) -> None:
    src = """
header vxlan { flags: u8, rest: [u8; 7] }
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let v = parse vxlan else { return XDP_PASS }
    out[0] = v.rest[3] as u64
    if v.rest == "\\x12\\x34\\x56\\xab\\xcd\\xef\\x5a" { out[1] = 1 }
    return XDP_TX
}
"""
    prog = bpf_program(obj(src))
    assert prog.run(vxlan_frame()).verdict == "XDP_TX"
    assert outs(prog, 2) == [0xAB, 1]


# ---- bad declarations: located errors, exit status 1 ----
BAD = [
    (
        "header h { a: bit<3>, b: bit<4> }",
        "header-bits",
        23,
        "the fields add up to 7 bits, not a whole number of bytes",
        "add 1 bit",
    ),
    (
        "header h { a: bit<3>, b: be16, c: bit<5> }",
        "header-bits",
        23,
        "field `b` (be16) would start at bit 3 of byte 0",
        "add 5 bits",
    ),
    (
        "header h { wide: bit<65>, b: u8 }",
        "bit-width",
        18,
        "`bit<65>` has more than 64 bits",
        "split a wider field",
    ),
    (
        "header h(length: n * 4) { n: u8, m: be16, o: u8 }",
        "header-length",
        10,
        "the length of header `h` depends on the packet but has no bound",
        "add `max_length: N`",
    ),
    (
        "header h(length: n * 4, max_length: 70000) { n: u8 }",
        "header-length",
        37,
        "max_length must be from the fixed size (1 byte) to 65535, not 70000",
        "bytes",
    ),
    (
        "header h(length: q * 4, max_length: 60) { n: u8 }",
        "header-length",
        18,
        "`q` is not an integer field of header `h`",
        "fields: n",
    ),
    ("header h { a: u16 }", "header-field-type", 15, "`u16` cannot be a header field", "be16"),
    (
        "header h(checksum: a) { a: u8, b: u8 }",
        "header-checksum",
        20,
        "checksum names the be16 field",
        "check: be16",
    ),
    (
        "header h { k: u8, x: be16 if k, y: u8 }",
        "header-field-order",
        33,
        "field `y` follows a conditional field",
        "the `if` fields last",
    ),
    (
        "header ipv4 { a: u8 }",
        "reserved-name",
        1,
        "`ipv4` is a built-in header the compiler knows",
        "pick another name",
    ),
    ("header h(lenght: 4) { a: u8 }", "header-args", 10, "unknown header argument", "`length`"),
]


@pytest.mark.parametrize(
    "decl,code,col,msg,hint", BAD, ids=[b[1] + str(i) for i, b in enumerate(BAD)]
)
def test_bad_declarations_are_located_errors(decl, code, col, msg, hint) -> None:
    src = f'license "GPL"\n{decl}\nxdp fn f(ctx) {{ return XDP_PASS }}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.file, d.span.line, d.span.col) == (code, "bad.bpfd", 2, col)
    assert msg in d.message
    assert any(hint in h for h in d.hints), d.hints


@pytest.mark.parametrize(
    "fields,code,where,hint",
    [
        ("    a: bit<65>,\n", "bit-width", "3:8", "split a wider field"),
        ("    a: bit<4>,\n    b: bit<2>,\n", "header-bits", "4:5", "add 2 bits"),
        ("    n: u8,\n", "header-length", "2:10", "add `max_length: N`"),
    ],
    ids=["bit-width", "whole-bytes", "no-bound"],
)
def test_bad_declaration_cli_exit_status(tmp_path, fields, code, where, hint) -> None:
    """`bpfdsl compile` prints file:line:col, the line with a caret and the hint; exit 1,
    no object written, no traceback."""
    import subprocess
    import sys

    f = tmp_path / "bad.bpfd"
    args = "(length: n * 4)" if code == "header-length" else ""
    f.write_text(
        f'license "GPL"\nheader h{args} {{\n{fields}}}\nxdp fn f(ctx) {{ return XDP_PASS }}\n'
    )
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(f), "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert f"error[{code}]" in r.stderr and f"--> {f}:{where}" in r.stderr, r.stderr
    assert "^" in r.stderr and f"help: {hint}" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "body,code,line,col",
    [
        ("let ip = parse ipv4 else { return XDP_PASS }\n    ip.ihl = 6", "read-only", 5, 5),
        (
            "let ip = parse ipv4 else { return XDP_PASS }\n    let g = parse gre else { return XDP_PASS }\n    let k: be32 = g.key",
            "unhandled-missing",
            6,
            19,
        ),
        (
            "let t = parse tcp else { return XDP_PASS }\n    swap(t.syn, t.fin)",
            "not-assignable",
            5,
            10,
        ),
    ],
    ids=["length-field", "conditional-field", "swap-bits"],
)
def test_field_rules(body, code, line, col) -> None:
    src = f'license "GPL"\nxdp fn f(ctx) {{\n    let eth = parse ethernet else {{ return XDP_PASS }}\n    {body}\n    return XDP_PASS\n}}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "r.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), d.render(src)


def test_write_in_a_udp_payload_header_warns_about_the_udp_checksum() -> None:
    """A VXLAN header is UDP payload: writing it leaves the UDP checksum stale (warning at
    the write, naming the UDP view), unless the program sets the checksum itself."""
    body = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let vx = parse vxlan else { return XDP_PASS }
    vx.vni = 7
%s    return XDP_TX
}
"""
    (w,) = [w for w in compile_source(body % "", "w.bpfd").warnings if w.code == "payload-checksum"]
    assert (w.span.line, w.span.col) == (7, 5) and "`udp` (line 5)" in w.message
    fixed = compile_source(body % "    udp.check = 0\n", "w.bpfd").warnings
    assert not [w for w in fixed if w.code == "payload-checksum"]


def test_declared_header_bounds_check_has_the_verifier_shape() -> None:
    """`parse my_vxlan` after udp: `cursor + 8 > data_end` on 64-bit registers (the udp
    view's pointer + 16), as for a library header; no 32-bit ALU op on two registers."""
    import re

    src = 'license "GPL"\nmap out: array<u32, u64>(max_entries: 16)\n' + READ_VXLAN
    asm = compile_source(src, "t.bpfd", emit="asm").asm
    code = [ln.strip() for ln in asm.split("f:")[1].split(".Lfunc_end0")[0].splitlines()]
    code = [ln for ln in code if ln and not ln.startswith((".", "#"))]
    checks = [
        i
        for i in range(len(code) - 1)
        if re.fullmatch(r"(r\d) \+= 16", code[i])
        and re.fullmatch(rf"if {code[i].split()[0]} > r\d goto \S+", code[i + 1])
    ]
    assert checks, code
    assert not any(re.match(r"w\d [-+*/|&^]?= w\d", ln) for ln in code), code


def _random_layout(rnd) -> list[tuple[str, int]]:
    """(name, bits) bit<N> fields of 3 to 12 bytes and more, whole bytes in all: some at
    byte borders (8, 16, 32 bits), the others 1 to 40 bits anywhere (in a short header a
    field may need a 3-, 5-, 6- or 7-byte read)."""
    fields, total, goal = [], 0, 8 * rnd.choice((3, 5, 6, 7, 12))
    while total < goal:
        if total % 8 == 0 and rnd.random() < 0.3:
            fields.append((f"f{len(fields)}", rnd.choice((8, 16, 32))))
        else:
            room = 8 - total % 8
            n = rnd.randint(1, min(40, room + 24))
            fields.append((f"f{len(fields)}", n))
        total += fields[-1][1]
    if total % 8:
        fields.append((f"f{len(fields)}", 8 - total % 8))
    return fields


def _model_read(data: bytes, fields, name: str) -> int:
    bit = 0
    whole = int.from_bytes(data, "big")
    size = len(data) * 8
    for n, w in fields:
        if n == name:
            return (whole >> (size - bit - w)) & ((1 << w) - 1)
        bit += w
    raise KeyError(name)


def _model_write(data: bytes, fields, name: str, value: int) -> bytes:
    bit = 0
    size = len(data) * 8
    whole = int.from_bytes(data, "big")
    for n, w in fields:
        if n == name:
            shift = size - bit - w
            whole = whole & ~(((1 << w) - 1) << shift) | ((value & ((1 << w) - 1)) << shift)
            return whole.to_bytes(len(data), "big")
        bit += w
    raise KeyError(name)


@pytest.mark.parametrize("seed", range(12))
def test_random_bit_layouts_against_a_model(bpf_program, seed: int) -> None:
    """Random layouts of bit<N> (1..40 bits, across byte and word borders) and whole-byte
    fields: every field reads as the big-endian bits a Python model takes, and a write
    changes exactly its bits, on both engines."""
    import random

    rnd = random.Random(seed)
    fields = _random_layout(rnd)
    decl = ", ".join(f"{n}: bit<{w}>" for n, w in fields)
    size = sum(w for _n, w in fields) // 8
    target, value = rnd.choice(fields)[0], rnd.getrandbits(64)
    width = dict(fields)[target]
    vt = "u8" if width <= 8 else "u16" if width <= 16 else "u32" if width <= 32 else "u64"
    reads = "\n".join(f"    out[{i}] = h.{n} as u64" for i, (n, _w) in enumerate(fields[:16]))
    src = f"""header h {{ {decl} }}
xdp fn f(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    let h = parse h else {{ return XDP_DROP }}
{reads}
    h.{target} = {value & ((1 << width) - 1)} as {vt}
    return XDP_TX
}}
"""
    data = bytes(rnd.getrandbits(8) for _ in range(size))
    prog = bpf_program(obj(src))
    r = prog.run(bytes(ETH) + data + b"tail")
    assert r.verdict == "XDP_TX"
    for i, (n, _w) in enumerate(fields[:16]):
        assert prog.maps["out"].total(i) == _model_read(data, fields, n), (n, src)
    want = _model_write(data, fields, target, value)
    assert r.data_out == bytes(ETH) + want + b"tail", src


@pytest.mark.parametrize(
    "fields",
    [
        [("a", 2), ("b", 20), ("c", 2)],  # b: 3 bytes, no 4-byte load fits the header
        [("a", 4), ("b", 48), ("c", 4)],  # b: 7 bytes of a 7-byte header
        [("a", 3), ("b", 36), ("c", 1)],  # b: 5 bytes
        [("a", 1), ("b", 46), ("c", 1)],  # b: 6 bytes
    ],
    ids=["3-bytes", "7-bytes", "5-bytes", "6-bytes"],
)
def test_bit_fields_read_byte_by_byte_in_short_headers(bpf_program, fields) -> None:
    import random

    rnd = random.Random(len(fields[1:2]) * fields[1][1])
    decl = ", ".join(f"{n}: bit<{w}>" for n, w in fields)
    size = sum(w for _n, w in fields) // 8
    value = rnd.getrandbits(fields[1][1])
    src = f"""header h {{ {decl} }}
xdp fn f(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    let h = parse h else {{ return XDP_DROP }}
    out[0] = h.a as u64
    out[1] = h.b as u64
    out[2] = h.c as u64
    h.b = {value}
    return XDP_TX
}}
"""
    data = bytes(rnd.getrandbits(8) for _ in range(size))
    prog = bpf_program(obj(src))
    r = prog.run(bytes(ETH) + data + b"tail")
    assert [prog.maps["out"].total(i) for i in range(3)] == [
        _model_read(data, fields, n) for n, _w in fields
    ]
    assert r.data_out == bytes(ETH) + _model_write(data, fields, "b", value) + b"tail"


@pytest.mark.parametrize(
    "decl,data,verdict",
    [
        # FIELD * K with a bound beyond what the u8 field can give: no bound check is wrong
        ("header w(length: n * 8, max_length: 4000) { n: u8, m: u8 }", b"\xfa\x00", "cut"),
        ("header w(length: n * 8, max_length: 4000) { n: u8, m: u8 }", b"\x00\x00", "bad"),
        ("header w(length: n * 3, max_length: 30) { n: u8, m: u8 }", b"\x0a\x00", "ok"),
        ("header w(length: n * 3, max_length: 30) { n: u8, m: u8 }", b"\x0b\x00", "bad"),
        ("header w(length: n * 3, max_length: 30) { n: u8, m: u8 }", b"\x00\x00", "bad"),
        ("header w(length: 2 + n, max_length: 40) { n: u8, m: u8 }", b"\x1c\x00", "ok"),
    ],
    ids=["big-bound", "zero", "times-3", "over", "below", "sum"],
)
def test_length_bounds(bpf_program, decl: str, data: bytes, verdict: str) -> None:
    """The computed length: `bad` (below the fixed size or over max_length: else), `ok`
    (the cursor moves by it: the byte after is read), `cut` (in bounds, past the packet's end:
    the packet does not hold the whole header, so else runs too)."""
    src = (
        decl
        + """
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let h = parse w else { return XDP_DROP }
    let b = parse byte else { return XDP_ABORTED }
    out[0] = b.value as u64
    return XDP_TX
}
"""
    )
    payload = data + bytes(range(1, 40))
    n = data[0]
    length = n * 8 if "n * 8" in decl else n * 3 if "n * 3" in decl else 2 + n
    prog = bpf_program(obj(src))
    r = prog.run(bytes(ETH) + payload)
    want = {"bad": "XDP_DROP", "cut": "XDP_DROP", "ok": "XDP_TX"}[verdict]
    assert r.verdict == want
    assert prog.maps["out"].total(0) == (payload[length] if verdict == "ok" else 0)
