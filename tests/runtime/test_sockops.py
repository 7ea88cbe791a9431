"""sock_ops on cgroup v2 and the socket-redirection CLI (issue 5).

- The cgroup v2 hierarchy is found, or -- where none is mounted (a private mount namespace
  here) -- mounted in a temporary directory.
- Wrong cgroup / wrong program type are clear errors.
- End to end through the CLI with the bpfdsl loader: ``bpfdsl load`` the sk_msg + sock_ops
  object, ``bpfdsl sockops attach`` to a child cgroup, ``bpfdsl sockmap attach``; TCP in the
  cgroup then skips the stack; ``detach`` of both restores plain TCP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from support.paths import ROOT
from support.redirect_testlib import build_c, load_object, stream

from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.runtime.cgroup import ChildCgroup, cgroup2_mount, sock_ops_attach

pytestmark = pytest.mark.kernel


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("sockops"))


def test_cgroup2_found_in_mountinfo() -> None:
    where = cgroup2_mount(mount_if_missing=False)
    assert os.path.exists(os.path.join(where, "cgroup.procs"))
    with open("/proc/self/mountinfo") as f:
        assert any(f" {where} " in line and " - cgroup2 " in line for line in f)


def test_cgroup2_mounted_when_missing() -> None:
    """In a private mount namespace without cgroup2, cgroup2_mount() mounts one itself."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) not installed")
    where = cgroup2_mount(mount_if_missing=False)
    code = (
        "import os, subprocess\n"
        "from bpfdsl.runtime.cgroup import cgroup2_mount, _mountinfo_cgroup2\n"
        "assert _mountinfo_cgroup2() is None\n"
        "p = cgroup2_mount()\n"
        "print(p, os.path.exists(os.path.join(p, 'cgroup.procs')))\n"
        "subprocess.run(['umount', p], check=True); os.rmdir(p)\n"
    )
    proc = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'umount -l {where} && exec {sys.executable} -c "$0"',
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    path, ok = proc.stdout.split()
    assert ok == "True" and "bpfdsl-cgroup2-" in path and not os.path.exists(path)


def test_sock_ops_attach_errors(objs) -> None:
    with load_object(objs["sk_msg_redirect_ingress"]) as ld, ChildCgroup() as cg:
        with pytest.raises(DiagnosticError) as ei:
            sock_ops_attach(cg.path, ld.progs["redir"], prog_name="redir")
        assert "not-sock-ops" in str(ei.value) and "sk_msg" in str(ei.value)
        with pytest.raises(DiagnosticError) as ei:
            sock_ops_attach("/nonexistent/cg", ld.progs["track"], prog_name="track")
        assert "not-a-cgroup" in str(ei.value)


def test_cli_sockops_and_sockmap_end_to_end(objs) -> None:
    pin = f"/sys/fs/bpf/bpfdsl_so_{uuid.uuid4().hex[:8]}"
    with ChildCgroup(prefix="bpfdsl-cli") as cg:
        try:
            r = bpfdsl("load", str(objs["sk_msg_redirect_ingress"]), "--pin-dir", pin)
            assert r.returncode == 0, r.stderr
            r = bpfdsl("sockops", "attach", "track", "--pin-dir", pin, "--cgroup", cg.path)
            assert r.returncode == 0, r.stderr
            r = bpfdsl("-j", "sockmap", "attach", f"{pin}:socks", "--prog", "redir")
            assert r.returncode == 0 and json.loads(r.stdout)["attached"], r.stderr
            for res in stream(cg, {4096: 50, 65537: 4}):
                assert res["match"] and res["data_segs_out"] == 0
            r = bpfdsl("skmsg", "detach", f"{pin}:socks", "--prog", "redir")
            assert r.returncode == 0 and "detached" in r.stdout, r.stderr
            r = bpfdsl("sockops", "detach", f"{pin}/progs/track", "--cgroup", cg.path)
            assert r.returncode == 0 and "detached" in r.stdout, r.stderr
            for res in stream(cg, {4096: 50}):
                assert res["match"] and res["data_segs_out"] > 0
            r = bpfdsl("sockops", "attach", "redir", "--pin-dir", pin, "--cgroup", cg.path)
            assert r.returncode == 1 and "not-sock-ops" in r.stderr
            assert "Traceback" not in r.stderr
        finally:
            bpfdsl("sockops", "detach", f"{pin}/progs/track", "--cgroup", cg.path)
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)
