"""`load`/`store` at offsets derived from header views, from the cursor and from the packet's
first byte, constant or run-time: the kernel accepts every form (the verifier proves a packet
range only while the checked pointer's variable part + fixed offset + size stays within
MAX_PACKET_OFF, kernel/bpf/verifier.c find_good_pkt_pointers) and both engines read the
bytes asked for.  Before: `load be32 at (offset(ip6))` was bounded at 65535 and refused
("invalid access to packet, off=0 size=4"), and so was a run-time offset from a cursor that
had moved by a header length.  Also: a constant offset whose bytes end past 65534 is a
compile-time error, and `offset(view) [+ K]` inside the view's checked header reads without
another bounds check."""

from __future__ import annotations

import struct

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

V6 = """license "GPL"
map got: array<u64>(max_entries: 8)
xdp fn rd6(ctx) {
    let eth = parse ethernet else { return XDP_ABORTED }
    if eth.h_proto != ETH_P_IPV6 { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_ABORTED }
    let udp = parse udp else { return XDP_ABORTED }
    let a = load be32 at (offset(ip6)) else { return XDP_ABORTED }        // the view itself
    let b = load be16 at (offset(ip6) + 4) else { return XDP_ABORTED }    // + K, inside
    let c = load be32 at (8 + offset(udp)) else { return XDP_ABORTED }    // + K, past it
    let nb = load be16 at cursor else { return XDP_ABORTED }              // payload 0..1
    let n = host(nb)
    let d = load be16 at cursor + (n) else { return XDP_ABORTED }         // cursor + run-time
    let e = load be16 at (offset(udp) + n) else { return XDP_ABORTED }    // view + run-time
    let f = load be32 at (ctx.len - 4) else { return XDP_ABORTED }        // absolute run-time
    let g = load be16 at cursor + 6 else { return XDP_ABORTED }           // cursor + constant
    got[0] = host(a) as u64
    got[1] = host(b) as u64
    got[2] = host(c) as u64
    got[3] = host(d) as u64
    got[4] = host(e) as u64
    got[5] = host(f) as u64
    got[6] = host(g) as u64
    store be16 at (offset(udp) + 6) = be16(0xbeef) else { return XDP_ABORTED }  // udp.check
    return XDP_TX
}
"""

# IPv4 with options (ihl 7): every view after it sits at a run-time offset
V4 = """license "GPL"
map got: array<u64>(max_entries: 8)
xdp fn rd4(ctx) {
    let eth = parse ethernet else { return XDP_ABORTED }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_ABORTED }
    let udp = parse udp else { return XDP_ABORTED }
    let a = load be16 at (offset(udp)) else { return XDP_ABORTED }        // udp.source
    let b = load be32 at (offset(udp) + 8) else { return XDP_ABORTED }    // payload word 0
    let nb = load be16 at cursor else { return XDP_ABORTED }
    let n = host(nb)
    let c = load be16 at cursor + (n) else { return XDP_ABORTED }
    let d = load be32 at (offset(ip) + 20) else { return XDP_ABORTED }    // first option word
    got[0] = host(a) as u64
    got[1] = host(b) as u64
    got[2] = host(c) as u64
    got[3] = host(d) as u64
    return XDP_PASS
}
"""


def _udp6(payload: bytes) -> bytes:
    eth = bytes.fromhex("020000000002 020000000001") + b"\x86\xdd"
    ip6 = struct.pack("!IHBB", 0x6A812345, 8 + len(payload), 17, 64) + bytes(range(32))
    udp = struct.pack("!HHHH", 4242, 53, 8 + len(payload), 0x1234)
    return eth + ip6 + udp + payload


def _udp4_options(payload: bytes) -> bytes:
    eth = bytes.fromhex("020000000002 020000000001") + b"\x08\x00"
    opts = bytes.fromhex("01010101 94040000")  # NOP x4, Router Alert (RFC 2113)
    ip = struct.pack("!BBHHHBBH4s4s", 0x47, 0, 28 + 8 + len(payload), 1, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))  # fmt: skip
    udp = struct.pack("!HHHH", 5353, 53, 8 + len(payload), 0)
    return eth + ip + opts + udp + payload


def _be(b: bytes) -> int:
    return int.from_bytes(b, "big")


def _got(prog, n: int) -> list[int]:
    return [int.from_bytes(prog.maps["got"].get(i), "little") for i in range(n)]


@pytest.mark.parametrize("n", [1, 10, 37])
def test_view_cursor_and_absolute_offsets_read_the_bytes_asked_for(bpf_program, n):
    payload = n.to_bytes(2, "big") + bytes((7 * i + 3) & 0xFF for i in range(2, 60))
    frame = _udp6(payload)
    prog = bpf_program(compile_source(V6, "rd6.bpfd").obj)  # the kernel accepts it
    res = prog.run(frame)
    assert res.verdict == "XDP_TX"
    udp, cur = 54, 62
    assert _got(prog, 7) == [
        0x6A812345,
        8 + len(payload),
        _be(frame[udp + 8 : udp + 12]),
        _be(frame[cur + n : cur + n + 2]),
        _be(frame[udp + n : udp + n + 2]),
        _be(frame[-4:]),
        _be(frame[cur + 6 : cur + 8]),
    ]
    assert res.data_out == frame[: udp + 6] + b"\xbe\xef" + frame[udp + 8 :]


@pytest.mark.parametrize("n", [0, 5, 30])
def test_offsets_after_a_variable_length_header(bpf_program, n):
    payload = n.to_bytes(2, "big") + bytes((5 * i + 1) & 0xFF for i in range(2, 40))
    frame = _udp4_options(payload)
    prog = bpf_program(compile_source(V4, "rd4.bpfd").obj)
    assert prog.run(frame).verdict == "XDP_PASS"
    cur = 14 + 28 + 8  # the payload, after the UDP header
    assert _got(prog, 4) == [
        5353,
        _be(frame[cur : cur + 4]),
        _be(frame[cur + n : cur + n + 2]),
        _be(frame[34:38]),
    ]


def test_short_packet_runs_else(bpf_program):
    """A run-time offset past the frame's end (or past MAX_PACKET_OFF) is "missing", not
    a wrong read."""
    payload = (0xFFF0).to_bytes(2, "big") + bytes(20)
    prog = bpf_program(compile_source(V6, "rd6.bpfd").obj)
    assert prog.run(_udp6(payload)).verdict == "XDP_ABORTED"


def _jgt_reg(src: str) -> int:
    """How many register compares ``if rX > rY`` (opcode 0x2d: the bounds-check shape) the
    program has."""
    spec = read_object(compile_source(src, "f.bpfd").obj)
    (prog,) = spec.programs.values()
    return sum(1 for i in prog.insns if i.opcode == 0x2D)


def test_view_read_inside_its_header_has_no_second_bounds_check():
    """``offset(ip6)`` + 0..36 is inside the 40 bytes ``parse ipv6`` checked: the read is a
    plain load from the view, as a header field read is: the compares with data_end are
    the two of the parses; a read past the header (+ 40) checks once more."""
    src = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    let w = load be32 at (offset(ip6) + K) else { return XDP_DROP }
    if w & be32(0x0fffffff) == be32(0x12345) { return XDP_DROP }
    return XDP_PASS
}
"""
    assert _jgt_reg(src.replace("K", "0")) == 2
    assert _jgt_reg(src.replace("K", "36")) == 2
    assert _jgt_reg(src.replace("K", "37")) == 3  # bytes 37..40: one past the header
    assert _jgt_reg(src.replace("K", "40")) == 3


@pytest.mark.parametrize(
    "off,ty,ok",
    [
        ("65531", "u32", True),
        ("65532", "u32", False),
        ("65535", "u8", False),
        ("65534", "u8", True),
    ],
)
def test_constant_offset_must_leave_room_for_the_bytes(off, ty, ok):
    src = f"""license "GPL"
xdp fn f(ctx) {{
    let v = load {ty} at {off} else {{ return XDP_PASS }}
    return XDP_DROP
}}
"""
    if ok:
        compile_source(src, "f.bpfd")  # checker included: the kernel's rule holds
        return
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "f.bpfd")
    d = ei.value.diagnostics[0]
    col = src.splitlines()[2].index(off) + 1
    assert (d.code, d.span.line, d.span.col) == ("out-of-range", 3, col)
    assert "MAX_PACKET_OFF" in ei.value.render()
