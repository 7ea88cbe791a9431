"""Operations LLVM would lower to a library call the BPF back end does not have
(``__multi3``...): the 64-bit multiplies with overflow bit InstCombine makes are rewritten
into 64-bit BPF arithmetic with the same value; what still needs a libcall is a located
error, never LLVM's exit(1)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from bpfdsl.backend import libcalls, target
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

M64 = (1 << 64) - 1
EDGES = [0, 1, 2, 3, 5, 0xFFFF_FFFF, 0x1_0000_0000, 1 << 62, (1 << 63) - 1, 1 << 63,
         (1 << 63) + 1, M64 - 1, M64, 0x1BD4C34C3D2215E]  # fmt: skip

JIT_IR = """
declare { i64, i1 } @llvm.umul.with.overflow.i64(i64, i64)
declare { i64, i1 } @llvm.smul.with.overflow.i64(i64, i64)
define i64 @f(i64 %a, i64 %b, ptr %o) {
  %r = call { i64, i1 } @llvm.SIGNmul.with.overflow.i64(i64 %a, i64 noundef %b)
  %lo = extractvalue { i64, i1 } %r, 0
  %ov = extractvalue { i64, i1 } %r, 1
  %z = zext i1 %ov to i8
  store i8 %z, ptr %o
  ret i64 %lo
}
"""


@pytest.fixture(scope="module")
def jit():
    """``run(sign, a, b) -> (lo, ov)``: the lowered IR of ``llvm.{sign}mul.with.overflow.i64``
    run on the host through llvmlite's MCJIT."""
    from llvmlite import binding as llvm

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    fns, engines = {}, []
    for sign in "us":
        low = libcalls.lower(JIT_IR.replace("SIGN", sign))
        assert low is not None and "with.overflow.i64(i64 %a" not in low
        mod = llvm.parse_assembly(low)
        mod.verify()
        tm = llvm.Target.from_default_triple().create_target_machine()  # owned by the engine
        ee = llvm.create_mcjit_compiler(mod, tm)
        ee.finalize_object()
        engines.append(ee)
        proto = ctypes.CFUNCTYPE(
            ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint8)
        )
        fns[sign] = proto(ee.get_function_address("f"))

    def run(sign: str, a: int, b: int) -> tuple[int, bool]:
        o = ctypes.c_uint8(7)
        lo = fns[sign](a, b, ctypes.byref(o))
        return lo, bool(o.value)

    yield run
    engines.clear()


def _signed(x: int) -> int:
    return x - (1 << 64) if x >> 63 else x


@pytest.mark.parametrize("sign", ["u", "s"])
def test_lowered_multiply_with_overflow_matches_langref(jit, sign: str) -> None:
    """Every pair of edge values: the low 64 bits of the product and the overflow bit as
    LangRef defines llvm.umul/smul.with.overflow.i64 (unsigned: product >= 2^64; signed:
    product outside [-2^63, 2^63))."""
    for a in EDGES:
        for b in EDGES:
            if sign == "u":
                p = a * b
                ov = p > M64
            else:
                p = _signed(a) * _signed(b)
                ov = not -(1 << 63) <= p < 1 << 63
            assert jit(sign, a, b) == (p & M64, ov), (sign, hex(a), hex(b))


# InstCombine folds this ((x / y) / z with the divide-by-zero guards, z known huge) into a
# compare on llvm.umul.with.overflow.i64(y, z), i.e. __multi3 (tests/fuzz/reproducers)
MULO_SRC = """license "GPL"
config port: u16 = 9999
config knob: u32 = 3
map out: array<u64>(max_entries: 1)
xdp fn f(ctx) {
    let b = parse byte else { return XDP_ABORTED }
    out[0] = (((0xffffffffffffffff as u64) / ((port as u64) - (16 as u64))) / ((knob as u64) - ((0xdea61aa61e910af4 as u64) >> 11))) & (b.value as u64)
    return XDP_PASS
}
"""


@pytest.mark.parametrize("mcpu", ["v1", "v3", "v4"])
def test_multiply_overflow_fold_compiles(mcpu: str) -> None:
    """The fuzz reproducer's expression compiles at every ISA level (it used to end the
    process in LLVM with "A call to built-in function '__multi3' is not supported") and
    the object holds no call but the helpers'."""
    res = compile_source(MULO_SRC, "mulo.bpfd", mcpu=mcpu)
    assert res.obj.startswith(b"\x7fELF")


@pytest.mark.parametrize(
    "port,knob,byte,want",
    [(17, 3, 1, 1), (17, 0xFFFFFFFF, 3, 1), (17, 3, 2, 0), (16, 3, 1, 0), (18, 3, 0xFF, 0),
     (15, 9, 0xFF, 0)],
)  # fmt: skip
def test_multiply_overflow_fold_value(bpf_program, port, knob, byte, want) -> None:
    """The rewritten multiply gives the value of BPF's division rules (x / 0 = 0): with
    y = port - 16 and z = knob - 0x1bd4c34c3d2215e (mod 2^64, z > 2^63), (2^64-1) / y / z
    is 1 for y = 1 and 0 otherwise (y = 0: 0; y = 2^64-1: 1 / z = 0), masked by the
    packet byte; on both engines."""
    prog = bpf_program(compile_source(MULO_SRC, "mulo.bpfd").obj,
                       config={"port": port, "knob": knob})  # fmt: skip
    assert prog.run(bytes([byte]) + bytes(63)).verdict == "XDP_PASS"
    assert prog.maps["out"].lookup(0) == want


WIDE_IR = """source_filename = "w.bpfd"
define i64 @f(i64 %a, i64 %b) !dbg !5 {
  %x = zext i64 %a to i128
  %y = zext i64 %b to i128
  %p = OP i128 %x, %y, !dbg !9
  %t = trunc i128 %p to i64
  ret i64 %t
}
!llvm.dbg.cu = !{!0}
!llvm.module.flags = !{!10, !11}
!0 = distinct !DICompileUnit(language: DW_LANG_C99, file: !1, emissionKind: FullDebug)
!1 = !DIFile(filename: "w.bpfd", directory: "")
!5 = distinct !DISubprogram(name: "f", scope: !1, file: !1, line: 2, type: !6, spFlags: DISPFlagDefinition, unit: !0)
!6 = !DISubroutineType(types: !{})
!9 = !DILocation(line: 7, column: 12, scope: !5)
!10 = !{i32 2, !"Debug Info Version", i32 3}
!11 = !{i32 7, !"Dwarf Version", i32 5}
"""


@pytest.mark.parametrize("op", ["mul", "udiv", "urem", "shl"])
def test_wide_arithmetic_is_a_located_error(op: str) -> None:
    """A 128-bit multiply, division, remainder or shift (a libcall on BPF): a located
    ``unsupported-arithmetic`` error at the instruction's source position, raised before
    emission (no process exit)."""
    with pytest.raises(DiagnosticError) as ei:
        target.emit(WIDE_IR.replace("OP", op), mcpu="v3", opt=0)
    d = ei.value.diagnostics[0]
    assert d.code == "unsupported-arithmetic"
    assert (d.span.file, d.span.line, d.span.col) == ("w.bpfd", 7, 12)
    assert "128-bit" in d.message and d.hints


REPRO = Path(__file__).parents[1] / "fuzz" / "reproducers" / "multi3.bpfd"


def test_multi3_reproducer_loads(bpf_program) -> None:
    """The campaign's reproducer (tests/fuzz/reproducers/multi3.bpfd, v4 as found) compiles,
    the engine accepts it (the kernel's verifier on the kernel engine) and an IPv4 frame too
    short for the program's `parse ipv6` gets its `else { return XDP_TX }`."""
    res = compile_source(REPRO.read_text(), str(REPRO), mcpu="v4")
    frame = bytes(12) + b"\x08\x00" + bytes(20)
    assert bpf_program(res.obj).run(frame).verdict == "XDP_TX"
