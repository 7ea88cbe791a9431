"""Arithmetic C leaves undefined compiles to what the BPF ISA defines (shift amounts modulo
the width, x / 0 = 0, x % 0 = x, two's-complement wrap, MIN / -1 = MIN), not to code LLVM
dropped as undefined: checked on the kernel (BPF_PROG_TEST_RUN)."""

from __future__ import annotations

import struct

import pytest

from bpfdsl.compiler import compile_source

UB_SRC = """license "GPL"
map out: array<u64>(max_entries: 8)
xdp fn f(ctx) {
    let pa = parse byte else { return XDP_ABORTED }
    let ps = parse byte else { return XDP_ABORTED }
    let pz = parse byte else { return XDP_ABORTED }
    let a = pa.value
    let s = ps.value
    let z = pz.value
    let x = a as u32
    out[0] = (x << (s as u32)) as u64
    out[1] = (a as u64) << (s as u64)
    out[2] = (x / (z as u32)) as u64
    out[3] = (x % (z as u32)) as u64
    let w: i32 = 2147483647
    let y = w + (a as i32)
    out[4] = (y as i64) as u64
    out[5] = (x >> (s as u32)) as u64
    let n = (a as i8) as i64
    out[6] = n as u64
    let p = out.lookup(7) else { return XDP_PASS }
    p <<= s as u64
    return XDP_PASS
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("a,s,z", [(0x81, 70, 0), (5, 3, 2), (0xFF, 31, 0)])
def test_runtime_ub_cases_have_bpf_semantics(a, s, z):
    """Shift by a run-time amount >= the width, division by a run-time zero, signed
    overflow and sign-extending casts: the kernel runs what BPF defines (shift modulo the
    width, x/0 = 0, x%0 = x, two's-complement wrap), not code LLVM dropped as undefined."""
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(UB_SRC, "ub.bpfd")
    with load_collection(read_object(res.obj)) as coll:
        fd = coll.maps["out"].fd
        syscall.map_update(fd, struct.pack("<I", 7), struct.pack("<Q", 1))
        r = syscall.prog_test_run(coll.programs["f"].fd, bytes([a, s, z]) + bytes(60))
        got = [
            struct.unpack("<Q", syscall.map_lookup(fd, struct.pack("<I", k), 8))[0]
            for k in range(8)
        ]
    m64 = (1 << 64) - 1
    sa = a - 256 if a >= 128 else a
    wrapped = ((0x7FFFFFFF + a + 2**31) % 2**32) - 2**31
    want = [
        (a << (s % 32)) & 0xFFFFFFFF,
        (a << (s % 64)) & m64,
        a // z if z else 0,
        a % z if z else a,
        wrapped & m64,
        a >> (s % 32),
        sa & m64,
        (1 << (s % 64)) & m64,
    ]
    assert r.retval == 2
    assert got == want


SDIV_SRC = """license "GPL"
map out: array<u64>(max_entries: 4)
xdp fn f(ctx) {
    let pd = parse byte else { return XDP_ABORTED }
    let d = (pd.value as i8) as i64
    let m = (1 as i64) << 63
    out[0] = (m / d) as u64
    out[1] = (m % d) as u64
    let w = (m as i32) - 2147483647 - 1
    out[2] = ((w / (d as i32)) as i64) as u64
    out[3] = ((w % (d as i32)) as i64) as u64
    return XDP_PASS
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("d", [-1, 0, 2, -3])
def test_signed_division_overflow_has_bpf_semantics(d):
    """v4 signed division: MIN / -1 = MIN and MIN % -1 = 0 (the BPF ISA's rule; LLVM calls
    it undefined), x / 0 = 0, x % 0 = x, otherwise truncating division like C."""
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(SDIV_SRC, "sd.bpfd", mcpu="v4")
    with load_collection(read_object(res.obj)) as coll:
        fd = coll.maps["out"].fd
        r = syscall.prog_test_run(coll.programs["f"].fd, bytes([d & 0xFF]) + bytes(60))
        got = [
            struct.unpack("<q", syscall.map_lookup(fd, struct.pack("<I", k), 8))[0]
            for k in range(4)
        ]

    def div(a: int, b: int, bits: int) -> tuple[int, int]:
        if b == 0:
            return 0, a
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        q = (q + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # MIN / -1 wraps to MIN
        return q, 0 if b == -1 else a - q * b

    assert r.retval == 2
    assert got == [*div(-(2**63), d, 64), *div(-(2**31), d, 32)]


HDR_SHIFT_SRC = """license "GPL"
header h(length: (2 << k) + 2, max_length: 64) { k: u8, pad: u8 }
xdp fn f(ctx) {
    let x = parse h else { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.parametrize("k,verdict", [(4, "XDP_PASS"), (5, "XDP_DROP"), (64, "XDP_PASS"),
                                       (69, "XDP_DROP"), (128, "XDP_PASS")])  # fmt: skip
def test_header_length_shift_by_a_field_is_modulo_64(k, verdict, bpf_program):
    """A header length's `<<` by a field takes the count modulo 64, as every shift does
    (LLVM's shl by 64 or more is poison): k = 64 is a 4-byte header, k = 69 one of 66
    bytes, over max_length."""
    prog = bpf_program(compile_source(HDR_SHIFT_SRC, "h.bpfd").obj)
    assert prog.run(bytes([k]) + bytes(80)).verdict == verdict
