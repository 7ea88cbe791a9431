"""A source file's lines are what an editor shows: CR LF and a lone CR end a line (universal
newlines, as open() in text mode), so every line:col names a line of the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpfdsl.compiler import compile_file
from bpfdsl.diagnostics import DiagnosticError


@pytest.mark.parametrize("eol", ["\r", "\r\n", "\n"])
def test_error_line_counts_every_line_ending(tmp_path: Path, eol: str) -> None:
    src = tmp_path / "f.bpfd"
    src.write_bytes(
        eol.join(['license "GPL"', "xdp fn f(ctx) {", "    return XDP_PAS", "}"]).encode()
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_file(src)
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("unknown-name", 3, 12)
    assert "3 |     return XDP_PAS" in ei.value.render()


def test_end_of_input_after_a_lone_cr(tmp_path: Path) -> None:
    """The fuzz reproducer: ' \\ra' ends inside the item on line 2, not at 1:4."""
    src = tmp_path / "m.bpfd"
    src.write_bytes(b" \ra")
    with pytest.raises(DiagnosticError) as ei:
        compile_file(src)
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("syntax", 2, 2)
