"""Every test function of the suite checks something: a test that cannot fail is a defect.

Read from the source with ``ast``: a ``test*`` function checks when its body has an
``assert`` or a ``raise``, calls ``pytest.raises`` / ``pytest.warns`` / ``pytest.fail`` /
``pytest.deprecated_call``, calls a function whose name starts with ``assert`` /
``check_`` / ``expect_`` (``assert_called_once_with`` included), or calls a function of
the suite (tests/**/*.py, by name) that itself checks, transitively.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from support.paths import ROOT

TESTS = ROOT / "tests"
CHECK_PREFIXES = ("assert", "check_", "expect_")
PYTEST_CHECKS = {"raises", "warns", "fail", "deprecated_call"}

Func = ast.FunctionDef | ast.AsyncFunctionDef


def _called(fn: Func) -> set[str]:
    """Names of what ``fn`` calls (``f`` of ``f()``, ``x.f()``, ``pytest.f()``)."""
    out = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            out.add(name)
    return out


def _checks_itself(fn: Func) -> bool:
    if any(isinstance(n, ast.Assert | ast.Raise) for n in ast.walk(fn)):
        return True
    return any(c.startswith(CHECK_PREFIXES) or c in PYTEST_CHECKS for c in _called(fn))


def unchecked(files: Iterable[tuple[str, str]]) -> list[str]:
    """``path:line: name`` of every ``test*`` function of ``files`` ((path, source) pairs)
    that checks nothing; helpers are every function of ``files``."""
    funcs: list[tuple[str, Func]] = []
    for path, text in files:
        for n in ast.walk(ast.parse(text, path)):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                funcs.append((path, n))
    checking = {fn.name for _, fn in funcs if _checks_itself(fn)}
    calls = {id(fn): _called(fn) for _, fn in funcs}
    grew = True
    while grew:  # a helper that calls a checking helper checks too
        grew = False
        for _, fn in funcs:
            if fn.name not in checking and calls[id(fn)] & checking:
                checking.add(fn.name)
                grew = True
    return [
        f"{path}:{fn.lineno}: {fn.name}"
        for path, fn in funcs
        if fn.name.startswith("test") and not _checks_itself(fn) and not calls[id(fn)] & checking
    ]


def _suite() -> list[tuple[str, str]]:
    return [(str(p.relative_to(ROOT)), p.read_text()) for p in sorted(TESTS.rglob("*.py"))]


def test_the_suite_is_read() -> None:
    files = dict(_suite())
    assert "tests/package/test_tests_check.py" in files and len(files) > 100


def test_every_test_function_checks_something() -> None:
    assert unchecked(_suite()) == []


def test_a_test_that_checks_nothing_is_found() -> None:
    src = """
import pytest

def run_table(x):
    assert x

def helper(x):
    return run_table(x)

def test_asserts():
    assert 1

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_calls_a_checking_helper():
    helper(1)

def test_mock(m):
    m.assert_called_once_with(1)

def test_nothing():
    int("1")

class TestC:
    def test_only_runs(self):
        helper  # named, not called
        pytest.skip("not here")
"""
    assert unchecked([("t.py", src)]) == ["t.py:23: test_nothing", "t.py:27: test_only_runs"]
