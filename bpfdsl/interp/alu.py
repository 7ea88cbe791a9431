"""ALU and conditional-jump semantics of the userspace machine (one closure per insn).

Scalars are ints in ``[0, 2**64)``; 32-bit operations use the low halves and zero-extend
the result (kernel/bpf/core.c).  Pointer arithmetic is allowed only where the verifier
allows it: 64-bit add/sub of a scalar, pointer - pointer within one region, copies,
comparisons of pointers into one region and null checks against 0.
"""

from __future__ import annotations

from collections.abc import Callable

from bpfdsl import uapi as U
from bpfdsl.insn import Insn

from .memory import M32, M64, Fault, Ptr, s32, s64


def _tdiv(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def _sdiv64(a: int, b: int) -> int:
    if b == 0:
        return 0
    return _tdiv(s64(a), s64(b)) & M64


def _smod64(a: int, b: int) -> int:
    if b == 0:
        return a
    x, y = s64(a), s64(b)
    return (x - y * _tdiv(x, y)) & M64


def _sdiv32(a: int, b: int) -> int:
    if b & M32 == 0:
        return 0
    return _tdiv(s32(a), s32(b)) & M32


def _smod32(a: int, b: int) -> int:
    if b & M32 == 0:
        return a & M32
    x, y = s32(a), s32(b)
    return (x - y * _tdiv(x, y)) & M32


OPS64: dict[int, Callable[[int, int], int]] = {
    U.BPF_ADD: lambda a, b: (a + b) & M64,
    U.BPF_SUB: lambda a, b: (a - b) & M64,
    U.BPF_MUL: lambda a, b: (a * b) & M64,
    U.BPF_DIV: lambda a, b: a // b if b else 0,
    U.BPF_OR: lambda a, b: a | b,
    U.BPF_AND: lambda a, b: a & b,
    U.BPF_LSH: lambda a, b: (a << (b & 63)) & M64,
    U.BPF_RSH: lambda a, b: a >> (b & 63),
    U.BPF_MOD: lambda a, b: a % b if b else a,
    U.BPF_XOR: lambda a, b: a ^ b,
    U.BPF_ARSH: lambda a, b: (s64(a) >> (b & 63)) & M64,
}
OPS32: dict[int, Callable[[int, int], int]] = {
    U.BPF_ADD: lambda a, b: (a + b) & M32,
    U.BPF_SUB: lambda a, b: (a - b) & M32,
    U.BPF_MUL: lambda a, b: (a * b) & M32,
    U.BPF_DIV: lambda a, b: (a & M32) // (b & M32) if b & M32 else 0,
    U.BPF_OR: lambda a, b: (a | b) & M32,
    U.BPF_AND: lambda a, b: a & b & M32,
    U.BPF_LSH: lambda a, b: (a << (b & 31)) & M32,
    U.BPF_RSH: lambda a, b: (a & M32) >> (b & 31),
    U.BPF_MOD: lambda a, b: (a & M32) % (b & M32) if b & M32 else a & M32,
    U.BPF_XOR: lambda a, b: (a ^ b) & M32,
    U.BPF_ARSH: lambda a, b: (s32(a) >> (b & 31)) & M32,
}
SIGNED64 = {U.BPF_DIV: _sdiv64, U.BPF_MOD: _smod64}
SIGNED32 = {U.BPF_DIV: _sdiv32, U.BPF_MOD: _smod32}


def _sext(v: int, bits: int) -> int:
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


def _bswap(v: int, bits: int) -> int:
    n = bits // 8
    return int.from_bytes((v & ((1 << bits) - 1)).to_bytes(n, "little"), "big")


def _ptr_arith(op: int, a: object, b: object) -> object:
    if a is None or b is None:
        raise Fault("arithmetic on an uninitialized register")
    if op == U.BPF_ADD:
        if type(a) is Ptr and type(b) is int:
            return a.add(s64(b))
        if type(a) is int and type(b) is Ptr:
            return b.add(s64(a))
    elif op == U.BPF_SUB:
        if type(a) is Ptr and type(b) is int:
            return a.add(-s64(b))
        if type(a) is Ptr and type(b) is Ptr and a.region is b.region:
            return (a.off - b.off) & M64
    raise Fault("pointer arithmetic the verifier prohibits (only 64-bit +/- a scalar)")


def alu_op(R: list, x: Insn, nxt: int) -> Callable[[], int]:
    """Closure for one BPF_ALU/BPF_ALU64 instruction; returns ``nxt``."""
    d, s, op, wide = x.dst, x.src, x.op, x.is_alu64
    use_reg = x.source == U.BPF_X
    imm = x.imm & (M64 if wide else M32)

    if op == U.BPF_END:
        bits = x.imm
        if bits not in (16, 32, 64):
            raise_bad = f"byte swap of {bits} bits"
            return _fault(raise_bad)
        swap = wide or x.source == U.BPF_TO_BE  # ALU64|END is bswap; LE is a no-op on bpfel

        def end() -> int:
            a = _scalar(R[d])
            R[d] = _bswap(a, bits) if swap else a & ((1 << bits) - 1)
            return nxt

        return end

    if op == U.BPF_NEG:
        mask = M64 if wide else M32

        def neg() -> int:
            R[d] = -_scalar(R[d]) & mask
            return nxt

        return neg

    if op == U.BPF_MOV:
        if not use_reg:

            def mov_k() -> int:
                R[d] = imm
                return nxt

            return mov_k
        if x.off:
            bits = x.off
            mask = M64 if wide else M32

            def movsx() -> int:
                R[d] = _sext(_scalar(R[s]), bits) & mask
                return nxt

            return movsx
        if wide:

            def mov_x() -> int:
                v = R[s]
                if v is None:
                    raise Fault(f"r{s} is read before it is written")
                R[d] = v
                return nxt

            return mov_x

        def mov32_x() -> int:
            R[d] = _scalar(R[s], "32-bit move of a pointer") & M32
            return nxt

        return mov32_x

    table = (SIGNED64 if wide else SIGNED32) if (x.off == 1 and op in SIGNED64) else None
    f = (table or (OPS64 if wide else OPS32)).get(op)
    if f is None:
        return _fault(f"unknown ALU operation {x.opcode:#04x}")

    if not use_reg:
        if wide and op == U.BPF_ADD:
            simm = s64(imm)

            def add_k() -> int:
                a = R[d]
                if type(a) is int:
                    R[d] = (a + imm) & M64
                elif type(a) is Ptr:
                    R[d] = a.add(simm)
                else:
                    _ptr_arith(op, a, imm)
                return nxt

            return add_k

        def alu_k() -> int:
            a = R[d]
            if type(a) is int:
                R[d] = f(a, imm)
            elif wide:
                R[d] = _ptr_arith(op, a, imm)
            else:
                raise Fault("32-bit arithmetic on a pointer (the verifier prohibits it)")
            return nxt

        return alu_k

    def alu_x() -> int:
        a, b = R[d], R[s]
        if type(a) is int and type(b) is int:
            R[d] = f(a, b)
        elif wide:
            R[d] = _ptr_arith(op, a, b)
        else:
            raise Fault("32-bit arithmetic on a pointer (the verifier prohibits it)")
        return nxt

    return alu_x


def _scalar(v: object, what: str = "arithmetic on a pointer") -> int:
    if type(v) is int:
        return v
    if v is None:
        raise Fault("a register is read before it is written")
    raise Fault(f"{what} (the verifier prohibits it)")


def _fault(msg: str) -> Callable[[], int]:
    def op() -> int:
        raise Fault(msg)

    return op


_CMP: dict[int, Callable[[int, int], bool]] = {
    U.BPF_JEQ: lambda a, b: a == b,
    U.BPF_JNE: lambda a, b: a != b,
    U.BPF_JGT: lambda a, b: a > b,
    U.BPF_JGE: lambda a, b: a >= b,
    U.BPF_JLT: lambda a, b: a < b,
    U.BPF_JLE: lambda a, b: a <= b,
    U.BPF_JSET: lambda a, b: bool(a & b),
}
_SCMP: dict[int, Callable[[int, int], bool]] = {
    U.BPF_JSGT: lambda a, b: a > b,
    U.BPF_JSGE: lambda a, b: a >= b,
    U.BPF_JSLT: lambda a, b: a < b,
    U.BPF_JSLE: lambda a, b: a <= b,
}


def _ptr_cmp(op: int, a: object, b: object, wide: bool) -> bool:
    if a is None or b is None:
        raise Fault("comparison of an uninitialized register")
    if wide and type(a) is Ptr and type(b) is Ptr and a.region is b.region:
        f = _CMP.get(op) or _SCMP[op]
        return f(a.off, b.off)
    if wide and op in (U.BPF_JEQ, U.BPF_JNE) and (a == 0 or b == 0):
        return op == U.BPF_JNE  # a valid pointer is never NULL
    raise Fault("comparison of a pointer with a scalar or another region's pointer")


def jmp_op(R: list, x: Insn, nxt: int, tgt: int) -> Callable[[], int]:
    """Closure for a JMP/JMP32 jump (not call/exit); returns ``tgt`` or ``nxt``."""
    d, s, op, wide = x.dst, x.src, x.op, x.cls == U.BPF_JMP
    if op == U.BPF_JA:
        return lambda: tgt
    signed = op in _SCMP
    f = _SCMP.get(op) or _CMP.get(op)
    if f is None:
        return _fault(f"unknown jump operation {x.opcode:#04x}")
    use_reg = x.source == U.BPF_X
    mask = M64 if wide else M32
    conv = (s64 if wide else s32) if signed else None
    kval = x.imm & mask
    if conv:
        kval = conv(kval)

    if not use_reg:
        if conv is None and wide:

            def jk() -> int:
                a = R[d]
                if type(a) is int:
                    return tgt if f(a, kval) else nxt
                return tgt if _ptr_cmp(op, a, kval, wide) else nxt

            return jk

        def jk_any() -> int:
            a = R[d]
            if type(a) is int:
                a &= mask
                return tgt if f(conv(a) if conv else a, kval) else nxt
            return tgt if _ptr_cmp(op, a, kval, wide) else nxt

        return jk_any

    def jx() -> int:
        a, b = R[d], R[s]
        if type(a) is int and type(b) is int:
            a &= mask
            b &= mask
            if conv:
                a, b = conv(a), conv(b)
            return tgt if f(a, b) else nxt
        if wide and type(a) is Ptr and type(b) is Ptr and a.region is b.region:
            return tgt if f(a.off, b.off) else nxt  # packet bounds checks
        return tgt if _ptr_cmp(op, a, b, wide) else nxt

    return jx
