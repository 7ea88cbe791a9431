"""Review items of the front end (issue 2): a prefix literal with host bits set is an error
naming the network (like Python's ``ipaddress.ip_network(strict=True)``); a bad ``config``
line gives its own error only, not one more at every use of the name."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import front_end
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang.build import parse_program


def _errors(src: str) -> list:
    with pytest.raises(DiagnosticError) as ei:
        front_end(src, "t.bpfd")
    return ei.value.diagnostics


@pytest.mark.parametrize(
    "lit,network",
    [
        ("10.0.0.1/8", "10.0.0.0/8"),
        ("192.168.1.77/24", "192.168.1.0/24"),
        ("1.2.3.4/0", "0.0.0.0/0"),
        ("2001:db8::1/32", "2001:db8::/32"),
        ("::1/127", "::/127"),
    ],
)
def test_prefix_with_host_bits_is_an_error_naming_the_network(lit, network):
    src = f"xdp fn f(ctx) {{\n    let a = 10.1.2.3\n    if a in {lit} {{ return XDP_DROP }}\n    return XDP_PASS\n}}\n"
    (d,) = _errors(src)
    assert (d.code, d.span.line, d.span.col) == ("bad-literal", 3, 13)
    assert d.message == f"prefix '{lit}' has host bits set"
    assert f"`{network}`" in d.hints[0]


@pytest.mark.parametrize(
    "lit", ["10.0.0.0/8", "0.0.0.0/0", "1.2.3.4/32", "2001:db8::/32", "::1/128"]
)
def test_prefix_networks_are_accepted(lit):
    prog = parse_program(f"xdp fn f(ctx) {{ let x = {lit}\n return XDP_PASS }}", "t.bpfd")
    e = prog.items[0].body.stmts[0].value
    assert e.prefixlen == int(lit.split("/")[1])


USES = """
xdp fn f(ctx) {
    if verbose == 1 { return XDP_DROP }
    let p: u16 = verbose
    return XDP_PASS
}
"""


def test_config_of_a_non_integer_type_is_the_only_error():
    (d,) = _errors("config verbose: bool = true\n" + USES)
    assert (d.code, d.span.line, d.span.col) == ("config-type", 1, 17)
    assert d.message == "a config value must be an integer type"
    assert "config verbose: u8" in d.hints[0]


def test_config_of_an_unknown_type_is_the_only_error():
    (d,) = _errors("config verbose: u17 = 1\n" + USES)
    assert (d.code, d.span.line, d.span.col) == ("unknown-type", 1, 17)
    assert d.message == "unknown type `u17`"


def test_config_with_a_bad_type_still_checks_its_value():
    diags = _errors("config verbose: bool = nope\n" + USES)
    assert [(d.code, d.span.line, d.span.col) for d in diags] == [
        ("config-type", 1, 17),
        ("unknown-name", 1, 24),
    ]
