"""`load` at a run-time offset computed from the packet length: the verifier takes the
bounds check (the offset is bounded so that offset + size stays within MAX_PACKET_OFF,
kernel/bpf/verifier.c find_good_pkt_pointers), and the bytes read are the frame's last."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.testrun import InterpEngine, KernelEngine

SRC = """license "GPL"
xdp fn tail(ctx) {
    let last = load u8 at (ctx.len - 1) else { return XDP_ABORTED }
    let end = load be16 at (ctx.len - 2) else { return XDP_ABORTED }
    if last == 0x5a && end == be16(0xa55a) { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_load_at_an_offset_from_the_packet_length_loads_and_reads_the_last_bytes():
    spec = read_object(compile_source(SRC, "tail.bpfd").obj)
    kernel, interp = KernelEngine(spec), InterpEngine(spec)  # the kernel accepts the object
    try:
        for frame, want in ((bytes(58) + b"\xa5\x5a", 1), (bytes(58) + b"\x5a\xa5", 2)):
            assert kernel.run("tail", frame).retval == want
            assert interp.run("tail", frame).retval == want
    finally:
        kernel.close()
        interp.close()
