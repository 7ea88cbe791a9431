"""bpfdsl.backend.llvm_c: the lean ctypes path into libllvmlite.so gives the same bytes as
llvmlite.binding, the same errors, falls back when it must, and keeps llvmlite.binding out
of `bpfdsl compile`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import llvmlite
import pytest
from support.paths import ROOT

from bpfdsl.backend import llvm_c, target
from bpfdsl.backend.target import InternalCompilerError, emit
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

PROGS = sorted((ROOT / "progs").glob("*.bpfd"))
LEAN = llvmlite.__version__ in llvm_c.SUPPORTED and os.environ.get(llvm_c.ENV) != "llvmlite"
needs_lean = pytest.mark.skipif(
    not LEAN, reason=f"llvmlite {llvmlite.__version__} unsupported, or {llvm_c.ENV}=llvmlite"
)


def prog(body: str, args: str = "ptr %ctx") -> str:
    """IR text of one XDP function ``f`` with ``body``."""
    return f'define i32 @f({args}) nounwind section "xdp" {{\n{body}\n}}\n'


def both(fn, monkeypatch: pytest.MonkeyPatch):
    """``(fn() on the lean path, fn() on llvmlite.binding)``."""
    assert target._lean() is not None
    lean = fn()
    with monkeypatch.context() as m:
        m.setattr(llvm_c, "_loaded", [None])
        assert target._lean() is None
        return lean, fn()


def test_lean_path_is_used_exactly_for_supported_versions() -> None:
    assert (llvm_c.load() is not None) == LEAN
    lib = Path(llvm_c.library_path())
    assert lib.is_file() and lib.parent.parent.samefile(Path(llvmlite.__file__).parent)


def _seq(ir_text: str) -> str:
    """IR with the BPF passes' per-process sequence numbers (``@llvm.bpf.passthrough(i32 N``,
    a counter in LLVM's BPF backend that grows with each compile) zeroed: a second compile in
    one process differs there whatever the binding (the CLI test compares exact text)."""
    return re.sub(r"(@llvm\.bpf\.passthrough[\w.]*\(i32 )\d+", r"\g<1>0", ir_text)


@needs_lean
def test_every_prog_same_object_asm_and_ir_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(PROGS) >= 10
    for path in PROGS:
        ir_text = compile_source(path.read_text(), str(path), check=False).llvm_ir
        for mcpu in ("v1", "v2", "v3", "v4"):
            lean, ref = both(lambda: emit(ir_text, mcpu=mcpu, asm=True, ir=True), monkeypatch)  # noqa: B023
            assert lean.obj[:4] == b"\x7fELF" and lean.asm and "define" in lean.ir
            assert (lean.obj, lean.asm) == (ref.obj, ref.asm), (path, mcpu)
            assert _seq(lean.ir) == _seq(ref.ir), (path, mcpu)


@needs_lean
def test_errors_carry_llvm_text_both_ways(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(text: str):
        def run() -> str:
            with pytest.raises(InternalCompilerError) as e:
                emit(text)
            d = e.value.diagnostics[0]
            return f"{d.message}\n{d.notes}"

        return run

    lean, ref = both(fail("this is not IR"), monkeypatch)
    assert lean == ref and "could not parse" in lean and "expected top-level entity" in lean
    bad = prog("  %a = add i32 %b, 1\n  %b = add i32 %a, 1\n  ret i32 %b")  # parses; verifier: no
    lean, ref = both(fail(bad), monkeypatch)
    assert lean == ref and "IR is invalid" in lean and "does not dominate" in lean


@needs_lean
def test_stack_option_set_once_and_effective_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 600-byte frame would make LLVM exit(1) unless -bpf-stack-size is set; it comes back
    as a diagnostic on both paths in one process (the option set once, one shared library)."""
    big = prog(
        "  %a = alloca [600 x i8], align 8\n"
        "  %r = call ptr inttoptr (i64 1 to ptr)(ptr null, ptr %a)\n  ret i32 0"
    )

    def code() -> str:
        with pytest.raises(DiagnosticError) as e:
            emit(big)
        return e.value.diagnostics[0].code

    assert both(code, monkeypatch) == ("stack-limit", "stack-limit")
    maps = {ln.split()[-1] for ln in Path("/proc/self/maps").read_text().splitlines()
            if ln.endswith("libllvmlite.so")}  # fmt: skip
    assert len(maps) == 1  # llvmlite.binding opened the very file the lean path uses


def test_unsupported_version_or_missing_symbol_falls_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(llvm_c, "_loaded", [])
    monkeypatch.setattr(llvm_c, "SUPPORTED", frozenset({"0.0.1"}))
    assert llvm_c.load() is None
    obj = emit(prog("  ret i32 2")).obj  # via llvmlite.binding
    assert obj[:4] == b"\x7fELF"
    monkeypatch.setattr(
        llvm_c, "_PROTOS", {**llvm_c._PROTOS, "LLVMPY_NoSuchFunction": (None, None)}
    )
    with pytest.raises(AttributeError):
        llvm_c.Lib(llvm_c.library_path())
    with pytest.raises(OSError):
        llvm_c.Lib(str(tmp_path / "libllvmlite.so"))


def _compile_cli(src: Path, out: Path, *extra: str, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bpfdsl", "compile", str(src), "-o", str(out),
         *extra],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@needs_lean
@pytest.mark.parametrize("emit_kind", ["obj", "asm", "llvm-ir"])
def test_compile_does_not_import_llvmlite_binding(tmp_path: Path, emit_kind: str) -> None:
    src = ROOT / "progs" / "xdp_udp_filter.bpfd"
    opts = ("--emit", emit_kind, "--mcpu", "v2")
    lean = _compile_cli(src, tmp_path / "lean", *opts, env={"BPFDSL_LLVM": ""})
    ref = _compile_cli(src, tmp_path / "ref", *opts, env={"BPFDSL_LLVM": "llvmlite"})
    assert lean.returncode == 0 and ref.returncode == 0, (lean.stderr[-2000:], ref.stderr[-2000:])
    assert "bpfdsl.backend.llvm_c" in lean.stderr
    assert "llvmlite.binding" not in lean.stderr
    assert "llvmlite.binding" in ref.stderr  # the env var forces the fallback
    out = (tmp_path / "lean").read_bytes()
    assert out and out == (tmp_path / "ref").read_bytes()  # exact, incl. IR sequence numbers
