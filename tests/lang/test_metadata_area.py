"""The XDP metadata area: ``adjust_meta(-N)`` reserves N bytes in front of the packet,
``meta(S)`` is struct ``S`` there (bounds-checked against ``ctx->data``, missing when the
area is shorter than ``S``).  Run on the kernel (BPF_PROG_TEST_RUN copies the area out in
front of the packet) and on the interpreter, which must agree byte for byte."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source

FRAME = bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / IP() / UDP() / b"x")

WRITE_READ = """
license "GPL"
struct mark_meta { mark: u32, len: u16, flags: u16 }
map seen: array<u32, u64>(max_entries: 2)

xdp fn tag(ctx) {
    if adjust_meta(-8) != 0 { return XDP_ABORTED }
    let m = meta(mark_meta) else { return XDP_DROP }
    m.mark = 0x11223344
    m.len = ctx.len as u16
    m.flags = 1
    m.flags += 2                       // packet memory: a plain add, no atomics
    let again = meta(mark_meta) else { return XDP_DROP }
    seen[0] = again.mark as u64
    seen[1] = again.flags as u64
    return XDP_TX
}
"""


def test_written_metadata_is_in_front_of_the_packet(bpf_program) -> None:
    prog = bpf_program(compile_source(WRITE_READ, "meta.bpfd").obj)
    r = prog.run(FRAME)
    assert r.verdict == "XDP_TX"
    # the 8 bytes of struct mark_meta (host order, C layout), then the frame as it came
    assert r.data_out[:8] == struct.pack("<IHH", 0x11223344, len(FRAME), 3)
    assert r.data_out[8:] == FRAME
    assert [prog.maps["seen"].total(i) for i in range(2)] == [0x11223344, 3]


SHORT = """
license "GPL"
struct small { a: u32 }
struct big { a: u32, b: u32, c: u32 }
map seen: array<u32, u64>(max_entries: 1)

xdp fn f(ctx) {
    if adjust_meta(-4) != 0 { return XDP_ABORTED }
    if ctx.len > 1000 {
        if adjust_meta(-8) != 0 { return XDP_ABORTED }   // 12 bytes on this path
    }
    // the reservation is 4 or 12 bytes here: `big` fits only at run time
    let s = meta(small) else { return XDP_DROP }
    s.a = 5
    seen[0] = 1
    return XDP_PASS
}
"""


def test_a_view_fits_the_smallest_reservation(bpf_program) -> None:
    prog = bpf_program(compile_source(SHORT, "meta.bpfd").obj)
    r = prog.run(FRAME)
    assert r.verdict == "XDP_PASS" and r.data_out[:4] == struct.pack("<I", 5)
    assert prog.maps["seen"].total(0) == 1


RUNTIME = """
license "GPL"
struct big { a: u32, b: u32, c: u32 }
config reserve: i32 = -4

xdp fn f(ctx) {
    if adjust_meta(reserve) != 0 { return XDP_ABORTED }
    // a reservation set at load time: the view is checked at run time only
    let b = meta(big) else { return XDP_DROP }
    b.c = 9
    return XDP_PASS
}
"""


@pytest.mark.parametrize("reserve,verdict", [(-4, "XDP_DROP"), (-12, "XDP_PASS")])
def test_the_view_is_missing_when_the_area_is_short(bpf_program, reserve, verdict) -> None:
    """``data_meta + 12 > data`` with 4 bytes reserved: the else branch, no write."""
    prog = bpf_program(compile_source(RUNTIME, "meta.bpfd").obj, config={"reserve": reserve})
    r = prog.run(FRAME)
    assert r.verdict == verdict
    assert r.data_out[-reserve:] == FRAME
    if verdict == "XDP_PASS":
        assert r.data_out[8:12] == struct.pack("<I", 9)
