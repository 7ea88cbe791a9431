"""Test utility: build libbpf-style C fixtures with clang-19, once per test session.

``build(name)`` compiles ``tests/data/c/NAME.c`` or ``tests/data/loader/NAME.c`` with
``clang-19 -O2 -g -target bpf`` (as tests/data/c/build.sh does) into a private temporary
directory removed at exit, and returns the object path; ``build_text(text, dir)`` compiles
C source text the same way.  Both skip the calling test when clang-19 is missing.
"""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support.paths import DATA

C_DIRS = (DATA / "c", DATA / "loader")
_OUT = Path(tempfile.mkdtemp(prefix="bpfdsl_objs_"))
atexit.register(shutil.rmtree, _OUT, ignore_errors=True)


def source(name: str) -> Path:
    """Path of fixture ``name`` (without .c)."""
    for d in C_DIRS:
        if (d / f"{name}.c").exists():
            return d / f"{name}.c"
    raise FileNotFoundError(f"no C fixture named {name}")


@functools.cache
def _compile(name: str) -> Path:
    return _clang(source(name), _OUT / f"{name}.o")


def compile_c(src: Path, out: Path) -> Path:
    """Compile the libbpf-style C file ``src`` to ``out`` (skips without clang-19)."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    return _clang(src, out)


def _clang(src: Path, out: Path) -> Path:
    arch = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    cmd = [
        "clang-19",
        "-O2",
        "-g",
        "-target",
        "bpf",
        "-Wall",
        f"-I/usr/include/{arch}",
        "-c",
        str(src),
        "-o",
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode:
        raise RuntimeError(f"clang-19 failed on {src}:\n{proc.stderr}")
    return out


def build_text(text: str, out_dir: Path, name: str = "prog") -> Path:
    """Compile the C ``text`` like the fixtures into ``out_dir/NAME.o``; skips the calling
    test when clang-19 is missing."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    src = out_dir / f"{name}.c"
    src.write_text(text)
    return _clang(src, out_dir / f"{name}.o")


def build(name: str) -> Path:
    """Compile fixture ``name`` (cached per session); the .o path."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    return _compile(name)


def build_variant(name: str, stem: str, replace: dict[str, str]) -> Path:
    """Compile fixture ``name`` with each ``old -> new`` of ``replace`` applied to its
    text (e.g. a unique map name) as ``STEM.o``; not cached."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    text = source(name).read_text()
    for old, new in replace.items():
        assert old in text, f"{old!r} not in fixture {name}"
        text = text.replace(old, new)
    src = _OUT / f"{stem}.c"
    src.write_text(text)
    return _clang(src, _OUT / f"{stem}.o")


def all_c_fixtures() -> list[str]:
    """Names of the libbpf-style reference programs in tests/data/c."""
    return sorted(p.stem for p in (DATA / "c").glob("*.c"))
