"""Bad input: every error names file:line:col and says what to do; the CLI exits 1 with the
source line and a caret, never a traceback.  The compile errors are data: each
tests/lang/errors/TOPIC/NAME.bpfd is a program with the diagnostics it must give (code,
line:col in that file, message and hint words) in its header comment."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError

HEAD = 'license "GPL"\nmap m: hash<u32, u64>(max_entries: 16)\n'

ERRORS = Path(__file__).parent / "errors"
FILES = sorted(ERRORS.rglob("*.bpfd"))
# The header of an errors/*.bpfd file: its leading `//` lines, each one of
#   // LINE:COL: error[CODE]: WORDS   a diagnostic (in order; the list is all of them), at the
#                                     file's own LINE:COL; WORDS are in its message
#   //   message has: WORDS           more words in that message
#   //   message is: TEXT             the whole message
#   //   message lacks: WORDS         words not in it
#   //   help N: WORDS                words in its N-th hint (the `help:` lines of the CLI)
# A value in double quotes is a JSON string (for spaces at either end).
_DIAG = re.compile(r"(\d+):(\d+): (error|warning)\[([a-z0-9-]+)\](?:: (.*))?")
_DETAIL = re.compile(r"(message has|message is|message lacks|help (\d+)): (.*)")


@dataclass(slots=True)
class Expected:
    """One diagnostic a data file expects (line and column 1-based, as in the file)."""

    severity: str
    code: str
    line: int
    col: int
    has: list[str] = field(default_factory=list)
    exact: str | None = None
    lacks: list[str] = field(default_factory=list)
    helps: dict[int, list[str]] = field(default_factory=dict)


def _value(text: str) -> str:
    return json.loads(text) if text.startswith('"') else text


def expected(path: Path) -> list[Expected]:
    """The diagnostics the header of ``path`` expects; a header line that is none of the
    forms above is an error (a misspelt key must not pass silently)."""
    want: list[Expected] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.startswith("//"):
            break
        text = line[2:].strip()
        if m := _DIAG.fullmatch(text):
            want.append(Expected(m[3], m[4], int(m[1]), int(m[2])))
            if m[5] is not None:
                want[-1].has.append(_value(m[5]))
        elif (m := _DETAIL.fullmatch(text)) and want:
            key, value = m[1], _value(m[3])
            if key == "message has":
                want[-1].has.append(value)
            elif key == "message is":
                want[-1].exact = value
            elif key == "message lacks":
                want[-1].lacks.append(value)
            else:
                want[-1].helps.setdefault(int(m[2]), []).append(value)
        else:
            raise ValueError(f"{path}:{n}: not an expectation: {line}")
    return want


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ERRORS)) for p in FILES])
def test_error_position_and_message(path):
    want = expected(path)
    assert want, f"{path}: no expectation header"
    with pytest.raises(DiagnosticError) as ei:
        compile_file(path)
    got = ei.value.diagnostics
    where = [(d.severity, d.code, d.span and (d.span.file, d.span.line, d.span.col)) for d in got]
    assert where == [(w.severity, w.code, (str(path), w.line, w.col)) for w in want], where
    for d, w in zip(got, want, strict=True):
        assert all(words in d.message for words in w.has), d.message
        assert w.exact is None or d.message == w.exact, d.message
        assert not any(words in d.message for words in w.lacks), d.message
        for n, words in w.helps.items():
            assert len(d.hints) >= n and all(t in d.hints[n - 1] for t in words), d.hints


def test_errors_are_collected_not_cascaded():
    src = (
        HEAD
        + """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_protocol == ETH_P_IP { return XDP_DROP }
    while true { }
    return 9
}"""
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    assert [d.code for d in ei.value.diagnostics] == [
        "unknown-field",
        "unbounded-loop",
        "bad-return",
    ]


def test_an_unknown_map_indexed_is_one_error() -> None:
    """`drop[0] += 1` for the map `drops`: the unknown name with its did-you-mean, and no
    second error about indexing the error's placeholder type (`<error> cannot be indexed`,
    found by a new-user review)."""
    src = (
        HEAD
        + """map drops: array<u32, u64>(max_entries: 1)
xdp fn f(ctx) {
    drop[0] += 1
    return XDP_PASS
}"""
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "typo.bpfd")
    (d,) = ei.value.diagnostics
    assert d.code == "unknown-name" and any("drops" in h for h in d.hints)
    assert "<error>" not in ei.value.render()


def test_cli_error_shows_source_caret_and_exits_1(tmp_path):
    src = ERRORS / "types" / "byte_order.bpfd"
    (w,) = expected(src)
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(src), "-o", str(tmp_path / "bad.o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"{src}:{w.line}:{w.col}" in r.stderr
    assert "    if udp.dest == port { return XDP_DROP }" in r.stderr
    assert "       ^^^^^^^^^^^^^^^^" in r.stderr
    assert "help:" in r.stderr
    assert not (tmp_path / "bad.o").exists()


def test_cli_missing_file_is_usage_error(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(tmp_path / "nope.bpfd")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_unwritable_output_is_a_usage_error(tmp_path):
    src = tmp_path / "p.bpfd"
    src.write_text(
        'license "GPL"\nmap v: array<u32>(max_entries: 1)\nxdp fn f(ctx) {\n\n    return XDP_PASS\n}\n'
    )
    out = tmp_path / "no" / "such" / "dir" / "x.o"
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "cannot write" in r.stderr and "directory exists" in r.stderr


@pytest.mark.parametrize(
    ("expr", "code", "hint"),
    [
        ("let x: u8 = 300", "out-of-range", "u8 holds 0..255"),
        ("let x: be16 = 99999", "out-of-range", "be16 holds 0..65535"),
        ("let x: u32 = 7 / 0", "division-by-zero", "divide by another value"),
    ],
)
def test_constant_errors_say_what_to_do(expr: str, code: str, hint: str) -> None:
    src = HEAD + f"xdp fn f(ctx) {{\n    {expr}\n    return XDP_PASS\n}}"
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "c.bpfd")
    (d,) = [d for d in ei.value.diagnostics if d.code == code]
    assert any(hint in h for h in d.hints), d.hints


@pytest.mark.parametrize(
    ("line", "col", "word", "kw"),
    [
        ("    lett eth = parse ethernet else { return XDP_PASS }", 5, "lett", "let"),
        ("    retrun XDP_PASS", None, None, None),  # an expression statement: not this rule
    ],
)
def test_a_misspelt_leading_keyword_is_named(line: str, col, word, kw) -> None:
    """`lett x = ...` is refused at `lett` with "did you mean `let`?", not at a later
    keyword with a hint about naming (found by a new-user review)."""
    src = HEAD + f"xdp fn f(ctx) {{\n{line}\n    return XDP_PASS\n}}"
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "kw.bpfd")
    d = ei.value.diagnostics[0]
    if kw is None:
        assert not any("did you mean" in h for h in d.hints)
        return
    assert d.message == f"unexpected {word!r}" and d.span.col == col
    assert d.hints == [f"did you mean `{kw}`?"]


def test_a_misspelt_license_is_named() -> None:
    with pytest.raises(DiagnosticError) as ei:
        compile_source('licence "GPL"\nxdp fn f(ctx) {\n    return XDP_PASS\n}\n', "kw.bpfd")
    (d,) = ei.value.diagnostics
    assert (d.span.line, d.span.col) == (1, 1) and d.hints == ["did you mean `license`?"]


def test_a_config_of_a_non_integer_type_names_the_types_it_takes() -> None:
    with pytest.raises(DiagnosticError) as ei:
        compile_source('license "GPL"\nconfig on: bool = 1\nxdp fn f(ctx) { return XDP_PASS }\n')
    (d,) = [d for d in ei.value.diagnostics if d.code == "config-type"]
    assert any("u8..u64 or i8..i64" in h and "be16/be32" in h for h in d.hints), d.hints
