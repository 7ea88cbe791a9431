"""Scalar ALU transfer functions: bounds and known bits of ``dst op src`` (both scalars).

Follows kernel/bpf/verifier.c ``adjust_scalar_min_max_vals`` and the ``scalar*_min_max_*``
helpers: add/sub with overflow checks, and/or/xor/mul from tnums plus ranges, shifts
by constants, div/mod and byte swaps exact on constants and unknown otherwise.  BPF
division by zero gives 0 and modulo by zero keeps the dividend (the kernel patches the
program so; only an immediate divisor of 0 is rejected, by the analyzer).
"""

from __future__ import annotations

from typing import Final

from bpfdsl.abi import intops
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_AND,
    BPF_ARSH,
    BPF_DIV,
    BPF_LSH,
    BPF_MOD,
    BPF_MUL,
    BPF_OR,
    BPF_RSH,
    BPF_SUB,
    BPF_XOR,
)
from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T

M64: Final = T.M64
M32: Final = T.M32


def _const_op(op: int, a: int, b: int, bits: int, signed_div: bool) -> int:
    """``a op b`` on two known ``bits``-wide values: bpfdsl.abi.intops, the semantics the
    interpreter and constant folding use too (raw result)."""
    if op not in intops.BPF_ALU_OPS:
        raise ValueError(op)
    return intops.bpf_alu_fn(op, bits, signed_div)(a, b)


def _sx(v: int, bits: int) -> int:
    return v - (1 << bits) if v >> (bits - 1) else v


def _from_bounds(
    tn: tuple[int, int], smin: int, smax: int, umin: int, umax: int, bits: int
) -> D.Reg:
    if bits == 64:
        return D.scalar(tn, (smin, smax, umin, umax) + D.UNKNOWN_BOUNDS[4:])
    # the 32-bit result zero-extended: 64-bit bounds 0..2**32-1, 32-bit ones as computed
    return D.scalar(tn, (0, M32, 0, M32, smin, smax, umin, umax))


def _view(r: D.Reg, bits: int) -> tuple[tuple[int, int], int, int, int, int]:
    """(tnum, smin, smax, umin, umax) of the 64-bit value or of the low 32 bits."""
    if bits == 64:
        return r.tn, r.smin, r.smax, r.umin, r.umax
    return T.subreg(r.tn), r.s32min, r.s32max, r.u32min, r.u32max


_DIV_MOD: Final = (BPF_DIV, BPF_MOD)
_MEMO: Final[dict[tuple, D.Reg]] = {}


def scalar_alu(op: int, dst: D.Reg, src: D.Reg, is64: bool, signed_div: bool = False) -> D.Reg:
    """Result of ``dst op src`` for scalars (ALU64 when ``is64``, else ALU32 zero-extended).

    Always a fresh scalar (no id, no note) that depends only on the operands' tnums and
    bounds, so results are memoized, the register itself shared (div/mod are not)."""
    if op in _DIV_MOD:
        return _scalar_alu(op, dst, src, is64, signed_div)
    key = (
        op,
        is64,
        signed_div,
        dst.tn,
        dst.smin,
        dst.smax,
        dst.umin,
        dst.umax,
        dst.s32min,
        dst.s32max,
        dst.u32min,
        dst.u32max,
        src.tn,
        src.smin,
        src.smax,
        src.umin,
        src.umax,
        src.s32min,
        src.s32max,
        src.u32min,
        src.u32max,
    )
    hit = _MEMO.get(key)
    if hit is None:
        hit = _scalar_alu(op, dst, src, is64, signed_div)
        if hit.id or hit.ref or hit.note or hit.off or hit.t != D.SCALAR:
            hit = D.fresh_scalar(hit.tn, hit.bounds())  # only a fresh scalar is shared
        if len(_MEMO) >= 8192:
            _MEMO.clear()
        _MEMO[key] = hit
    return hit


def _add_sub_bounds(op: int, dst: D.Reg, src: D.Reg, bits: int) -> tuple[int, int, int, int]:
    """(smin, smax, umin, umax) of ``dst + src`` / ``dst - src`` in ``bits`` (64, or the
    low 32): the kernel's scalar_min_max_add/sub and scalar32_min_max_add/sub (6.18): the
    signed sum unbounded when either end overflows; the unsigned one kept, wrapped, when
    both ends overflow (or underflow) or neither does."""
    _t, dsmin, dsmax, dumin, dumax = _view(dst, bits)
    _t, ssmin, ssmax, sumin, sumax = _view(src, bits)
    mask = M64 if bits == 64 else M32
    lim = 1 << (bits - 1)
    if op == BPF_ADD:
        smin, smax = dsmin + ssmin, dsmax + ssmax
        umin, umax = dumin + sumin, dumax + sumax
        u_unbounded = umin <= mask < umax
    else:
        smin, smax = dsmin - ssmax, dsmax - ssmin
        umin, umax = dumin - sumax, dumax - sumin
        u_unbounded = umin < 0 <= umax
    if smin < -lim or smax >= lim:
        smin, smax = -lim, lim - 1
    if u_unbounded:
        umin, umax = 0, mask
    else:
        umin, umax = umin & mask, umax & mask
    return smin, smax, umin, umax


def _scalar_alu(op: int, dst: D.Reg, src: D.Reg, is64: bool, signed_div: bool) -> D.Reg:
    bits = 64 if is64 else 32
    mask = M64 if is64 else M32
    if op in (BPF_DIV, BPF_MOD) or (
        op in (BPF_LSH, BPF_RSH, BPF_ARSH) and (src.tn[1] or src.umax >= bits)
    ):
        # kernel is_safe_to_compute_dst_reg_range: no tracking through div/mod (even of
        # constants) or non-constant shifts; modelling more would accept what it rejects.
        # The kernel returns before zero-extending an ALU32 result: all 64 bits unknown.
        return D.unknown()
    smin_lim, smax_lim = (D.S64_MIN, D.S64_MAX) if is64 else (D.S32_MIN, D.S32_MAX)
    if dst.tn[1] == 0 and src.tn[1] == 0:
        v = _const_op(op, dst.tn[0], src.tn[0], bits, signed_div) & mask
        return D.known(v)
    dt, dsmin, dsmax, dumin, dumax = _view(dst, bits)
    st, ssmin, ssmax, sumin, sumax = _view(src, bits)
    smin, smax, umin, umax = smin_lim, smax_lim, 0, mask
    if op == BPF_ADD or op == BPF_SUB:
        tn = T.cast((T.add if op == BPF_ADD else T.sub)(dt, st), bits // 8)
        smin, smax, umin, umax = _add_sub_bounds(op, dst, src, bits)
        if is64:  # the kernel's scalar32_min_max_add/sub on the 32-bit bounds too
            b32 = _add_sub_bounds(op, dst, src, 32)
            return D.scalar(tn, (smin, smax, umin, umax, *b32))
    elif op == BPF_MUL:
        tn = T.cast(T.mul(dt, st), bits // 8)
        if dumax * sumax <= mask:
            umin, umax = dumin * sumin, dumax * sumax
            if umax <= smax_lim:
                smin, smax = umin, umax
    elif op == BPF_AND:
        tn = T.and_(dt, st)
        umin, umax = tn[0], min(dumax, sumax)
        if dsmin >= 0 and ssmin >= 0:
            smin, smax = umin, umax
    elif op == BPF_OR:
        tn = T.or_(dt, st)
        umin, umax = max(dumin, sumin), tn[0] | tn[1]
        if dsmin >= 0 and ssmin >= 0:
            smin, smax = umin, umax
    elif op == BPF_XOR:
        tn = T.xor(dt, st)
        umin, umax = tn[0], tn[0] | tn[1]
        if dsmin >= 0 and ssmin >= 0:
            smin, smax = umin, umax
    elif op in (BPF_LSH, BPF_RSH, BPF_ARSH) and src.tn[1] == 0:
        s = src.tn[0] & mask
        if s >= bits:
            return D.unknown() if is64 else D.zext32(D.unknown())
        if op == BPF_LSH:
            tn = T.cast(T.lshift(dt, s), bits // 8)
            if (dumax << s) <= mask:
                umin, umax = dumin << s, dumax << s
        elif op == BPF_RSH:
            tn = T.rshift(dt, s)
            umin, umax = dumin >> s, dumax >> s
        else:
            tn = T.arshift(dt, s, bits)
            smin, smax = dsmin >> s, dsmax >> s
    elif op in (BPF_DIV, BPF_MOD) and src.tn[1] == 0 and not signed_div:
        d = src.tn[0] & mask
        if op == BPF_DIV:
            if d == 0:
                return D.known(0)
            umin, umax = dumin // d, dumax // d
        else:
            if d == 0:
                return dst if is64 else D.zext32(dst)
            umin, umax = 0, min(dumax, d - 1)
        tn = T.trange(umin, umax)
        if umax <= smax_lim:
            smin, smax = umin, umax
    else:
        r = D.unknown()
        return r if is64 else D.zext32(r)
    return _from_bounds(tn, smin, smax, umin, umax, bits)


def swap(r: D.Reg, bits: int, to_be: bool, is64: bool) -> D.Reg:
    """BPF_END: byte swap (bswap / be) or truncation (le, host is little endian) of the low
    ``bits`` bits, on the tnum (kernel tnum_bswap16/32/64): known bytes stay known."""
    if r.t != D.SCALAR:
        return D.unknown()
    nbytes = bits // 8
    v, m = T.cast(r.tn, nbytes)
    if is64 or to_be:
        v = int.from_bytes(v.to_bytes(nbytes, "little"), "big")
        m = int.from_bytes(m.to_bytes(nbytes, "little"), "big")
    return D.sync(D.Reg(D.SCALAR, tn=(v, m), b=D.UNKNOWN_BOUNDS))


def neg(r: D.Reg, is64: bool) -> D.Reg:
    """BPF_NEG: ``0 - r``, as the kernel computes it (adjust_scalar_min_max_vals's
    BPF_NEG case: scalar_min_max_sub from a known 0, tnum_neg): ``-[0, 1]`` is [-1, 0],
    which decides a later ``if r != 64``."""
    if r.tn[1] == 0:
        return D.known((-r.tn[0]) & (M64 if is64 else M32))
    return scalar_alu(BPF_SUB, D.known(0), r, is64)


def movsx(r: D.Reg, bits: int, is64: bool) -> D.Reg:
    """MOVSX (and a sign-extending load): sign-extend the low ``bits`` (8/16/32) bits, the
    kernel's coerce_reg_to_size_sx (64-bit; its bounds are not synced after it, as in the
    kernel) or coerce_subreg_to_size_sx then zext_32_to_64 and reg_bounds_sync (32-bit).
    A fresh scalar (no id)."""
    low = (1 << bits) - 1
    if is64:
        if r.tn[1] == 0:
            return D.known(_sx(r.tn[0] & low, bits) & M64)
        if (r.smin & M64) >> bits == (r.smax & M64) >> bits:
            a, b = _sx(r.smax & low, bits), _sx(r.smin & low, bits)
            lo, hi = min(a, b), max(a, b)
            if (lo >= 0) == (hi >= 0):  # one sign: the range sign-extends as it is
                b8 = (lo, hi, lo & M64, hi & M64, lo, hi, lo & M32, hi & M32)
                return D.fresh_scalar(T.trange(lo & M64, hi & M64), b8)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1  # set_sext64_default_val
        return D.fresh_scalar(T.UNKNOWN, (lo, hi, 0, M64, lo, hi, 0, M32))
    if r.tn[1] == 0:
        return D.known(_sx(r.tn[0] & low, bits) & M32)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1  # set_sext32_default_val
    tn, b32 = (0, M32), (lo, hi, 0, M32)
    if (r.s32min & M32) >> bits == (r.s32max & M32) >> bits:
        a, b = _sx(r.s32max & low, bits), _sx(r.s32min & low, bits)
        x, y = min(a, b), max(a, b)
        if (x >= 0) == (y >= 0):
            tn, b32 = T.subreg(T.trange(x & M64, y & M64)), (x, y, x & M32, y & M32)
    # zext_32_to_64: the 64-bit bounds from the 32-bit ones, then reg_bounds_sync
    s32min, s32max, u32min, u32max = b32
    smin, smax = (s32min, s32max) if s32min >= 0 and s32max >= 0 else (0, M32)
    return D.scalar(tn, (smin, smax, u32min, u32max, s32min, s32max, u32min, u32max))
