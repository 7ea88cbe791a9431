"""ALU and conditional-jump semantics of the userspace machine, used by the jit where it does not inline.

Scalars are ints in ``[0, 2**64)``; 32-bit operations use the low halves and zero-extend
the result (kernel/bpf/core.c).  Pointer arithmetic is allowed only where the verifier
allows it: 64-bit add/sub of a scalar, pointer - pointer within one region, copies,
comparisons of pointers into one region and null checks against 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NoReturn

from bpfdsl.abi import intops
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_FETCH,
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
    BPF_MOD,
    BPF_SUB,
    BPF_XCHG,
)
from bpfdsl.interp.memory import M64, Fault, Ptr, s64

# one definition of the integer semantics (bpfdsl.abi.intops): the constant folder uses the
# same functions; tests/test_fold_semantics.py checks the jit's inlined scalar code too
OPS64: dict[int, Callable[[int, int], int]] = {
    code: intops.bpf_alu_fn(code, 64) for code in intops.BPF_ALU_OPS
}
OPS32: dict[int, Callable[[int, int], int]] = {
    code: intops.bpf_alu_fn(code, 32) for code in intops.BPF_ALU_OPS
}
# BPF_DIV/BPF_MOD with off 1 (sdiv/smod, ISA v4)
SIGNED64 = {c: intops.bpf_alu_fn(c, 64, signed_div=True) for c in (BPF_DIV, BPF_MOD)}
SIGNED32 = {c: intops.bpf_alu_fn(c, 32, signed_div=True) for c in (BPF_DIV, BPF_MOD)}


def sext(v: int, bits: int) -> int:
    """Sign-extend the low ``bits`` of ``v`` (a Python int, may be negative)."""
    return intops.to_signed(v, bits)


def bswap(v: int, bits: int) -> int:
    """Reverse the bytes of the low ``bits`` of ``v`` (BPF_END to big endian / bswap)."""
    n = bits // 8
    return int.from_bytes((v & ((1 << bits) - 1)).to_bytes(n, "little"), "big")


def ptr_arith(op: int, a: object, b: object) -> object:
    """64-bit add/sub with a pointer operand as the verifier allows it; raises Fault else."""
    if a is None or b is None:
        raise Fault("arithmetic on an uninitialized register")
    if op == BPF_ADD:
        if type(a) is Ptr and type(b) is int:
            return a.add(s64(b))
        if type(a) is int and type(b) is Ptr:
            return b.add(s64(a))
    elif op == BPF_SUB:
        if type(a) is Ptr and type(b) is int:
            return a.add(-s64(b))
        if type(a) is Ptr and type(b) is Ptr and a.region is b.region:
            return (a.off - b.off) & M64
    raise Fault("pointer arithmetic the verifier prohibits (only 64-bit +/- a scalar)")


_CMP: dict[int, Callable[[int, int], bool]] = {
    BPF_JEQ: lambda a, b: a == b,
    BPF_JNE: lambda a, b: a != b,
    BPF_JGT: lambda a, b: a > b,
    BPF_JGE: lambda a, b: a >= b,
    BPF_JLT: lambda a, b: a < b,
    BPF_JLE: lambda a, b: a <= b,
    BPF_JSET: lambda a, b: bool(a & b),
}
_SCMP: dict[int, Callable[[int, int], bool]] = {
    BPF_JSGT: lambda a, b: a > b,
    BPF_JSGE: lambda a, b: a >= b,
    BPF_JSLT: lambda a, b: a < b,
    BPF_JSLE: lambda a, b: a <= b,
}


def ptr_cmp(op: int, a: object, b: object, wide: bool) -> bool:
    """A conditional jump with a pointer operand: same-region offsets or a NULL check."""
    if a is None or b is None:
        raise Fault("comparison of an uninitialized register")
    if wide and type(a) is Ptr and type(b) is Ptr and a.region is b.region:
        f = _CMP.get(op) or _SCMP[op]
        return f(a.off, b.off)
    if wide and op in (BPF_JEQ, BPF_JNE) and (a == 0 or b == 0):
        return op == BPF_JNE  # a valid pointer is never NULL
    raise Fault("comparison of a pointer with a scalar or another region's pointer")


# ---- runtime support of the generated blocks (jit.py) ----


def nonint(v: object, what: str = "arithmetic on a pointer") -> int:
    """Raise the Fault for a non-scalar operand (uninitialized register or pointer)."""
    if v is None:
        raise Fault("a register is read before it is written")
    raise Fault(f"{what} (the verifier prohibits it)")


def as_int(v: object) -> int:
    """``v`` if it is a scalar, else the Fault of :func:`nonint`."""
    return v if type(v) is int else nonint(v)


def badptr(v: object, what: str) -> NoReturn:
    """Raise the Fault for a memory access through a non-pointer."""
    kind = "uninitialized register" if v is None else "scalar"
    raise Fault(f"{what} through a {kind}")


def stx(p: object, off: int, size: int, v: object, src: int) -> None:
    """BPF_STX: store register ``v`` (r``src``) at ``p + off``; pointers only as 8-byte spills."""
    if type(p) is not Ptr:
        badptr(p, "store")
    if v is None:
        raise Fault(f"store of uninitialized r{src}")
    if type(v) is not int and size != 8:
        raise Fault("partial store of a pointer")
    p.region.store(p, off, size, v)


def atomic(code: int, size: int, off: int, p: object, v: object, r0: object) -> tuple:
    """One BPF_ATOMIC op; returns the new (src register, r0)."""
    if type(p) is not Ptr:
        badptr(p, "atomic")
    if p.region.kind not in ("stack", "map_value"):
        raise Fault(f"atomic operation on {p.region.name} (only stack and map values)")
    if type(v) is not int:
        raise Fault("atomic operand is not a scalar")
    mask = (1 << (size * 8)) - 1
    old = p.region.load(p, off, size)
    if code == BPF_CMPXCHG:
        if type(r0) is not int:
            raise Fault("cmpxchg: r0 is not a scalar")
        if (r0 & mask) == old:
            p.region.store(p, off, size, v & mask)
        return v, old
    if code == BPF_XCHG:
        p.region.store(p, off, size, v & mask)
        return old, r0
    if type(old) is not int:
        raise Fault("atomic arithmetic on a slot holding a pointer")
    fn = OPS64[code & ~BPF_FETCH]
    p.region.store(p, off, size, fn(old, v) & mask)
    return (old if code & BPF_FETCH else v), r0
