"""Line ends as editors count them: LF, CR LF and a lone CR (classic Mac) each end a line,
for the positions of errors and for the line the caret is shown under (a CR left inside
the shown line would move the terminal's cursor back over it)."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError

BAD = 'license "GPL"{nl}xdp fn f(ctx) {{{nl}    return nope{nl}}}{nl}'


@pytest.mark.parametrize("nl", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_error_line_and_caret_for_each_line_end(tmp_path, nl: str) -> None:
    """The unknown name on line 3 is reported at 3:12 and shown as that line, without a
    CR, both from compile_source and from a file (rendered from the file on disk)."""
    src = BAD.format(nl=nl)
    path = tmp_path / "f.bpfd"
    path.write_bytes(src.encode())
    for call in (lambda: compile_source(src, str(path)), lambda: compile_file(path)):
        with pytest.raises(DiagnosticError) as ei:
            call()
        d = ei.value.diagnostics[0]
        assert (d.code, d.span.line, d.span.col) == ("unknown-name", 3, 12)
        shown = ei.value.render()
        assert "\r" not in shown
        assert shown.split("\n")[2:5] == ["  |", "3 |     return nope", "  |            ^^^^"]


def test_lone_cr_before_an_error_on_line_one() -> None:
    """The fuzz finding: `) CR <=` -- the error is at 1:1 and line 1 is shown as `) `."""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(") \r<=", "m.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("syntax", 1, 1)
    assert "1 | ) " in ei.value.render().split("\n")


def test_program_with_cr_line_ends_compiles(bpf_program) -> None:
    """A valid program saved with lone CRs compiles and runs."""
    src = 'license "GPL"\rxdp fn f(ctx) {\r    return XDP_DROP\r}\r'
    assert bpf_program(compile_source(src, "cr.bpfd").obj).run(bytes(64)).verdict == "XDP_DROP"
