"""Constant folding computes what the program computes at run time: C's integer rules on
the operand type, BPF's where C is undefined (bpfdsl.abi.intops, shared with the interpreter);
signed constants are their values (widening sign-extends); one signedness rule for
operators, comparisons and implicit conversions (``mixed-signedness``)."""

from __future__ import annotations

import random
import struct

import pytest

from bpfdsl.abi import intops
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.interp import alu, jit

M32, M64 = (1 << 32) - 1, (1 << 64) - 1
MIN32, MIN64 = -(1 << 31), -(1 << 63)


def _errors(src: str) -> list:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd")
    return ei.value.diagnostics


def _run(bpf_program, src: str, n: int, mcpu: str = "v3") -> list[int]:
    """Compile ``src`` (results in ``out[0]``, an ``[i64; n]``), run it once on a 64-byte
    frame and return the n results as signed 64-bit values."""
    prog = bpf_program(compile_source(src, "t.bpfd", mcpu=mcpu).obj)
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    raw = prog.maps["out"].get(0)
    return list(struct.unpack(f"<{n}q", raw[: 8 * n]))


# ---- the one routine: C on the type, BPF where C is undefined ----


@pytest.mark.parametrize(
    "op,a,b,bits,is_signed,want",
    [
        ("/", -7, 2, 32, True, -3),  # truncates toward zero (C11 6.5.5)
        ("%", -7, 2, 32, True, -1),  # the dividend's sign
        ("%", 7, -2, 32, True, 1),
        ("/", 7, -2, 8, True, -3),
        (">>", -8, 1, 8, True, -4),  # arithmetic on signed
        (">>", 0xF8, 1, 8, False, 0x7C),  # logical on unsigned
        (">>", MIN64, 63, 64, True, -1),
        ("+", 127, 1, 8, True, -128),  # two's-complement wrap
        ("*", 0xFFFF, 0xFFFF, 16, False, 1),
        ("-", 0, 1, 32, False, M32),
        ("<<", 1, 31, 32, True, MIN32),
        ("/", MIN32, -1, 32, True, MIN32),  # BPF: MIN / -1 = MIN (C: undefined)
        ("%", MIN32, -1, 32, True, 0),  # BPF: MIN % -1 = 0
        ("/", MIN64, -1, 64, True, MIN64),
        ("/", 5, 0, 64, False, 0),  # BPF: x / 0 = 0
        ("%", 5, 0, 64, False, 5),  # BPF: x % 0 = x
        ("/", -5, 0, 16, True, 0),
        ("%", -5, 0, 16, True, -5),
        ("<<", 1, 65, 64, False, 2),  # a run-time count is taken modulo the width
    ],
)
def test_intops_follow_c_and_the_bpf_isa(op, a, b, bits, is_signed, want):
    m = (1 << bits) - 1
    got = intops.binop(op, a & m, b & m, bits, is_signed)
    assert 0 <= got <= m
    assert intops.value_of(got, bits, is_signed) == want


def test_intops_conversions_and_exact_literals():
    assert intops.convert(0xFFFFFFFF, 32, True, 64) == M64  # i32 -1 as i64: -1
    assert intops.convert(0xFFFFFFFF, 32, False, 64) == M32  # u32 max as u64
    assert intops.convert(0x1FF, 16, True, 8) == 0xFF  # truncation keeps the low bits
    assert intops.convert(-1, None, True, 16) == 0xFFFF  # an untyped -1
    assert intops.binop("/", -7, 2, None, True) == -3  # untyped: exact, C's division
    assert intops.binop("%", -7, 2, None, True) == -1
    assert intops.compare("<", 0xFFFFFFFF, 1, 32, True) is True  # -1 < 1
    assert intops.compare("<", 0xFFFFFFFF, 1, 32, False) is False


def test_interpreter_alu_is_intops_and_its_fast_paths_agree():
    """The interpreter's ALU tables are intops' functions; the jit inlines a few ops as
    Python expressions, which must compute the same for any register values (the upper
    half of a 32-bit operand is garbage the op ignores)."""
    rnd = random.Random(5)
    edges = [0, 1, 2, 31, 32, 63, 64, M32, M32 + 1, 1 << 63, M64, M64 - 1]
    vals = edges + [rnd.getrandbits(64) for _ in range(200)]
    for inline, table, bits in ((jit._INLINE64, alu.OPS64, 64), (jit._INLINE32, alu.OPS32, 32)):
        assert set(inline) <= set(table)
        for code, text in inline.items():
            ref = intops.bpf_alu_fn(code, bits)
            f = eval(f"lambda a, b: {text.format(a='a', b='b')}")  # our own table
            for a in vals:
                for b in vals[:40]:
                    assert f(a, b) == ref(a, b) == table[code](a, b), (code, bits, a, b)
    for code in (alu.SIGNED64, alu.SIGNED32):
        for c, f in code.items():
            bits = 64 if code is alu.SIGNED64 else 32
            for a in vals[:30]:
                for b in vals[:30]:
                    assert f(a, b) == intops.bpf_alu_fn(c, bits, signed_div=True)(a, b)


# ---- the reported cases, with the right values, folded and at run time ----

SIGNED_SRC = """license "GPL"
{kw} SMALL: i32 = -1
{kw} A: i32 = -7
{kw} K: i32 = -1
{kw} N16: i16 = -2
{kw} U: u8 = 200
map out: array<u32, [i64; 12]>(max_entries: 1)
xdp fn f(ctx) {{
    let o = out.lookup(0) else {{ return XDP_ABORTED }}
    let w = SMALL as i64
    o[0] = w
    o[1] = (A / 2) as i64
    o[2] = (A % 2) as i64
    o[3] = (A >> 1) as i64
    o[4] = (10 as i64) + A
    o[5] = (3 / K) as i64
    o[6] = (3 / (K % 2 - 1)) as i64
    o[7] = host(be32(N16)) as i64
    o[8] = (A as u8) as i64
    o[9] = A + U
    if A < 0 {{ o[10] = 1 }}
    if (A as u32) > 5 {{ o[11] = 1 }}
    return XDP_PASS
}}
"""
SIGNED_WANT = [
    -1,  # SMALL as i64: sign-extends (language.md), was 4294967295
    -3,  # signed / truncates
    -1,  # signed % has the dividend's sign
    -4,  # signed >> is arithmetic
    3,  # implicit widening of A into i64 sign-extends
    -3,  # 3 / K with K = -1: no false division-by-zero
    -1,  # K % 2 - 1 = -2, 3 / -2 = -1 (was a false division-by-zero)
    0xFFFFFFFE,  # be32 of an i16 -2 converts (sign-extends) first, as codegen does
    249,  # -7 as u8
    193,  # u8 200 widens into i32: -7 + 200
    1,  # -7 < 0
    1,  # 0xfffffff9 > 5 as unsigned
]


@pytest.mark.parametrize("kw", ["const", "config"])
def test_signed_constants_fold_like_the_program_computes(bpf_program, kw):
    """``const`` (folded by sema) and ``config`` (computed by the program from .rodata)
    both give C's values; signed / and % at run time need ISA v4."""
    assert _run(bpf_program, SIGNED_SRC.format(kw=kw), 12, mcpu="v4") == SIGNED_WANT


def test_constant_zero_divisor_found_after_sign_extension():
    """``(K as u64) + 1`` is 0 for K = -1 (the old fold said 4294967296: no error)."""
    src = (
        'license "GPL"\nconst K: i32 = -1\nxdp fn f(ctx) {\n'
        "    let x = ctx.len / ((K as u64) + 1)\n    return XDP_PASS\n}\n"
    )
    (d,) = _errors(src)
    assert d.code == "division-by-zero" and (d.span.line, d.span.col) == (4, 24)


def test_negative_loop_start_fails_the_array_index_check():
    src = """license "GPL"
const S: i32 = -3
map m: array<u32, [u64; 4]>(max_entries: 1)
xdp fn f(ctx) {
    let v = m.lookup(0) else { return XDP_PASS }
    for i in S..3 { v[i] += 1 }
    return XDP_PASS
}
"""
    (d,) = _errors(src)
    assert d.code == "index-range" and (d.span.line, d.span.col) == (6, 23)
    assert "-3..3" in d.message and "for i in 0..4" in d.hints[0]


def test_signed_loop_variable_within_the_array_indexes_it(bpf_program):
    src = """license "GPL"
const Z: i32 = 0
const K: i32 = 3
map out: array<u32, [i64; 4]>(max_entries: 1)
xdp fn f(ctx) {
    let o = out.lookup(0) else { return XDP_ABORTED }
    for i in Z..3 { o[i] = (i as i64) - 1 }
    o[K] = 7
    return XDP_PASS
}
"""
    assert _run(bpf_program, src, 4) == [-1, 0, 1, 7]


def test_shift_by_a_negative_typed_constant_is_an_error():
    src = """license "GPL"
const N: i32 = -1
map m: array<u32, i64>(max_entries: 1)
xdp fn f(ctx) {
    let x = (ctx.len as i64) << N
    let p = m.lookup(0) else { return XDP_PASS }
    p <<= N
    return XDP_PASS
}
"""
    ds = _errors(src)
    assert [(d.code, d.span.line, d.span.col) for d in ds] == [
        ("shift-negative", 5, 33),
        ("shift-negative", 7, 11),
    ]
    assert "(-1)" in ds[0].message


def test_match_pattern_of_a_narrower_signed_const(bpf_program):
    """An i32 -1 pattern matches an i64 -1 subject (the switch case is sign-extended)."""
    src = """license "GPL"
const NEG: i32 = -1
xdp fn f(ctx) {
    let x = (ctx.len as i64) - 65
    match x {
        NEG => return XDP_DROP,
        _ => return XDP_PASS,
    }
}
"""
    prog = bpf_program(compile_source(src, "t.bpfd").obj)
    assert prog.run(bytes(64)).verdict == "XDP_DROP"
    dup = src.replace("        _ =>", "        -1 => return XDP_TX,\n        _ =>")
    (d,) = _errors(dup)
    assert d.code == "duplicate-pattern" and d.span.line == 7


def test_runtime_signed_division_by_constant_minus_one(bpf_program):
    """``MIN / -1`` with a literal divisor: BPF's MIN and 0, not LLVM's undefined sdiv."""
    src = """license "GPL"
map out: array<u32, [i64; 4]>(max_entries: 1)
xdp fn f(ctx) {
    let o = out.lookup(0) else { return XDP_ABORTED }
    let m = (ctx.len as i32) - 64 - 2147483647 - 1
    o[0] = (m / -1) as i64
    o[1] = (m % -1) as i64
    let w = ((ctx.len as i64) - 64) - 9223372036854775807 - 1
    o[2] = w / -1
    o[3] = w % -1
    return XDP_PASS
}
"""
    assert _run(bpf_program, src, 4, mcpu="v4") == [MIN32, 0, MIN64, 0]


# ---- one signedness rule: `a < b` and `b > a` cannot disagree ----

MIXED = """license "GPL"
xdp fn f(ctx) {{
    let a: i32 = -1
    let b: u32 = 1
    {stmt}
    return XDP_PASS
}}
"""


def test_value_preserving_mixes_stay_implicit():
    src = MIXED.format(
        stmt="let u: u8 = 3\n    let x = a + u\n    let y: i64 = b\n    let z: i64 = a\n"
        "    if u < a { return XDP_DROP }"
    )
    assert compile_source(src, "t.bpfd").obj[:4] == b"\x7fELF"


CMP_SRC = """license "GPL"
{decl}
map out: array<u32, [i64; 4]>(max_entries: 1)
xdp fn f(ctx) {{
    let o = out.lookup(0) else {{ return XDP_ABORTED }}
    {lets}
    if (a as i64) < (b as i64) {{ o[0] = 1 }}
    if (b as i64) > (a as i64) {{ o[1] = 1 }}
    if (a as u32) < b {{ o[2] = 1 }}
    if b > (a as u32) {{ o[3] = 1 }}
    return XDP_PASS
}}
"""


@pytest.mark.parametrize(
    "decl,lets",
    [
        ("const a: i32 = -1\nconst b: u32 = 1", ""),
        ("", "let a = (ctx.len as i32) - 65\n    let b = (ctx.len as u32) - 63"),
    ],
    ids=["folded", "runtime"],
)
def test_both_orders_agree_once_the_conversion_is_written(bpf_program, decl, lets):
    """-1 and 1: as values -1 < 1 (both orders); as u32 bits 0xffffffff > 1 (both)."""
    assert _run(bpf_program, CMP_SRC.format(decl=decl, lets=lets), 4) == [1, 1, 0, 0]


@pytest.mark.parametrize("kw", ["const", "config"])
def test_declared_value_of_a_narrower_signed_type_sign_extends(kw):
    """The value of ``const/config X: i64 = <i32 expression>`` is converted as codegen
    converts it: -1 stays -1 (raw 0xffff_ffff_ffff_ffff, was 0xffff_ffff)."""
    from bpfdsl.compiler import front_end

    src = f'license "GPL"\n{kw} X: i64 = (1 as i32) - 2\nxdp fn f(ctx) {{ return XDP_PASS }}\n'
    c = front_end(src, "t.bpfd")
    decl = (c.consts if kw == "const" else c.configs)["X"]
    assert decl.value == M64
