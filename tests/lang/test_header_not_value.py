"""A header type where a value is stored (struct field, map key or value, array element) is
a located error[header-not-value], not a Python AttributeError/ValueError from the layout or
the debug info (found by tests/fuzz/sources.py); as a `fn` parameter it stays allowed."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

HEAD = 'license "GPL"\n'
PROG = "xdp fn f(ctx) { return XDP_PASS }\n"


@pytest.mark.parametrize(
    "decl,line,col,what",
    [
        ("struct s { a: u8, b: ipv4 }", 2, 22, "a struct field"),
        ("struct s { a: [udp; 2] }", 2, 16, "an array element"),
        ("map m: hash<u32, ipv4>(max_entries: 4)", 2, 18, "a map key or value"),
        ("map m: hash<ethernet, u32>(max_entries: 4)", 2, 13, "a map key or value"),
        ("map m: percpu_array<byte>(max_entries: 1)", 2, 21, "a map key or value"),
        ("map m: array<u32, [tcp; 2]>(max_entries: 4)", 2, 20, "an array element"),
        ("fn g(x: [ipv4; 2]) {}", 2, 10, "an array element"),
    ],
)
def test_header_type_as_a_value(decl: str, line: int, col: int, what: str) -> None:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(HEAD + decl + "\n" + PROG, "h.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("header-not-value", line, col)
    assert d.message.endswith(f"it cannot be {what}")
    assert "fn` parameter" in d.hints[0]


def test_header_as_fn_parameter_still_compiles() -> None:
    src = (
        HEAD
        + "fn dec(ip: ipv4) { ip.ttl -= 1 }\n"
        + (
            "xdp fn f(ctx) {\n    let eth = parse ethernet else { return XDP_PASS }\n"
            "    let ip = parse ipv4 else { return XDP_PASS }\n    dec(ip)\n    return XDP_TX\n}\n"
        )
    )
    assert compile_source(src, "h.bpfd").obj[:4] == b"\x7fELF"
