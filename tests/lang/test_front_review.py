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
    "lit", ["10.0.0.0/8", "0.0.0.0/0", "1.2.3.4/32", "2001:db8::/32", "::1/128"]
)
def test_prefix_networks_are_accepted(lit):
    prog = parse_program(f"xdp fn f(ctx) {{ let x = {lit}\n return XDP_PASS }}", "t.bpfd")
    e = prog.items[0].body.stmts[0].value
    assert e.prefixlen == int(lit.split("/")[1])
