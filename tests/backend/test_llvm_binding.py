"""Which LLVM binding compiled an object is visible: ``compile --time-report``, ``-v`` and the
JSON document name the lean ctypes binding (bpfdsl.backend.llvm_c) or the llvmlite.binding
fallback with its reason; the fallback is taken cleanly, with the same bytes, for an llvmlite
version the lean binding was not declared for and for an unusable library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import llvmlite
import pytest
from support.paths import ROOT

from bpfdsl.backend import llvm_c, target
from bpfdsl.compiler import compile_source

UDP = ROOT / "progs" / "xdp_udp_filter.bpfd"
VERSION = llvmlite.__version__
LEAN = f"llvm binding: lean ctypes (bpfdsl.backend.llvm_c), llvmlite {VERSION}\n"
FALLBACK = f"llvm binding: llvmlite.binding, llvmlite {VERSION} (BPFDSL_LLVM=llvmlite)\n"
needs_lean = pytest.mark.skipif(
    VERSION not in llvm_c.SUPPORTED or os.environ.get(llvm_c.ENV) == "llvmlite",
    reason=f"llvmlite {VERSION} has no lean binding here, or {llvm_c.ENV}=llvmlite",
)


def compile_cli(
    tmp_path: Path, *options: str, before: tuple[str, ...] = (), llvm: str = ""
) -> tuple[str, str, bytes]:
    """(stdout, stderr, object bytes) of ``bpfdsl BEFORE compile UDP -o OUT OPTIONS`` in a
    fresh process, with ``BPFDSL_LLVM=llvm``."""
    out = tmp_path / f"u{llvm}.o"
    cmd = [sys.executable, "-m", "bpfdsl", *before, "compile", str(UDP), "-o", str(out)]
    proc = subprocess.run(
        [*cmd, *options],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, llvm_c.ENV: llvm},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout, proc.stderr, out.read_bytes()


@needs_lean
def test_time_report_names_the_binding_that_ran(tmp_path: Path) -> None:
    _, lean_err, lean_obj = compile_cli(tmp_path, "--time-report")
    _, ref_err, ref_obj = compile_cli(tmp_path, "--time-report", llvm="llvmlite")
    assert lean_err.startswith("time (ms): front ") and lean_err.endswith(LEAN)
    assert ref_err.startswith("time (ms): front ") and ref_err.endswith(FALLBACK)
    assert lean_obj[:4] == b"\x7fELF" and lean_obj == ref_obj


@needs_lean
def test_verbose_names_the_binding(tmp_path: Path) -> None:
    assert compile_cli(tmp_path, "-v")[1] == LEAN  # after the command
    assert compile_cli(tmp_path, before=("-v",), llvm="llvmlite")[1] == FALLBACK  # before it
    assert compile_cli(tmp_path)[1] == ""  # neither -v nor --time-report: silent


@needs_lean
def test_json_document_names_the_binding(tmp_path: Path) -> None:
    out, err, _ = compile_cli(tmp_path, "--json", "--time-report", llvm="llvmlite")
    doc = json.loads(out)
    assert doc["llvm_binding"] == FALLBACK.removeprefix("llvm binding: ").strip()
    assert set(doc["timings_ms"]) == {"front", "codegen", "llvm", "check", "total"}
    assert err == ""
    assert "llvm_binding" not in json.loads(compile_cli(tmp_path, "--json")[0])


def decide_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """llvm_c.load() decides again (the process's choice comes back after the test)."""
    monkeypatch.setattr(llvm_c, "_loaded", [])
    monkeypatch.setattr(llvm_c, "_why", [])
    monkeypatch.delenv(llvm_c.ENV, raising=False)


def test_undeclared_llvmlite_version_falls_back_with_the_same_bytes(monkeypatch) -> None:
    want = compile_source(UDP.read_text(), str(UDP)).obj
    decide_again(monkeypatch)
    monkeypatch.setattr(llvmlite, "__version__", "0.44.0")  # pyproject's lowest version
    res = compile_source(UDP.read_text(), str(UDP))
    assert llvm_c.load() is None
    assert res.llvm_binding == (
        "llvmlite.binding, llvmlite 0.44.0 (llvmlite 0.44.0 is not a version the lean "
        f"binding is declared for ({', '.join(sorted(llvm_c.SUPPORTED))}))"
    )
    assert res.obj == want


def test_unusable_library_falls_back_with_the_same_bytes(monkeypatch) -> None:
    want = compile_source(UDP.read_text(), str(UDP)).obj
    decide_again(monkeypatch)
    monkeypatch.setattr(llvm_c, "SUPPORTED", frozenset({VERSION}))
    protos = {**llvm_c._PROTOS, "LLVMPY_NoSuchFunction": (None, None)}
    monkeypatch.setattr(llvm_c, "_PROTOS", protos)
    res = compile_source(UDP.read_text(), str(UDP))
    assert res.llvm_binding.startswith(f"llvmlite.binding, llvmlite {VERSION} (lean binding ")
    assert "LLVMPY_NoSuchFunction" in res.llvm_binding
    assert target.binding() == res.llvm_binding
    assert res.obj == want
