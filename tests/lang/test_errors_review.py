"""Review defects of the compiler (issues 2 and 6), one test each: the checker runs by
default after code generation; "UB-ish" arithmetic compiles to BPF-defined behaviour
(shift amounts modulo the width, x / 0 = 0, x % 0 = x, wrapping signed overflow) or is an
error; deep nesting, shadowed built-in constants, empty files and unwritable outputs give
clean diagnostics, never a traceback."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

# 9000 iterations of a data-dependent branch: more than the kernel's 8192 pending jumps
# (BPF_COMPLEXITY_LIMIT_JMP_SEQ); the front end accepts it, the checker and kernel do not.
TOO_COMPLEX = """license "GPL"
xdp fn f(ctx) {
    let b = parse byte else { return XDP_PASS }
    for i in 0..9000 { let c = parse byte else { return XDP_PASS } }
    return XDP_PASS
}
"""


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_checker_runs_by_default_and_names_the_bpfd_line(tmp_path):
    src = tmp_path / "complex.bpfd"
    src.write_text(TOO_COMPLEX)
    out = tmp_path / "complex.o"
    r = _cli(str(src), "-o", str(out))
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "error[checker-too-complex]" in r.stderr
    assert f"{src}:4:" in r.stderr  # the loop body line, from .BTF.ext line info
    assert "for i in 0..9000" in r.stderr
    assert "help:" in r.stderr
    assert not out.exists()


def test_no_check_skips_the_checker(tmp_path):
    src = tmp_path / "complex.bpfd"
    src.write_text(TOO_COMPLEX)
    out = tmp_path / "complex.o"
    r = _cli("--no-check", str(src), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_compile_source_check_flag():
    with pytest.raises(DiagnosticError) as ei:
        compile_source(TOO_COMPLEX, "c.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == "checker-too-complex" and d.span.file == "c.bpfd" and d.span.line == 4
    assert compile_source(TOO_COMPLEX, "c.bpfd", check=False).obj[:4] == b"\x7fELF"


def _err(src: str) -> list:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd")
    return ei.value.diagnostics


def _prog(body: str) -> str:
    return f'license "GPL"\nmap v: array<u32>(max_entries: 1)\nxdp fn f(ctx) {{\n{body}\n    return XDP_PASS\n}}\n'


UB_SRC = """license "GPL"
map out: array<u64>(max_entries: 8)
xdp fn f(ctx) {
    let pa = parse byte else { return XDP_ABORTED }
    let ps = parse byte else { return XDP_ABORTED }
    let pz = parse byte else { return XDP_ABORTED }
    let a = pa.value
    let s = ps.value
    let z = pz.value
    let x = a as u32
    out[0] = (x << (s as u32)) as u64
    out[1] = (a as u64) << (s as u64)
    out[2] = (x / (z as u32)) as u64
    out[3] = (x % (z as u32)) as u64
    let w: i32 = 2147483647
    let y = w + (a as i32)
    out[4] = (y as i64) as u64
    out[5] = (x >> (s as u32)) as u64
    let n = (a as i8) as i64
    out[6] = n as u64
    let p = out.lookup(7) else { return XDP_PASS }
    p <<= s as u64
    return XDP_PASS
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("a,s,z", [(0x81, 70, 0), (5, 3, 2), (0xFF, 31, 0)])
def test_runtime_ub_cases_have_bpf_semantics(a, s, z):
    """Shift by a run-time amount >= the width, division by a run-time zero, signed
    overflow and sign-extending casts: the kernel runs what BPF defines (shift modulo the
    width, x/0 = 0, x%0 = x, two's-complement wrap), not code LLVM dropped as undefined."""
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(UB_SRC, "ub.bpfd")
    with load_collection(read_object(res.obj)) as coll:
        fd = coll.maps["out"].fd
        syscall.map_update(fd, struct.pack("<I", 7), struct.pack("<Q", 1))
        r = syscall.prog_test_run(coll.programs["f"].fd, bytes([a, s, z]) + bytes(60))
        got = [
            struct.unpack("<Q", syscall.map_lookup(fd, struct.pack("<I", k), 8))[0]
            for k in range(8)
        ]
    m64 = (1 << 64) - 1
    sa = a - 256 if a >= 128 else a
    wrapped = ((0x7FFFFFFF + a + 2**31) % 2**32) - 2**31
    want = [
        (a << (s % 32)) & 0xFFFFFFFF,
        (a << (s % 64)) & m64,
        a // z if z else 0,
        a % z if z else a,
        wrapped & m64,
        a >> (s % 32),
        sa & m64,
        (1 << (s % 64)) & m64,
    ]
    assert r.retval == 2
    assert got == want


def test_deep_expressions_and_nesting_compile():
    terms = "+".join(["(ctx.len as u32)"] * 400)
    compile_source(_prog(f"    let x: u32 = {terms}\n    if x == 3 {{ return XDP_DROP }}"))
    body = "".join(f"    if ctx.len > {i} {{\n" for i in range(300))
    compile_source(_prog(body + "    return XDP_DROP\n" + "    }\n" * 300))


def test_too_deep_nesting_is_a_clean_error(tmp_path):
    body = "".join(f"if ctx.len > {i} {{\n" for i in range(6000))
    src = tmp_path / "deep.bpfd"
    src.write_text(_prog(body + "return XDP_DROP\n" + "}\n" * 6000))
    r = _cli(str(src), "-o", str(tmp_path / "deep.o"))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error[too-deep]" in r.stderr and "help:" in r.stderr
    # the position of the first if nested 500 levels deep (an If node, then its block)
    assert f"{src}:" in r.stderr and "if ctx.len > " in r.stderr, r.stderr


@pytest.mark.parametrize("text", ["", "// nothing\n", 'license "GPL"\n'])
def test_file_without_programs_is_an_error(text):
    (d,) = _err(text)
    assert d.code == "no-programs" and "xdp fn name(ctx)" in d.hints[0]


def test_unwritable_output_is_a_usage_error(tmp_path):
    src = tmp_path / "p.bpfd"
    src.write_text(_prog(""))
    r = _cli(str(src), "-o", str(tmp_path / "no" / "such" / "dir" / "x.o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot write" in r.stderr and "directory exists" in r.stderr


def test_checker_warning_is_printed_and_compile_succeeds(tmp_path):
    src = tmp_path / "w.bpfd"
    src.write_text('license "GPL"\nxdp fn f(ctx) {\n    return (ctx.len as u32) | 256\n}\n')
    out = tmp_path / "w.o"
    r = _cli(str(src), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "warning[checker-ret-range]" in r.stderr and f"{src}:3:5" in r.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"
    res = compile_source(src.read_text(), "w.bpfd")
    assert [w.code for w in res.warnings] == ["checker-ret-range"]
    assert compile_source(src.read_text(), "w.bpfd", check=False).warnings == []


SDIV_SRC = """license "GPL"
map out: array<u64>(max_entries: 4)
xdp fn f(ctx) {
    let pd = parse byte else { return XDP_ABORTED }
    let d = (pd.value as i8) as i64
    let m = (1 as i64) << 63
    out[0] = (m / d) as u64
    out[1] = (m % d) as u64
    let w = (m as i32) - 2147483647 - 1
    out[2] = ((w / (d as i32)) as i64) as u64
    out[3] = ((w % (d as i32)) as i64) as u64
    return XDP_PASS
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("d", [-1, 0, 2, -3])
def test_signed_division_overflow_has_bpf_semantics(d):
    """v4 signed division: MIN / -1 = MIN and MIN % -1 = 0 (the BPF ISA's rule; LLVM calls
    it undefined), x / 0 = 0, x % 0 = x, otherwise truncating division like C."""
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    res = compile_source(SDIV_SRC, "sd.bpfd", mcpu="v4")
    with load_collection(read_object(res.obj)) as coll:
        fd = coll.maps["out"].fd
        r = syscall.prog_test_run(coll.programs["f"].fd, bytes([d & 0xFF]) + bytes(60))
        got = [
            struct.unpack("<q", syscall.map_lookup(fd, struct.pack("<I", k), 8))[0]
            for k in range(4)
        ]

    def div(a: int, b: int, bits: int) -> tuple[int, int]:
        if b == 0:
            return 0, a
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
        q = (q + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # MIN / -1 wraps to MIN
        return q, 0 if b == -1 else a - q * b

    assert r.retval == 2
    assert got == [*div(-(2**63), d, 64), *div(-(2**31), d, 32)]
