"""Fixed-width integer arithmetic: the one definition of what ``+ - * / % << >> & | ^ ~``,
conversions and comparisons compute, shared by constant folding (sema), the userspace
machine (``interp.alu``) and the checker's constant ALU (``checker.alu``).

A value is *raw*: the bits of a ``bits``-wide integer as a Python int in ``[0, 2**bits)``
(bits = 8, 16, 32 or 64); ``signed`` says how the bits are read (two's complement).
Results are C's on the operand type itself (bpfdsl computes at the width of the type, with
no integer promotion; C11 6.3.1.3, 6.5.5, 6.5.7): ``+ - *`` and unary ``-`` wrap modulo
``2**bits``; ``/`` truncates toward zero and ``%`` takes the dividend's sign; ``>>`` is
arithmetic on signed values, logical on unsigned ones.  Where C is undefined the BPF ISA
defines the result, and that is what a program computes at run time (kernel/bpf/core.c
and the verifier's rewrite of BPF_DIV/BPF_MOD in ``do_misc_fixups()``,
Documentation/bpf/standards/instruction-set.rst):

- ``x / 0 = 0`` and ``x % 0 = x``;
- signed ``MIN / -1 = MIN`` and ``MIN % -1 = 0``;
- a shift count is taken modulo ``bits`` (the ISA masks with 63 or 31; codegen masks
  run-time counts for 8- and 16-bit values the same way).

Sema refuses the constant forms of the first and last (``division-by-zero``,
``shift-too-far``), so these rules matter for run-time values only.

Untyped integer literals are exact (``bits=None``): mathematical integers with C's
truncating ``/`` and ``%``; they take a width when context gives them a type.
"""

from __future__ import annotations

from collections.abc import Callable

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

OPS = ("+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^")


def mask(bits: int) -> int:
    """All ones in the low ``bits`` bits."""
    return (1 << bits) - 1


def to_signed(raw: int, bits: int) -> int:
    """The two's-complement value of the low ``bits`` bits of ``raw``."""
    raw &= (1 << bits) - 1
    return raw - (1 << bits) if raw >> (bits - 1) else raw


def value_of(raw: int, bits: int, signed: bool) -> int:
    """The integer the ``bits``-wide raw value means (negative only when ``signed``)."""
    return to_signed(raw, bits) if signed else raw & ((1 << bits) - 1)


def convert(raw: int, from_bits: int | None, from_signed: bool, to_bits: int) -> int:
    """C's conversion of an integer to a ``to_bits``-wide type (``as``, implicit widening):
    sign-extend a signed source, zero-extend an unsigned one, then keep the low
    ``to_bits`` bits.  ``from_bits=None``: ``raw`` is an exact (untyped) integer."""
    if from_bits is not None and from_signed:
        raw = to_signed(raw, from_bits)
    elif from_bits is not None:
        raw &= (1 << from_bits) - 1
    return raw & ((1 << to_bits) - 1)


def _tdiv(a: int, b: int) -> int:
    """C's division of exact integers: the quotient truncated toward zero (b != 0)."""
    q = abs(a) // abs(b)
    return -q if (a < 0) != (b < 0) else q


def exact_binop(op: str, a: int, b: int) -> int:
    """``a op b`` on exact (untyped) integers; ``/``/``%`` truncate (``b`` != 0), shifts
    need ``0 <= b``, bitwise operators see negative values in two's complement."""
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return _tdiv(a, b)
    if op == "%":
        return a - b * _tdiv(a, b)
    if op == "<<":
        return a << b
    if op == ">>":
        return a >> b
    if op == "&":
        return a & b
    if op == "|":
        return a | b
    if op == "^":
        return a ^ b
    raise ValueError(f"unknown operator {op!r}")


def op_fn(op: str, bits: int, signed: bool) -> Callable[[int, int], int]:
    """``f(a, b)`` computing ``a op b`` on ``bits``-wide values read as ``signed``; the
    operands' bits above ``bits`` are ignored (a BPF register's upper half for 32-bit
    ops), the result is raw.  See the module docstring for the rules."""
    m = (1 << bits) - 1
    top = 1 << (bits - 1)
    sh = bits - 1  # shift counts modulo bits (bits is a power of two)
    if op == "+":
        return lambda a, b: (a + b) & m
    if op == "-":
        return lambda a, b: (a - b) & m
    if op == "*":
        return lambda a, b: (a * b) & m
    if op == "&":
        return lambda a, b: a & b & m
    if op == "|":
        return lambda a, b: (a | b) & m
    if op == "^":
        return lambda a, b: (a ^ b) & m
    if op == "<<":
        return lambda a, b: ((a & m) << (b & sh)) & m
    if op == ">>" and signed:
        return lambda a, b: (((a & m) ^ top) - top) >> (b & sh) & m
    if op == ">>":
        return lambda a, b: (a & m) >> (b & sh)
    if op == "/" and signed:

        def sdiv(a: int, b: int) -> int:
            b &= m
            if not b:
                return 0  # BPF: x / 0 = 0
            return _tdiv(((a & m) ^ top) - top, (b ^ top) - top) & m  # MIN / -1 wraps to MIN

        return sdiv
    if op == "/":
        return lambda a, b: (a & m) // (b & m) if b & m else 0
    if op == "%" and signed:

        def smod(a: int, b: int) -> int:
            b &= m
            if not b:
                return a & m  # BPF: x % 0 = x
            x, y = ((a & m) ^ top) - top, (b ^ top) - top
            return (x - y * _tdiv(x, y)) & m  # MIN % -1 = 0

        return smod
    if op == "%":
        return lambda a, b: (a & m) % (b & m) if b & m else a & m
    raise ValueError(f"unknown operator {op!r}")


# BPF ALU opcode (BPF_OP of an ALU/ALU64 instruction) -> operator; BPF_ARSH is ">>" on a
# signed value, and BPF_DIV/BPF_MOD with insn.off == 1 (sdiv/smod, ISA v4) "/"/"%" signed
BPF_ALU_OPS: dict[int, str] = {
    BPF_ADD: "+",
    BPF_SUB: "-",
    BPF_MUL: "*",
    BPF_DIV: "/",
    BPF_OR: "|",
    BPF_AND: "&",
    BPF_LSH: "<<",
    BPF_RSH: ">>",
    BPF_MOD: "%",
    BPF_XOR: "^",
    BPF_ARSH: ">>",
}


def bpf_alu_fn(code: int, bits: int, signed_div: bool = False) -> Callable[[int, int], int]:
    """``f(dst, src)`` of the BPF ALU operation ``code`` at ``bits`` = 32 or 64 (raw
    result; a 32-bit result is zero-extended by the caller's register write)."""
    signed = code == BPF_ARSH or (signed_div and code in (BPF_DIV, BPF_MOD))
    return op_fn(BPF_ALU_OPS[code], bits, signed)


_FNS: dict[tuple[str, int, bool], Callable[[int, int], int]] = {
    (op, bits, signed): op_fn(op, bits, signed)
    for op in OPS
    for bits in (8, 16, 32, 64)
    for signed in (False, True)
}


def binop(op: str, a: int, b: int, bits: int | None, signed: bool) -> int:
    """``a op b`` for two values of one type: raw ``bits``-wide operands and result, or
    exact integers when ``bits`` is None (untyped literals)."""
    if bits is None:
        return exact_binop(op, a, b)
    f = _FNS.get((op, bits, signed))
    return f(a, b) if f is not None else op_fn(op, bits, signed)(a, b)


def unop(op: str, a: int, bits: int | None) -> int:
    """``-a`` or ``~a`` (the same bits whatever the signedness): raw, or exact when
    ``bits`` is None."""
    if op == "-":
        r = -a
    elif op == "~":
        r = ~a
    else:
        raise ValueError(f"unknown operator {op!r}")
    return r if bits is None else r & ((1 << bits) - 1)


def compare(op: str, a: int, b: int, bits: int | None, signed: bool) -> bool:
    """``a op b`` for two values of one type, ordered as ``signed`` says (raw operands;
    exact integers when ``bits`` is None)."""
    if bits is not None:
        a, b = value_of(a, bits, signed), value_of(b, bits, signed)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op == "<":
        return a < b
    if op == "<=":
        return a <= b
    if op == ">":
        return a > b
    if op == ">=":
        return a >= b
    raise ValueError(f"unknown comparison {op!r}")
