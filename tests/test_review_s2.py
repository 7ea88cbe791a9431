"""Session-2 review defects, one test each, as a user meets them (compile errors and the
loader's messages).  Each test is ``xfail(strict=True)`` with the defect as reason while the
defect stands: when it is fixed the test passes, pytest reports XPASS as a failure, and the
marker is removed."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

_HEAD = """license "GPL"
config c: nosuch = 9
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
"""
_TAIL = """    return XDP_PASS
}
"""


def _errors(src: str) -> list:
    """Diagnostics of compiling ``src`` (front end only; the program must not compile)."""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "t.bpfd", check=False)
    return ei.value.diagnostics


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.xfail(
    strict=True,
    reason="a config with an unknown type is now declared with the error type, but "
    "be16()/be32()/host() and `x in PREFIX` still report it again as 'found <error>'",
)
@pytest.mark.parametrize("use", ["be16(c)", "be32(c)", "host(c)", "c in 10.0.0.0/8"])
def test_bad_config_type_is_reported_once(use):
    diags = _errors(_HEAD + f"    let x = {use}\n" + _TAIL)
    assert [d.code for d in diags] == ["unknown-type"]
    assert all("<error>" not in d.message for d in diags)


@pytest.mark.xfail(
    strict=True,
    reason="an unknown name passed to be16()/host()/`in` gives a second error "
    "'found <error>' (the error type leaks into the message)",
)
@pytest.mark.parametrize("use", ["be16(zz)", "host(zz)", "zz in 10.0.0.0/8"])
def test_unknown_name_is_reported_once(use):
    src = f'license "GPL"\nxdp fn f(ctx) {{\n    let x = {use}\n    return XDP_PASS\n}}\n'
    diags = _errors(src)
    assert [d.code for d in diags] == ["unknown-name"]


@pytest.mark.xfail(
    strict=True,
    reason="`0x` without digits lexes as 0 followed by the name x: the user gets "
    "'this expression does nothing' instead of a bad-literal error at `0x`",
)
def test_hex_prefix_without_digits_is_a_literal_error():
    src = 'license "GPL"\nxdp fn f(ctx) {\n    let x = 0x\n    return XDP_PASS\n}\n'
    diags = _errors(src)
    assert diags[0].code in ("bad-literal", "syntax")
    assert diags[0].span.line == 3 and diags[0].span.col == 13
    assert "nothing" not in diags[0].message


@pytest.mark.xfail(
    strict=True,
    reason='an unterminated string reports "unexpected character \'\\"\'" with the '
    "generic hint, not that the string is not closed",
)
def test_unterminated_string_says_so():
    diags = _errors('license "GPL\nxdp fn f(ctx) { return XDP_PASS }\n')
    assert "unterminated" in diags[0].message or "not closed" in diags[0].message


@pytest.mark.xfail(
    strict=True,
    reason="an unterminated /* comment reports \"unexpected '/'\" with the generic hint",
)
def test_unterminated_comment_says_so():
    diags = _errors('license "GPL"\n/* never ends\nxdp fn f(ctx) { return XDP_PASS }\n')
    text = diags[0].message + " ".join(diags[0].hints)
    assert "comment" in text


@pytest.mark.kernel
@pytest.mark.xfail(
    strict=True,
    reason="bpffs refuses names with '.', and `bpfdsl load --pin-dir /sys/fs/bpf/a.b` "
    "prints a bare '[Errno 1] Operation not permitted' and exits 3 (missing privileges) "
    "as root, without saying that the name is the problem",
)
def test_pin_dir_with_dot_is_a_usage_error(tmp_path):
    src = tmp_path / "p.bpfd"
    src.write_text('license "GPL"\nxdp fn f(ctx) { return XDP_PASS }\n')
    pin = f"/sys/fs/bpf/rv{uuid.uuid4().hex[:8]}.x"
    try:
        r = _cli("load", str(src), "--pin-dir", pin)
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert "Errno" not in out
        assert "'.'" in out or "dot" in out
    finally:
        if os.path.isdir(pin):
            _cli("unload", pin)
