"""libbpf takes bpfdsl's object of a device-bound program as standard: it finds the kfunc
extern in .ksyms, resolves it against the kernel's BTF (the extern's FUNC_PROTO must be
compatible with the kernel's: `enum xdp_rss_hash_type *` for rx_hash's rss_type), and
relocates the call.  bpftool >= 7.2 loads it device-bound with ``xdpmeta_dev IFACE``
(prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY); an older bpftool (Debian 12's 7.1) has no way to
ask for that, so its `prog loadall` gets exactly as far as the verifier's device-bound
rule."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from support.netns import bpffs_dir, veth_here
from support.paths import ROOT

from bpfdsl.compiler import compile_file

pytestmark = pytest.mark.kernel
PROG = ROOT / "tests" / "data" / "metadata" / "xdp_rx_hash.bpfd"


def bpftool(*args: str) -> subprocess.CompletedProcess:
    tool = shutil.which("bpftool")
    if tool is None:
        pytest.skip("bpftool not installed")
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60)


def has_xdpmeta_dev() -> bool:
    return "xdpmeta_dev" in (lambda r: r.stdout + r.stderr)(bpftool("prog", "help"))


@pytest.fixture
def obj(tmp_path: Path) -> Path:
    out = tmp_path / "xdp_rx_hash.o"
    out.write_bytes(compile_file(PROG).obj)
    return out


def test_libbpf_resolves_the_kfunc_and_reaches_the_verifier(obj: Path) -> None:
    pin = bpffs_dir("m17b_")
    try:
        r = bpftool("-d", "prog", "loadall", str(obj), pin)
    finally:
        shutil.rmtree(pin, ignore_errors=True)
    assert r.returncode != 0  # no device given: the kernel's rule, not libbpf's refusal
    assert "incompatible with kernel" not in r.stderr
    assert "extern (ksym) #0" in r.stderr and "bpf_xdp_metadata_rx_hash" in r.stderr
    assert "metadata kfuncs require device-bound program" in r.stderr


def test_bpftool_loads_it_device_bound_with_xdpmeta_dev(obj: Path) -> None:
    if not has_xdpmeta_dev():
        pytest.skip("this bpftool has no `xdpmeta_dev` (bpftool >= 7.2)")
    pin = bpffs_dir("m17b_")
    with veth_here("m17d") as ifindex:
        name = socket.if_indextoname(ifindex)
        try:
            r = bpftool("prog", "load", str(obj), pin, "xdpmeta_dev", name)
            assert r.returncode == 0, r.stderr
        finally:
            Path(pin).unlink(missing_ok=True)
