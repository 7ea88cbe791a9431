"""Tracked numbers ("tnums"): which bits of a 64-bit value are known (kernel/bpf/tnum.c).

A tnum is ``(value, mask)``: bits set in ``mask`` are unknown, the other bits equal
``value``'s (invariant ``value & mask == 0``).  Both are Python ints in ``[0, 2**64)``.
The functions mirror the kernel's names.
"""

from __future__ import annotations

from typing import Final

M64: Final = (1 << 64) - 1
M32: Final = (1 << 32) - 1

Tnum = tuple[int, int]
UNKNOWN: Final[Tnum] = (0, M64)


def const(v: int) -> Tnum:
    """The tnum of one known value (any int, taken modulo 2**64)."""
    return (v & M64, 0)


def trange(lo: int, hi: int) -> Tnum:
    """Smallest tnum holding every value of the unsigned range ``lo..hi`` (tnum_range)."""
    chi = lo ^ hi
    if chi == 0:
        return (lo, 0)
    bits = chi.bit_length()
    if bits > 63:
        return UNKNOWN
    delta = (1 << bits) - 1
    return (lo & ~delta & M64, delta)


def is_const(t: Tnum) -> bool:
    return t[1] == 0


def umin(t: Tnum) -> int:
    return t[0]


def umax(t: Tnum) -> int:
    return t[0] | t[1]


def add(a: Tnum, b: Tnum) -> Tnum:
    sm = (a[1] + b[1]) & M64
    sv = (a[0] + b[0]) & M64
    sigma = (sm + sv) & M64
    chi = sigma ^ sv
    mu = chi | a[1] | b[1]
    return (sv & ~mu & M64, mu)


def sub(a: Tnum, b: Tnum) -> Tnum:
    dv = (a[0] - b[0]) & M64
    alpha = (dv + a[1]) & M64
    beta = (dv - b[1]) & M64
    chi = alpha ^ beta
    mu = chi | a[1] | b[1]
    return (dv & ~mu & M64, mu)


def neg(a: Tnum) -> Tnum:
    return sub((0, 0), a)


def and_(a: Tnum, b: Tnum) -> Tnum:
    alpha = a[0] | a[1]
    beta = b[0] | b[1]
    v = a[0] & b[0]
    return (v, alpha & beta & ~v & M64)


def or_(a: Tnum, b: Tnum) -> Tnum:
    v = a[0] | b[0]
    mu = a[1] | b[1]
    return (v, mu & ~v & M64)


def xor(a: Tnum, b: Tnum) -> Tnum:
    v = a[0] ^ b[0]
    mu = a[1] | b[1]
    return (v & ~mu & M64, mu)


def mul(a: Tnum, b: Tnum) -> Tnum:
    """Multiplication (tnum_mul, the 2022 "half-multiply" algorithm); memoized (pure, and
    up to 64 rounds of tnum addition per call)."""
    if a[1] == 0 and b[1] == 0:
        return const(a[0] * b[0])
    key = (a, b)
    r = _MUL.get(key)
    if r is None:
        r = _mul(a, b)
        if len(_MUL) >= 4096:
            _MUL.clear()
        _MUL[key] = r
    return r


_MUL: Final[dict[tuple[Tnum, Tnum], Tnum]] = {}


def _mul(a: Tnum, b: Tnum) -> Tnum:
    acc_v = (a[0] * b[0]) & M64
    acc_m: Tnum = (0, 0)
    av, am = a
    bv, bm = b
    while av or am:
        if av & 1:
            acc_m = add(acc_m, (0, bm))
        elif am & 1:
            acc_m = add(acc_m, (0, (bv | bm) & M64))
        av >>= 1
        am >>= 1
        bv = (bv << 1) & M64
        bm = (bm << 1) & M64
    return add((acc_v, 0), acc_m)


def lshift(a: Tnum, s: int) -> Tnum:
    return ((a[0] << s) & M64, (a[1] << s) & M64)


def rshift(a: Tnum, s: int) -> Tnum:
    return (a[0] >> s, a[1] >> s)


def arshift(a: Tnum, s: int, bits: int = 64) -> Tnum:
    """Arithmetic shift right of a ``bits``-wide (32 or 64) tnum; result zero-extended."""
    full = (1 << bits) - 1

    def sar(x: int) -> int:
        if x & (1 << (bits - 1)):
            x -= 1 << bits
        return (x >> s) & full

    return (sar(a[0]), sar(a[1]))


def intersect(a: Tnum, b: Tnum) -> Tnum:
    v = a[0] | b[0]
    mu = a[1] & b[1]
    return (v & ~mu & M64, mu)


def union(a: Tnum, b: Tnum) -> Tnum:
    """Smallest tnum containing both (tnum_union)."""
    mu = a[1] | b[1] | (a[0] ^ b[0])
    return (a[0] & ~mu & M64, mu)


def subreg(a: Tnum) -> Tnum:
    """Low 32 bits, zero-extended (tnum_subreg / tnum_cast(a, 4))."""
    return (a[0] & M32, a[1] & M32)


def with_subreg(a: Tnum, low: Tnum) -> Tnum:
    """``a`` with its low 32 bits replaced by ``low``'s (tnum_with_subreg)."""
    return ((a[0] & ~M32 & M64) | (low[0] & M32), (a[1] & ~M32 & M64) | (low[1] & M32))


def cast(a: Tnum, size: int) -> Tnum:
    """Truncate to ``size`` bytes (tnum_cast)."""
    m = (1 << (size * 8)) - 1
    return (a[0] & m, a[1] & m)


def contains(a: Tnum, b: Tnum) -> bool:
    """Whether every value of ``b`` is a value of ``a`` (tnum_in(a, b))."""
    if b[1] & ~a[1]:
        return False
    return (b[0] & ~a[1]) == a[0]


def is_aligned(a: Tnum, size: int) -> bool:
    if not size:
        return True
    return not ((a[0] | a[1]) & (size - 1))


def fmt(a: Tnum) -> str:
    return f"({a[0]:#x}; {a[1]:#x})"
