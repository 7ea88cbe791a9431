"""`xdp_load_bytes` / `xdp_store_bytes` (bpf_xdp_load_bytes / bpf_xdp_store_bytes, helpers
189/190): in an `xdp(frags)` program they reach the bytes past the first buffer.  A
BPF_PROG_TEST_RUN of a frags program on a frame over 3520 bytes (PAGE_SIZE - headroom -
tailroom, net/bpf/test_run.c bpf_prog_test_run_xdp) builds a multi-buffer xdp_buff, so the
offsets used here (5000..6003 of a 9000-byte frame) are in page frags; the interpreter keeps
the same frags (bpfdsl.interp.ctx) and must agree."""

from __future__ import annotations

import struct

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.testrun import InterpEngine, KernelEngine

SRC = r"""license "GPL"
struct pair { a: u16, b: u16 }
map out: array<u64>(max_entries: 6)
map keep: array<[u8; 8]>(max_entries: 1)

xdp(frags) fn big(ctx) {
    let tag: [u8; 4] = "\x00\x00\x00\x00"
    out[0] = xdp_load_bytes(5000, tag) as u64
    let w: u32 = 0
    out[1] = xdp_load_bytes(5004, w) as u64
    out[2] = w as u64
    let p = pair(a: 0, b: 0)
    if xdp_load_bytes(5008, p) != 0 { return XDP_ABORTED }
    out[3] = (p.a as u64) << 16 | p.b as u64
    let v = keep.lookup(0) else { return XDP_ABORTED }
    if xdp_load_bytes(5012, v) != 0 { return XDP_ABORTED }    // into the map value
    let far: u16 = 0
    out[4] = xdp_load_bytes((xdp_get_buff_len() - 1) as u32, far) as u64   // 1 byte left: -EINVAL
    if tag != "WXYZ" { return XDP_PASS }
    let word: [u8; 4] = "abcd"
    out[5] = xdp_store_bytes(6000, word) as u64
    return XDP_DROP
}
"""
EINVAL = 22


def _frame() -> bytes:
    pkt = bytearray(range(256)) * 35 + bytearray(40)  # 9000 bytes
    pkt[5000:5004] = b"WXYZ"
    pkt[5004:5008] = struct.pack("<I", 0x11223344)  # host (little-endian) order
    pkt[5008:5012] = struct.pack("<HH", 0x0102, 0x0304)
    return bytes(pkt)


def _out(engine) -> list[int]:
    got = engine.snapshot_maps()["out"]
    return [struct.unpack("<q", got[struct.pack("<I", i)])[0] for i in range(6)]


@pytest.mark.kernel
@pytest.mark.parametrize("engine", [KernelEngine, InterpEngine], ids=["kernel", "interp"])
def test_frags_bytes_read_and_write_past_the_first_buffer(engine):
    spec = read_object(compile_source(SRC, "big.bpfd").obj)
    e = engine(spec)  # the kernel accepts the object
    try:
        frame = _frame()
        r = e.run("big", frame)
        assert r.retval == 1  # XDP_DROP: the tag at 5000 was read from a frag
        assert _out(e) == [0, 0, 0x11223344, 0x0102 << 16 | 0x0304, -EINVAL, 0]
        assert e.snapshot_maps()["keep"][bytes(4)] == frame[5012:5020]
        want = bytearray(frame)
        want[6000:6004] = b"abcd"
        assert r.data_out == bytes(want)  # only the 4 stored bytes changed
    finally:
        e.close()


@pytest.mark.kernel
def test_frags_bytes_interpreter_agrees_with_the_kernel_on_a_frame_without_the_tag():
    spec = read_object(compile_source(SRC, "big.bpfd").obj)
    kernel, interp = KernelEngine(spec), InterpEngine(spec)
    try:
        frame = bytes(4000) + bytes(range(100)) * 20  # 6000 bytes, no tag
        rk, ri = kernel.run("big", frame), interp.run("big", frame)
        assert rk.retval == ri.retval == 2
        assert rk.data_out == ri.data_out == frame
        assert _out(kernel) == _out(interp)
        assert _out(kernel)[4] == -EINVAL
    finally:
        kernel.close()
        interp.close()
