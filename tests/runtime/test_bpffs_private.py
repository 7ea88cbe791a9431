"""`ip netns exec` runs a command in a mount namespace of its own with /sys remounted, so
/sys/fs/bpf is empty there: a bpffs bpfdsl mounted itself, and the pins of an attach on
it, would vanish when the command exits -- an attach that reports success and leaves
nothing (found by a new-user review).  bpfdsl refuses there (``bpffs-private``, exit 3,
naming nsenter), and `nsenter --net=` (the host's mounts) works."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest
from support.paths import PROGS, ROOT

from bpfdsl.kernel import netlink
from bpfdsl.runtime.bpffs import private_mounts

pytestmark = pytest.mark.kernel


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_this_process_runs_in_the_host_mounts() -> None:
    assert private_mounts() is False


def test_under_ip_netns_exec_load_is_refused_and_nothing_is_pinned() -> None:
    if shutil.which("ip") is None or shutil.which("nsenter") is None:
        pytest.skip("ip (iproute2) and nsenter (util-linux) are needed")
    tag = uuid.uuid4().hex[:8]
    pin = f"/sys/fs/bpf/bpfdsl_bpffsns_{tag}"
    load = [sys.executable, "-m", "bpfdsl", "load", str(PROGS / "xdp_pass.bpfd"), "--pin-dir", pin]
    with netlink.netns(f"bpffsns{tag}") as ns:
        try:
            r = subprocess.run(["ip", "netns", "exec", ns, *load], capture_output=True,
                               text=True, timeout=120, env=_env())  # fmt: skip
            assert r.returncode == 3, r.stdout + r.stderr
            assert "error[bpffs-private]" in r.stderr and "nsenter --net=" in r.stderr
            assert not os.path.exists(pin)
            # under a shell too (it stays bpfdsl's parent: the namespace is the shell's)
            sh = ["ip", "netns", "exec", ns, "sh", "-c", '"$@"; r=$?; exit $r', "sh", *load]
            r = subprocess.run(sh, capture_output=True, text=True, timeout=120, env=_env())
            assert r.returncode == 3 and "error[bpffs-private]" in r.stderr, r.stderr
            r = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *load],
                               capture_output=True, text=True, timeout=120, env=_env())  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert os.path.exists(f"{pin}/progs/xdp_pass")  # on the host's bpffs
        finally:
            subprocess.run([sys.executable, "-m", "bpfdsl", "unload", pin],
                           capture_output=True, timeout=60, env=_env())  # fmt: skip
