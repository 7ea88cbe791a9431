"""Unsigned division and remainder by a run-time divisor compile to the one BPF insn, as
clang's do for C: the ISA's rule for a zero divisor (x / 0 = 0, x % 0 = x) is the
language's, so no guard insns are emitted; and LLVM's "division by zero is undefined" must
not let it drop the user's own check of the divisor.  Values checked on the kernel
(BPF_PROG_TEST_RUN) and on the interpreter, for every width."""

from __future__ import annotations

import struct
from io import BytesIO

import pytest
from elftools.elf.elffile import ELFFile

from bpfdsl.abi.opcodes import (
    BPF_ALU,
    BPF_ALU64,
    BPF_CALL,
    BPF_DIV,
    BPF_EXIT,
    BPF_JA,
    BPF_JMP,
    BPF_JMP32,
    BPF_MOD,
    BPF_X,
)
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

WIDTHS = ("u8", "u16", "u32", "u64")


def _src(width: str) -> str:
    return f"""license "GPL"
map out: array<u64>(max_entries: 4)
xdp fn f(ctx) {{
    let pa = parse byte else {{ return XDP_ABORTED }}
    let pz = parse byte else {{ return XDP_ABORTED }}
    let a = (pa.value as {width}) * 3 + 200
    let z = pz.value as {width}
    out[0] = (a / z) as u64
    out[1] = (a % z) as u64
    if z == 0 {{ out[2] = 99 }}   // the user's check after the division stays
    return XDP_PASS
}}
"""


def _expected(width: str, a8: int, z: int) -> list[int]:
    bits = int(width[1:])
    a = (a8 * 3 + 200) % (1 << bits)
    return [a // z if z else 0, a % z if z else a, 99 if z == 0 else 0, 0]


def _code(obj: bytes) -> list[tuple[int, int]]:
    """(opcode, src_reg/dst_reg byte) of each insn slot of section xdp."""
    data = ELFFile(BytesIO(obj)).get_section_by_name("xdp").data()
    return [(data[i], data[i + 1]) for i in range(0, len(data), 8)]


@pytest.mark.parametrize("width", WIDTHS)
def test_division_by_a_runtime_divisor_is_one_insn_with_no_guard(width):
    code = _code(compile_source(_src(width), "div.bpfd").obj)
    ops = [op for op, _ in code]
    divs = [op for op in ops if op & 0x07 in (BPF_ALU, BPF_ALU64) and op & 0xF0 == BPF_DIV]
    mods = [op for op in ops if op & 0x07 in (BPF_ALU, BPF_ALU64) and op & 0xF0 == BPF_MOD]
    # one BPF_DIV, and one BPF_MOD or its a - (a / z) * z (LLVM's choice; right for a zero
    # divisor too: a - 0 * 0 = a), by a register: the run-time divisor
    assert len(divs) == 1 and len(mods) <= 1, [hex(o) for o in ops]
    assert all(op & BPF_X for op in divs + mods)
    # conditional jumps: the two parse bounds checks and the user's `z == 0` -- none
    # added for the divisor
    cond = [
        op
        for op in ops
        if op & 0x07 in (BPF_JMP, BPF_JMP32) and op & 0xF0 not in (BPF_JA, BPF_CALL, BPF_EXIT)
    ]
    assert len(cond) == 3, [hex(o) for o in ops]


@pytest.mark.kernel
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("a,z", [(7, 0), (7, 3), (255, 1), (200, 255), (0, 0)])
def test_division_values_on_the_kernel_and_the_interpreter(width, a, z):
    from bpfdsl.interp import InterpCollection
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(compile_source(_src(width), "div.bpfd").obj)
    frame = bytes([a, z]) + bytes(60)
    want = _expected(width, a, z)
    with load_collection(spec) as coll:
        r = syscall.prog_test_run(coll.programs["f"].fd, frame)
        fd = coll.maps["out"].fd
        kernel = [
            struct.unpack("<Q", syscall.map_lookup(fd, struct.pack("<I", k), 8))[0]
            for k in range(4)
        ]
    assert r.retval == 2 and kernel == want
    interp = InterpCollection(spec)
    assert interp["f"].run(frame).retval == 2
    out = interp.maps["out"]
    assert [struct.unpack("<Q", out.get(struct.pack("<I", k)))[0] for k in range(4)] == want
