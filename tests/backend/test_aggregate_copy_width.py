"""Addresses and byte arrays are copied in accesses as wide as both ends' alignment allows:
a local struct's field is aligned as its offset in the 8-aligned stack area (a MAC at offset 8
moves as three u16s; one at an odd offset byte by byte), a header MAC as in struct ethhdr (2).
The bytes land where asked on both engines, and the kernel accepts every access."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

SRC = """license "GPL"
struct macs { a: u8, odd: mac_addr, b: u8, even: mac_addr }
xdp fn swap(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let v = macs(a: 1, odd: eth.h_source, b: 2, even: eth.h_dest)
    let copy = v.odd
    eth.h_dest = copy
    eth.h_source = v.even
    return XDP_TX
}
"""


@pytest.mark.parametrize(
    "dst,src", [("020000000002", "0a0b0c0d0e0f"), ("ffffffffffff", "00000000ff01")]
)
def test_macs_from_odd_and_even_struct_fields(bpf_program, dst, src):
    prog = bpf_program(compile_source(SRC, "swap.bpfd").obj)
    frame = bytes.fromhex(dst + src) + b"\x08\x00" + bytes(range(50))
    res = prog.run(frame)
    assert res.verdict == "XDP_TX"
    assert res.data_out == bytes.fromhex(src + dst) + frame[12:]


def test_even_field_moves_in_u16s():
    """``eth.h_source = v.even`` (offset 8 of the struct: 8-aligned; a header MAC: 2-aligned)
    is three u16 loads and three u16 stores; the field at offset 1 needs byte moves."""
    spec = read_object(compile_source(SRC, "swap.bpfd").obj)
    (prog,) = spec.programs.values()
    stxh = [i for i in prog.insns if i.opcode == 0x6B]  # *(u16 *)(dst + off) = src
    assert sorted(i.off for i in stxh if i.off in (6, 8, 10)) == [6, 8, 10]
