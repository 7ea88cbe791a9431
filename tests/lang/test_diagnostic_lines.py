"""A diagnostic shows the line it names, counted as the lexer counts lines ("\\n" only):
a form feed (whitespace in the grammar), U+2028 in a comment or CR LF line ends before the
error must not shift the source line under the caret (found by tests/fuzz/sources.py)."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError


def _error(src: str) -> DiagnosticError:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "f.bpfd")
    return ei.value


@pytest.mark.parametrize(
    "sep",
    ["\x0c", "// a\u2028b", "// a\x85b", "/* \x1c */", "\r"],
    ids=["form-feed", "u2028-in-comment", "nel-in-comment", "fs-in-comment", "cr"],
)
def test_caret_line_is_the_named_line(sep: str) -> None:
    e = _error(f'license "GPL"\n{sep}\nxdp fn f(ctx) {{\n    return nope\n}}\n')
    d = e.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("unknown-name", 4, 12)
    assert e.render().split("\n")[2:5] == ["  |", "4 |     return nope", "  |            ^^^^"]


def test_crlf_line_shown_without_cr() -> None:
    e = _error('license "GPL"\r\nxdp fn f(ctx) {\r\n  return nope\r\n}\r\n')
    assert (e.diagnostics[0].span.line, e.diagnostics[0].span.col) == (3, 10)
    assert "3 |   return nope\n" in e.render() + "\n"


def test_end_of_input_after_form_feed_names_the_last_line() -> None:
    e = _error('license "GPL"\nxdp fn f(ctx) {\x0c\n    return XDP_PASS\n')
    d = e.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("syntax", 3, 20)
    assert "3 |     return XDP_PASS" in e.render()
