"""The checker's abstract domain: tnums, bounds and transfer functions are sound.

Soundness = every concrete result of an operation on values admitted by the inputs is
admitted by the abstract result (the kernel's tnum/bounds contract).  Checked by brute
force on small random tnums/ranges, with fixed seeds.
"""

from __future__ import annotations

import random

import pytest

from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_AND,
    BPF_ARSH,
    BPF_DIV,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_LSH,
    BPF_MUL,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_XOR,
)
from bpfdsl.checker import alu as ALU
from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T
from bpfdsl.checker.branch import branch_taken, refine

M64 = T.M64


def _members(t: T.Tnum, limit: int = 64) -> list[int]:
    """Concrete values of a tnum (all of them when the mask has <= 6 bits)."""
    v, m = t
    bits = [i for i in range(64) if m >> i & 1]
    out = []
    for k in range(min(1 << len(bits), limit)):
        x = v
        for j, b in enumerate(bits):
            if k >> j & 1:
                x |= 1 << b
        out.append(x)
    return out


def _rand_tnum(rng: random.Random, width: int = 8) -> T.Tnum:
    m = rng.getrandbits(width) & rng.getrandbits(width)
    v = rng.getrandbits(width) & ~m
    if rng.random() < 0.3:  # some values with high bits
        v |= rng.getrandbits(64) & ~((1 << width) - 1) & ~m
    return (v & M64, m)


def _admits(r: D.Reg, x: int) -> bool:
    x &= M64
    return (
        T.contains(r.tn, (x, 0))
        and r.umin <= x <= r.umax
        and r.smin <= D.s64(x) <= r.smax
        and r.u32min <= (x & T.M32) <= r.u32max
        and r.s32min <= D.s32(x) <= r.s32max
    )


def _scalar(t: T.Tnum) -> D.Reg:
    return D.sync(D.Reg(D.SCALAR, tn=t, b=D.UNKNOWN_BOUNDS))


@pytest.mark.parametrize(
    "name,fn,ref",
    [
        ("add", T.add, lambda a, b: a + b),
        ("sub", T.sub, lambda a, b: a - b),
        ("and", T.and_, lambda a, b: a & b),
        ("or", T.or_, lambda a, b: a | b),
        ("xor", T.xor, lambda a, b: a ^ b),
        ("mul", T.mul, lambda a, b: a * b),
    ],
)
def test_tnum_ops_are_sound(name, fn, ref):
    rng = random.Random(hash(name) & 0xFFFF)
    for _ in range(300):
        a, b = _rand_tnum(rng), _rand_tnum(rng)
        out = fn(a, b)
        assert out[0] & out[1] == 0
        for x in _members(a, 16):
            for y in _members(b, 16):
                assert T.contains(out, ((ref(x, y)) & M64, 0)), (name, a, b, x, y, out)


def test_tnum_range_and_union_contain_their_inputs():
    rng = random.Random(7)
    for _ in range(500):
        lo = rng.getrandbits(rng.choice([8, 16, 40, 64]))
        hi = lo + rng.getrandbits(rng.choice([1, 4, 12]))
        hi = min(hi, M64)
        t = T.trange(lo, hi)
        assert T.contains(t, (lo, 0)) and T.contains(t, (hi, 0))
        a, b = _rand_tnum(rng), _rand_tnum(rng)
        u = T.union(a, b)
        assert T.contains(u, a) and T.contains(u, b)


def test_sync_keeps_every_member():
    rng = random.Random(11)
    for _ in range(400):
        t = _rand_tnum(rng)
        vals = _members(t)
        lo, hi = min(vals), max(vals)
        r = D.sync(D.Reg(D.SCALAR, tn=t, b=(D.S64_MIN, D.S64_MAX, lo, hi) + D.UNKNOWN_BOUNDS[4:]))
        assert not D.is_bottom(r)
        for x in vals:
            assert _admits(r, x), (t, r, x)


OPS = [
    BPF_ADD,
    BPF_SUB,
    BPF_MUL,
    BPF_AND,
    BPF_OR,
    BPF_XOR,
    BPF_LSH,
    BPF_RSH,
    BPF_ARSH,
]


def _concrete(op: int, a: int, b: int, bits: int) -> int:
    return ALU._const_op(op, a, b, bits, False) & ((1 << bits) - 1)


@pytest.mark.parametrize("is64", [True, False], ids=["alu64", "alu32"])
def test_scalar_alu_is_sound(is64):
    rng = random.Random(3 if is64 else 4)
    bits = 64 if is64 else 32
    for _ in range(400):
        op = rng.choice(OPS)
        a = _scalar(_rand_tnum(rng))
        b = (
            _scalar(_rand_tnum(rng, 4))
            if op not in (BPF_LSH, BPF_RSH, BPF_ARSH)
            else D.known(rng.randrange(bits))
        )
        out = ALU.scalar_alu(op, a, b, is64)
        for x in _members(a.tn, 12):
            for y in _members(b.tn, 12):
                assert _admits(out, _concrete(op, x, y, bits)), (op, a, b, x, y, out)


def test_division_results_are_unknown_like_the_kernel():
    # kernel is_safe_to_compute_dst_reg_range: no tracking through div/mod, even constants
    assert not ALU.scalar_alu(BPF_DIV, D.known(8), D.known(2), True).is_const
    assert ALU.scalar_alu(BPF_ADD, D.known(8), D.known(2), True).value == 10
    assert ALU.scalar_alu(BPF_ADD, D.known(0xFFFFFFFF), D.known(1), False).value == 0


JMPS = [
    BPF_JEQ,
    BPF_JNE,
    BPF_JGT,
    BPF_JGE,
    BPF_JLT,
    BPF_JLE,
    BPF_JSGT,
    BPF_JSGE,
    BPF_JSLT,
    BPF_JSLE,
    BPF_JSET,
]


def _holds(op: int, x: int, y: int, bits: int) -> bool:
    m = (1 << bits) - 1
    x, y = x & m, y & m
    sx, sy = (D.s64(x), D.s64(y)) if bits == 64 else (D.s32(x), D.s32(y))
    return {
        BPF_JEQ: x == y,
        BPF_JNE: x != y,
        BPF_JGT: x > y,
        BPF_JGE: x >= y,
        BPF_JLT: x < y,
        BPF_JLE: x <= y,
        BPF_JSGT: sx > sy,
        BPF_JSGE: sx >= sy,
        BPF_JSLT: sx < sy,
        BPF_JSLE: sx <= sy,
        BPF_JSET: bool(x & y),
    }[op]


@pytest.mark.parametrize("is32", [False, True], ids=["jmp", "jmp32"])
def test_branch_decisions_and_refinement_are_sound(is32):
    rng = random.Random(5 if is32 else 6)
    bits = 32 if is32 else 64
    for _ in range(400):
        op = rng.choice(JMPS)
        a = _scalar(_rand_tnum(rng, 6))
        b = _scalar(_rand_tnum(rng, 3)) if rng.random() < 0.7 else D.known(rng.randrange(64))
        taken = branch_taken(a, b, op, is32)
        pairs = [(x, y) for x in _members(a.tn, 16) for y in _members(b.tn, 8)]
        outcomes = {_holds(op, x, y, bits) for x, y in pairs}
        if taken == 1:
            assert outcomes == {True}
        elif taken == 0:
            assert outcomes == {False}
        na, nb = refine(a, b, op, is32)
        for x, y in pairs:
            if _holds(op, x, y, bits):
                assert _admits(na, x) and _admits(nb, y), (op, a, b, x, y, na, nb)


def test_reg_text_is_kernel_style():
    assert D.fmt_reg(D.known(14)) == "14"
    assert D.fmt_reg(D.urange(0, 255)) == "scalar(umax=255,var_off=(0x0; 0xff))"
    assert D.fmt_reg(D.ptr(D.PKT, off=14, rng=14)) == "pkt(off=14,r=14)"
    assert D.fmt_reg(D.ptr(D.STACK, off=-8)) == "fp-8"
    assert D.fmt_reg(D.ptr(D.CTX)) == "ctx()"


def test_byte_swaps_are_sound():
    rng = random.Random(9)
    for _ in range(300):
        t = _rand_tnum(rng, 16)
        r = _scalar(t)
        for bits in (16, 32, 64):
            for to_be, is64 in ((True, False), (False, False), (False, True)):
                out = ALU.swap(r, bits, to_be, is64)
                for x in _members(t, 16):
                    low = x & ((1 << bits) - 1)
                    want = (
                        int.from_bytes(low.to_bytes(bits // 8, "little"), "big")
                        if (to_be or is64)
                        else low
                    )
                    assert _admits(out, want), (t, bits, to_be, is64, x, out)
