"""Operations LLVM's BPF back end would lower to a library call: rewritten or refused.

Stage: back end, used by :mod:`bpfdsl.backend.target` on the optimized IR text, before
emission.  The BPF target has no runtime library: an operation the SelectionDAG expands
into a libcall (``__multi3``, ``__udivti3``, ``__mulodi4``, ``__ashlti3``...) ends in
BPFISelLowering's ``fail()`` -- "A call to built-in function '__multi3' is not
supported" -- through LLVMContext's default diagnostic handler, which prints and calls
``exit(1)`` (llvmlite 0.50 / LLVM 22 export no way to install another handler).

bpfdsl's IR has no 128-bit integers, but LLVM's InstCombine makes 64-bit multiplies with
an overflow bit of source it can prove things about: ``(x / y) / z`` (unsigned, with the
division-by-zero guard of :meth:`bpfdsl.backend.codegen.expr.ExprGen.binop`) becomes a
compare on ``llvm.umul.with.overflow.i64(y, z)``; LLVM lowers that intrinsic to a 64x64
-> 128-bit multiply, i.e. ``__multi3``.  :func:`lower` rewrites each
``llvm.{u,s}mul.with.overflow.i64`` call into 64-bit BPF arithmetic with the same result
(the low 64 bits of the product and the overflow bit, LangRef semantics); it uses an
unsigned division only, so it is valid at every ``-mcpu`` level.  :func:`refusal` finds
the shapes that would still need a libcall (128-bit multiply, divide, remainder and
shift; the fixed-point multiply intrinsics) for :func:`bpfdsl.backend.target.check_ir`
to refuse with a located error.
"""

from __future__ import annotations

import re

# ``%r = [tail ]call { i64, i1 } @llvm.umul.with.overflow.i64(i64 A, i64 B)[ #N][, !dbg !M]``
_MULO = re.compile(
    r"^(?P<ind>\s+)(?P<res>%[-\w.$]+|%\"[^\"]+\") = (?:(?:tail|musttail|notail) )?call "
    r"\{ i64, i1 \} @llvm\.(?P<sign>[us])mul\.with\.overflow\.i64\((?P<args>[^()]*)\)"
    r"(?P<attrs>(?: #\d+)*)(?P<meta>(?:, ![\w.]+ ![\w.]+)*)\s*$"
)
# attributes an integer operand may carry in a call (LangRef "Parameter Attributes")
_ARG = re.compile(r"i64 (?:(?:noundef|signext|zeroext|range\(i64 [-\d]+, [-\d]+\)) )*(.+)")

# an instruction on a 128-bit (or wider) integer that the BPF back end expands into a
# libcall: mul/div/rem (__multi3, __udivti3, __divti3, __umodti3, __modti3) and shifts
# (__ashlti3, __lshrti3, __ashrti3); and the fixed-point multiplies (any width)
_WIDE = re.compile(r"= (?:mul|udiv|sdiv|urem|srem|shl|lshr|ashr)(?: nuw| nsw| exact)* i(\d+) ")
_FIXED = re.compile(r"@llvm\.[us](?:mul|div)\.fix(?:\.sat)?\.")


def _operand(arg: str) -> str | None:
    m = _ARG.fullmatch(arg.strip())
    return m.group(1).strip() if m else None


def _umulo(p: str, a: str, b: str) -> list[str]:
    """Instructions giving ``{p}.lo`` = low 64 bits of a*b and ``{p}.ov`` = the unsigned
    product needs more than 64 bits: a != 0 and (a*b mod 2^64) / a != b."""
    return [
        f'{p}.lo" = mul i64 {a}, {b}',
        f'{p}.a0" = icmp eq i64 {a}, 0',
        f'{p}.d" = select i1 {p}.a0", i64 1, i64 {a}',
        f'{p}.q" = udiv i64 {p}.lo", {p}.d"',
        f'{p}.ne" = icmp ne i64 {p}.q", {b}',
        f'{p}.ov" = select i1 {p}.a0", i1 false, i1 {p}.ne"',
    ]


def _smulo(p: str, a: str, b: str) -> list[str]:
    """As :func:`_umulo` for signed operands, without signed division (BPF ISA v4 only):
    the product of the magnitudes |a|*|b| (unsigned; |MIN| = 2^63) must not overflow and
    must be at most 2^63 - 1 (positive product) or 2^63 (negative product)."""
    return [
        f'{p}.an" = icmp slt i64 {a}, 0',
        f'{p}.bn" = icmp slt i64 {b}, 0',
        f'{p}.na" = sub i64 0, {a}',
        f'{p}.ua" = select i1 {p}.an", i64 {p}.na", i64 {a}',
        f'{p}.nb" = sub i64 0, {b}',
        f'{p}.ub" = select i1 {p}.bn", i64 {p}.nb", i64 {b}',
        *_umulo(f"{p}.u", f'{p}.ua"', f'{p}.ub"'),
        f'{p}.neg" = xor i1 {p}.an", {p}.bn"',
        f'{p}.lim" = select i1 {p}.neg", i64 -9223372036854775808, i64 9223372036854775807',
        f'{p}.big" = icmp ugt i64 {p}.u.lo", {p}.lim"',
        f'{p}.ov" = or i1 {p}.u.ov", {p}.big"',
        f'{p}.lo" = mul i64 {a}, {b}',
    ]


def lower(text: str) -> str | None:
    """``text`` (an LLVM module) with every ``llvm.umul.with.overflow.i64`` and
    ``llvm.smul.with.overflow.i64`` call replaced by 64-bit arithmetic giving the same
    ``{ i64, i1 }`` (the new values are named ``%"bpfdsl.mulo.N.*"`` and keep the call's
    ``!dbg``), or None when the module has no such call."""
    if "mul.with.overflow.i64(" not in text:
        return None
    out, n = [], 0
    for line in text.split("\n"):
        m = _MULO.match(line) if "mul.with.overflow.i64(" in line else None
        args = m.group("args").split(",") if m else []
        ops = [_operand(x) for x in args]
        if m is None or len(ops) != 2 or None in ops:
            out.append(line)
            continue
        a, b = ops[0] or "", ops[1] or ""
        p, ind, meta = f'%"bpfdsl.mulo.{n}', m.group("ind"), m.group("meta")
        n += 1
        body = (_umulo if m.group("sign") == "u" else _smulo)(p, a, b)
        body += [
            f'{p}.r" = insertvalue {{ i64, i1 }} poison, i64 {p}.lo", 0',
            f'{m.group("res")} = insertvalue {{ i64, i1 }} {p}.r", i1 {p}.ov", 1',
        ]
        out += [f"{ind}{x}{meta}" for x in body]
    return "\n".join(out) if n else None


def refusal(body: str) -> str | None:
    """What in one IR instruction line (without its ``!dbg``) the BPF back end would turn
    into a libcall after :func:`lower`: a message for the user, or None."""
    if "mul.with.overflow.i" in body and "mul.with.overflow.i64(" not in body:
        w = re.search(r"mul\.with\.overflow\.i(\d+)", body)
        if w and int(w.group(1)) > 64:
            return f"a {w.group(1)}-bit multiply with overflow check"
    if m := _WIDE.search(body):
        if int(m.group(1)) > 64:
            return f"a {m.group(1)}-bit integer multiply, division or shift"
    if _FIXED.search(body):
        return "a fixed-point multiply or division"
    return None
