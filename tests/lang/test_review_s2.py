"""Session-2 review defects, one test each, as a user meets them (compile errors and the
loader's messages).  Each was found by a reviewer as an
``xfail(strict=True)`` test and its marker removed with the fix."""

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


@pytest.mark.parametrize("use", ["be16(c)", "be32(c)", "host(c)", "c in 10.0.0.0/8"])
def test_bad_config_type_is_reported_once(use):
    diags = _errors(_HEAD + f"    let x = {use}\n" + _TAIL)
    assert [d.code for d in diags] == ["unknown-type"]
    assert all("<error>" not in d.message for d in diags)


@pytest.mark.parametrize("use", ["be16(zz)", "host(zz)", "zz in 10.0.0.0/8"])
def test_unknown_name_is_reported_once(use):
    src = f'license "GPL"\nxdp fn f(ctx) {{\n    let x = {use}\n    return XDP_PASS\n}}\n'
    diags = _errors(src)
    assert [d.code for d in diags] == ["unknown-name"]


def test_hex_prefix_without_digits_is_a_literal_error():
    src = 'license "GPL"\nxdp fn f(ctx) {\n    let x = 0x\n    return XDP_PASS\n}\n'
    diags = _errors(src)
    assert diags[0].code in ("bad-literal", "syntax")
    assert diags[0].span.line == 3 and diags[0].span.col == 13
    assert "nothing" not in diags[0].message


def test_unterminated_string_says_so():
    diags = _errors('license "GPL\nxdp fn f(ctx) { return XDP_PASS }\n')
    assert "unterminated" in diags[0].message or "not closed" in diags[0].message


def test_unterminated_comment_says_so():
    diags = _errors('license "GPL"\n/* never ends\nxdp fn f(ctx) { return XDP_PASS }\n')
    text = diags[0].message + " ".join(diags[0].hints)
    assert "comment" in text


@pytest.mark.kernel
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


def _const_src(expr: str) -> str:
    return (
        'license "GPL"\nmap out: array<u32, u64>(max_entries: 4)\nxdp fn f(ctx) {\n'
        f"    out[0] = {expr}\n    return XDP_PASS\n}}\n"
    )


@pytest.mark.parametrize("expr", ["1 << (1 - 3)", "1 << ~1", "1 >> (0 - 1)"])
def test_negative_constant_shift_is_a_diagnostic(expr):
    diags = _errors(_const_src(expr))
    assert diags[0].span is not None and diags[0].span.line == 4
    assert "negative shift count" != diags[0].message


def test_huge_constant_shift_is_a_diagnostic():
    diags = _errors(_const_src("1 << 100000"))
    assert diags[0].span is not None and diags[0].span.line == 4
    assert "digits" not in diags[0].message


def test_huge_literal_is_a_diagnostic():
    """A 5000-digit literal: one bad-literal error at it (Python's int/str digit limit
    must not reach the user)."""
    diags = _errors(_const_src("9" * 5000))
    assert diags[0].code == "bad-literal" and diags[0].span.line == 4
    assert "digits) is too large" in diags[0].message


def test_show_without_privileges_says_so():
    """`bpfdsl show` as nobody: one line naming what it needs, exit 3 (not an empty list)."""
    from support.privileges import as_nobody

    code, err = as_nobody(["show"])
    assert code == 3, err
    assert err.count("\n") == 1 and "needs root" in err and "sudo bpfdsl show" in err


def test_utf8_bom_is_accepted():
    """A file some editors save with a UTF-8 byte-order mark compiles like one without."""
    src = 'license "GPL"\nxdp fn f(ctx) { return XDP_PASS }\n'
    assert compile_source("\ufeff" + src, "t.bpfd").obj == compile_source(src, "t.bpfd").obj


@pytest.mark.parametrize(
    ("lit", "value"), [(r'"GPL"', "GPL"), (r'"G\"P\\L"', 'G"P\\L'), (r'"a\tb"', "a\tb")]
)
def test_license_escapes(lit, value):
    from bpfdsl.obj.collection import read_object

    src = f"license {lit}\nxdp fn f(ctx) {{ return XDP_PASS }}\n"
    assert read_object(compile_source(src, "t.bpfd", check=False).obj).license == value


def test_unknown_string_escape_is_an_error():
    diags = _errors('license "G\\qPL"\nxdp fn f(ctx) { return XDP_PASS }\n')
    assert diags[0].code == "bad-literal" and "\\q" in diags[0].message
    assert (diags[0].span.line, diags[0].span.col) == (1, 9)


@pytest.mark.kernel
def test_second_one_step_attach_replaces_atomically(tmp_path):
    """`attach xdp FILE.o --pin-dir P` over an earlier one-step attach into P: the new
    program replaces the old on the same link (atomic update), P then holds only the new
    pins, packets get the new verdict; with --no-replace the busy dir is an error whose hint
    names the way to replace."""
    import json

    from support.netns import bpffs_dir, veth_net

    drop, pas = tmp_path / "drop.bpfd", tmp_path / "pass.bpfd"
    drop.write_text('license "GPL"\nxdp fn d(ctx) { return XDP_DROP }\n')
    pas.write_text('license "GPL"\nxdp fn p(ctx) { return XDP_PASS }\n')
    pin = bpffs_dir("bpfdsl_rv_")
    with veth_net("rv") as n:
        try:
            a = n.bpfdsl("--json", "attach", "xdp", str(drop), "--dev", n.xdp_dev, "--pin-dir", pin)
            assert a.returncode == 0, a.stderr
            first = json.loads(a.stdout)
            with n.udp_receiver(9000) as rx:
                n.send_udp(9000, 20)
                assert rx.drain() == 0
            b = n.bpfdsl("--json", "attach", "xdp", str(pas), "--dev", n.xdp_dev, "--pin-dir", pin)
            assert b.returncode == 0, b.stderr
            second = json.loads(b.stdout)
            assert second["link_id"] == first["link_id"]  # the same link, updated in place
            assert second["prog_id"] != first["prog_id"]
            assert sorted(os.listdir(os.path.join(pin, "progs"))) == ["p"]
            assert os.path.exists(os.path.join(pin, f"link_xdp_{n.xdp_dev}"))
            parent = os.path.dirname(pin)
            assert not [d for d in os.listdir(parent) if d.startswith(os.path.basename(pin) + "_")]
            with n.udp_receiver(9000) as rx:
                n.send_udp(9000, 20)
                assert rx.drain() == 20
            c = n.bpfdsl("attach", "xdp", str(pas), "--dev", n.xdp_dev, "--pin-dir", pin,
                         "--no-replace")  # fmt: skip
            assert c.returncode == 2 and "pin-dir-busy" in c.stderr
            assert "another --pin-dir" in c.stderr
        finally:
            n.bpfdsl("detach", "--dev", n.xdp_dev)
            if os.path.isdir(pin):
                _cli("unload", pin)
    assert not os.path.exists(pin)


def test_slash_zero_prefix_hint():
    src = (
        _HEAD.replace("config c: nosuch = 9\n", "") + "    let x = ip.saddr in 1.0.0.0/0\n" + _TAIL
    )
    diags = _errors(src)
    assert diags[0].code == "bad-literal"
    assert "matches every address" in diags[0].hints[0] and "`0.0.0.0/0`" in diags[0].hints[0]
