"""The checker's memo tables return exactly what the direct computation returns.

domain.sync/resync, tnum.mul and alu.scalar_alu cache their results keyed by the inputs'
tnums and bounds (the same ranges recur on every path).  A key that missed an input, or a
cached result that leaked a register's identity fields (id, note, type), would change
verdicts silently; these tests compare cached against uncached results on random inputs,
with fixed seeds, looking each key up twice and with different identity fields.
"""

from __future__ import annotations

import random

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
    BPF_MOD,
    BPF_MUL,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_XOR,
)
from bpfdsl.checker import alu as ALU
from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T
from bpfdsl.checker.branch import refine, refine_possible

M64 = T.M64
FIELDS = ("t", "off", "tn", "id", "rng", "map", "ref", "note") + tuple(
    "smin smax umin umax s32min s32max u32min u32max".split()
)


def _tnum(rng: random.Random) -> T.Tnum:
    width = rng.choice([4, 8, 16, 32, 64])
    m = rng.getrandbits(width) & rng.getrandbits(width)
    v = rng.getrandbits(64) & ~m & M64
    return (v, m)


def _reg(rng: random.Random, **kw) -> D.Reg:
    t = _tnum(rng)
    lo = t[0] + (rng.getrandbits(3) if rng.random() < 0.5 else 0)
    b = (D.S64_MIN, D.S64_MAX, min(lo, t[0] | t[1]), t[0] | t[1]) + D.UNKNOWN_BOUNDS[4:]
    return D.sync(D.Reg(D.SCALAR, tn=t, b=b, **kw))


def _same(a: D.Reg, b: D.Reg) -> bool:
    return all(getattr(a, f) == getattr(b, f) for f in FIELDS)


def test_sync_memo_matches_direct_computation_and_keeps_identity():
    rng = random.Random(21)
    for _ in range(400):
        r = _reg(rng)
        # same tnum, other bounds: a key without the bounds would return the wrong result
        narrow = r.bounds()[:3] + (r.umin + rng.getrandbits(3),) + r.bounds()[4:]
        for b0 in (r.bounds(), narrow, r.bounds(), narrow):
            tn, b = D._sync(r.tn, b0)
            for who in (D.Reg(D.SCALAR, id=7, note="n"), D.Reg(D.PKT, off=14, rng=20, id=3)):
                out = D.resync(who, r.tn, b0)
                assert (out.tn, out.bounds()) == (tn, b)
                assert (out.t, out.off, out.id, out.rng, out.note) == (
                    who.t,
                    who.off,
                    who.id,
                    who.rng,
                    who.note,
                )


def test_tnum_mul_memo_matches_direct_computation():
    rng = random.Random(22)
    for _ in range(300):
        a, b, c = _tnum(rng), _tnum(rng), _tnum(rng)
        for x, y in ((a, b), (a, c), (b, a), (a, b), (a, c)):
            if x[1] == 0 and y[1] == 0:
                continue
            assert T.mul(x, y) == T._mul(x, y), (x, y)


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
    BPF_DIV,
    BPF_MOD,
]


def test_scalar_alu_memo_matches_direct_computation_and_is_fresh():
    rng = random.Random(23)
    for _ in range(500):
        op = rng.choice(OPS)
        d = _reg(rng, id=rng.choice([0, 5]), note=rng.choice(["", "why"]))
        # same tnum, other bounds: a key without the bounds would return the wrong result
        d2 = D.sync(d.replace(umax=d.umin + rng.getrandbits(2))) if d.tn[1] else d
        s = D.known(rng.randrange(64)) if rng.random() < 0.4 else _reg(rng)
        cases = [(x, is64) for x in (d, d2) for is64 in (True, False)]
        rng.shuffle(cases)
        for x, is64 in cases + cases:  # each key twice: computed, then from the table
            direct = ALU._scalar_alu(op, x, s, is64, False)
            out = ALU.scalar_alu(op, x, s, is64)
            assert (out.tn, out.bounds()) == (direct.tn, direct.bounds()), (op, is64, x, s)
            if op not in (BPF_DIV, BPF_MOD):
                # a fresh scalar: never the operand's id or note
                assert _same(out, direct) and out.id == 0 and out.note == ""
        other = ALU.scalar_alu(op, d.replace(id=9, note="other"), s, True)
        if op not in (BPF_DIV, BPF_MOD):
            assert other.id == 0 and other.note == ""


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


def test_branch_refinement_memo_matches_direct_computation_and_keeps_identity():
    rng = random.Random(24)
    for _ in range(500):
        op = rng.choice(JMPS)
        a = _reg(rng, id=rng.choice([0, 4]))
        a2 = D.sync(a.replace(umax=a.umin + rng.getrandbits(2))) if a.tn[1] else a
        b = D.known(rng.randrange(300)) if rng.random() < 0.6 else _reg(rng)
        cases = [(x, is32) for x in (a, a2) for is32 in (True, False)]
        rng.shuffle(cases)
        for x, is32 in cases + cases:  # each key twice: computed, then from the table
            na, nb = refine(x, b, op, is32)
            want = None if D.is_bottom(na) or D.is_bottom(nb) else (na, nb)
            got = refine_possible(x.replace(id=x.id, note="n"), b, op, is32)
            if want is None:
                assert got is None, (op, is32, x, b)
                continue
            assert got is not None, (op, is32, x, b)
            assert (got[0].tn, got[0].bounds()) == (na.tn, na.bounds())
            assert (got[1].tn, got[1].bounds()) == (nb.tn, nb.bounds())
            assert got[0].id == x.id and got[0].note == "n" and got[1].id == b.id
