"""OS errors a command did not turn into a diagnostic itself are said in words, never as
Python's "[Errno 13] Permission denied: '...'" (exit 3 for permissions, 1 otherwise); an
unknown network namespace (`--netns`) is error[unknown-netns] (found by
tests/fuzz/cli_misuse.py: `attach` as a non-root user, `devmap set ... --netns nosuch`)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import uuid

import pytest
from support.paths import PROGS, ROOT

from bpfdsl import cli
from bpfdsl.diagnostics import UsageError
from bpfdsl.kernel.netlink import in_netns


@pytest.mark.parametrize(
    "exc,code,text",
    [
        (PermissionError(errno.EACCES, "Permission denied", "/sys/fs/bpf/bpfdsl"), 3,
         "error[os-error]: /sys/fs/bpf/bpfdsl: permission denied\n"),
        (FileNotFoundError(errno.ENOENT, "No such file or directory", "/run/x"), 1,
         "error[os-error]: /run/x: no such file or directory\n"),
        (OSError(errno.EIO, "Input/output error"), 1, "error[os-error]: input/output error\n"),
    ],
)  # fmt: skip
def test_os_error_in_words(monkeypatch, capsys, exc, code, text) -> None:
    from bpfdsl.cli import check_cmd

    def fail(args):
        raise exc

    monkeypatch.setattr(check_cmd, "cmd_check", fail)
    assert cli.main(["check", "x.o"]) == code
    err = capsys.readouterr().err
    assert err == text and "[Errno" not in err


@pytest.mark.parametrize("name", ["nosuch_fz_ns", "../../etc/passwd", "", ".."])
def test_unknown_netns(name: str) -> None:
    with pytest.raises(UsageError) as ei:
        with in_netns(name):
            pass
    d = ei.value.diagnostics[0]
    assert d.code == "unknown-netns" and f"{name!r}" in d.message
    assert "ip netns" in d.hints[0]


@pytest.mark.kernel
def test_devmap_set_unknown_netns_is_a_usage_error() -> None:
    pin = f"/sys/fs/bpf/test_netns_{uuid.uuid4().hex[:8]}"

    def bpfdsl(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bpfdsl", *args], capture_output=True,
                              text=True, timeout=120, cwd=ROOT)  # fmt: skip

    assert bpfdsl("load", str(PROGS / "xdp_devmap_forward.bpfd"), "--pin-dir", pin).returncode == 0
    try:
        r = bpfdsl("devmap", "set", f"{pin}/maps/tx_ports", "0", "lo", "--netns", "nosuch_fz_ns")
        assert r.returncode == 2, r.stderr
        assert "error[unknown-netns]: no network namespace named 'nosuch_fz_ns'" in r.stderr
        assert "Errno" not in r.stderr
    finally:
        bpfdsl("unload", pin)
        assert not os.path.exists(pin)
