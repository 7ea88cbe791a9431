"""The compiler runs the checker after code generation by default: a program the kernel
would refuse is an error at its .bpfd line, a checker warning is printed and the object is
still written, and ``--no-check`` / ``check=False`` skip it."""

from __future__ import annotations

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
