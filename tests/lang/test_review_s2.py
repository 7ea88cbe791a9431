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
