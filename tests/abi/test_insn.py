"""The instruction table: encodings (checked against the kernel's bpf_insn layout), round trips
and the kernel-log printer."""

from __future__ import annotations

import random

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_ADD, BPF_FETCH, BPF_JEQ, BPF_JGT, BPF_JNE, BPF_XOR

# (constructor result, expected 8/16 bytes, kernel log text) — bytes as in linux/bpf.h
CASES = [
    (I.mov64_imm(0, 2), "b700000002000000", "(b7) r0 = 2"),
    (I.mov64_reg(6, 1), "bf16000000000000", "(bf) r6 = r1"),
    (I.mov32_imm(0, -1), "b4000000ffffffff", "(b4) w0 = -1"),
    (I.alu64_imm(BPF_ADD, 1, 14), "070100000e000000", "(07) r1 += 14"),
    (I.alu32_reg(BPF_XOR, 2, 3), "ac32000000000000", "(ac) w2 ^= w3"),
    (I.endian(3, 16), "dc03000010000000", "(dc) r3 = be16 r3"),
    (I.ldx_mem(4, 2, 1, 4), "6112040000000000", "(61) r2 = *(u32 *)(r1 +4)"),
    (I.stx_mem(8, 10, 1, -8), "7b1af8ff00000000", "(7b) *(u64 *)(r10 -8) = r1"),
    (I.st_mem(4, 10, -4, 0), "620afcff00000000", "(62) *(u32 *)(r10 -4) = 0"),
    (I.atomic(8, BPF_ADD, 0, 1, 0), "db10000000000000", "(db) lock *(u64 *)(r0 +0) += r1"),
    (
        I.atomic(8, BPF_ADD | BPF_FETCH, 0, 1, 0),
        "db10000001000000",
        "(db) r1 = atomic64_fetch_add((u64 *)(r0 +0), r1)",
    ),
    (I.jmp_imm(BPF_JGT, 3, 5, 2), "2503020005000000", "(25) if r3 > 0x5 goto pc+2"),
    (I.jmp_reg(BPF_JGT, 3, 2, -4), "2d23fcff00000000", "(2d) if r3 > r2 goto pc-4"),
    (I.jmp32_imm(BPF_JNE, 1, 0x800, 7), "5601070000080000", "(56) if w1 != 0x800 goto pc+7"),
    (I.ja(3), "0500030000000000", "(05) goto pc+3"),
    (I.call(1), "8500000001000000", "(85) call bpf_map_lookup_elem#1"),
    (I.call_pc(5), "8510000005000000", "(85) call pc+5"),
    (I.exit_(), "9500000000000000", "(95) exit"),
    (I.ld_map_fd(1, 7), "18110000070000000000000000000000", "(18) r1 = map[fd:7]"),
    (
        I.ld_imm64(2, 0x1122334455667788),
        "18020000887766550000000044332211",
        "(18) r2 = 0x1122334455667788",
    ),
]


@pytest.mark.parametrize("x,hexbytes,text", CASES, ids=[c[2] for c in CASES])
def test_encode_decode_format(x, hexbytes, text):
    assert I.encode([x]).hex() == hexbytes
    assert I.decode(bytes.fromhex(hexbytes)) == [x]
    assert I.format_insn(x) == text


def test_decode_random_roundtrip():
    rng = random.Random(7)
    for _ in range(2000):
        raw = bytearray(rng.randbytes(8 * rng.randint(1, 8)))
        try:
            insns = I.decode(raw)
        except I.InsnError:
            continue
        assert I.decode(I.encode(insns)) == insns
        for x in insns:
            I.format_insn(x)  # never raises on any opcode


def test_decode_rejects_truncated():
    with pytest.raises(I.InsnError, match="multiple of 8"):
        I.decode(b"\x00" * 12)
    with pytest.raises(I.InsnError, match="second half"):
        I.decode(bytes.fromhex("1801000007000000"))


def test_slots_and_jump_targets():
    prog = [I.ld_map_fd(1, 3), I.jmp_imm(BPF_JEQ, 0, 0, 1), I.mov64_imm(0, 1), I.exit_()]
    assert I.slot_offsets(prog) == [0, 2, 3, 4]
    assert I.jump_target(prog, 1) == 3
    lines = I.format_program(prog)
    assert lines[1] == "2: (15) if r0 == 0x0 goto pc+1"
