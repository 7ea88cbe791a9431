"""The command line and device-bound programs (those calling the XDP metadata kfuncs):
`attach --dev` and `load --dev` load them for that interface (prog_ifindex +
BPF_F_XDP_DEV_BOUND_ONLY), `run` runs them on the interpreter (the kernel refuses to
test-run them), `check` says how to give the device, and every refusal names an option
that exists."""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest
from support.netns import bpffs_dir, veth_net
from support.paths import ROOT

from bpfdsl.kernel import syscall as S

PROG = ROOT / "tests" / "data" / "metadata" / "xdp_rx_hash.bpfd"
FRAME = "ff" * 6 + "02" * 6 + "0800" + "00" * 50


def bpfdsl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def counters(pin_dir: str) -> list[int]:
    with S.obj_get(f"{pin_dir}/maps/rx_hash_out") as fd:
        return [struct.unpack("<Q", S.map_lookup(fd, struct.pack("<I", i), 8))[0] for i in range(4)]


def test_check_says_how_to_give_the_device() -> None:
    r = bpfdsl("check", str(PROG))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "calls bpf_xdp_metadata_rx_hash" in r.stdout
    assert f"bpfdsl attach {PROG} --dev IFACE" in r.stdout


def test_run_uses_the_interpreter_and_the_configured_hint() -> None:
    r = bpfdsl("run", str(PROG), "--hex", FRAME, "--json")
    assert r.returncode == 0, r.stderr
    assert "BPF_PROG_TEST_RUN refuses device-bound programs" in r.stderr
    changes = {c["key"]: c["new"] for p in _packets(r.stdout) for c in p["map_changes"]}
    assert changes[0] == (-95) & 0xFFFFFFFF  # -EOPNOTSUPP: no driver gives the hint
    r = bpfdsl("run", str(PROG), "--hex", FRAME, "--ctx", "rx_hash=0x1234", "--json")
    assert r.returncode == 0, r.stderr
    changes = {c["key"]: c["new"] for p in _packets(r.stdout) for c in p["map_changes"]}
    assert changes[1] == 0x1234 and 0 not in changes  # returned 0: out[0] stays 0


def _packets(text: str) -> list[dict]:
    import json

    return json.loads(text)["packets"]


def test_run_on_the_kernel_is_refused_with_what_to_do() -> None:
    r = bpfdsl("run", str(PROG), "--hex", FRAME, "--engine", "kernel")
    assert r.returncode == 1
    assert "error[no-test-run]" in r.stderr and "device-bound" in r.stderr
    assert "--engine interp" in r.stderr


@pytest.mark.kernel
def test_load_without_a_device_names_the_options() -> None:
    pin = bpffs_dir("m17l_")
    r = bpfdsl("load", str(PROG), "--pin-dir", pin)
    assert r.returncode == 1
    assert "error[dev-bound-needs-device]" in r.stderr
    # every command the hint names takes --dev
    for cmd in ("attach", "load", "run"):
        assert f"bpfdsl {cmd} " in r.stderr
        assert "--dev IFACE" in bpfdsl(cmd, "--help").stdout


@pytest.mark.kernel
def test_load_and_attach_with_dev_on_a_veth() -> None:
    with veth_net("m17c") as net:
        pin = bpffs_dir("m17a_")
        r = net.bpfdsl("load", str(PROG), "--dev", net.xdp_dev, "--pin-dir", pin)
        try:
            assert r.returncode == 0, r.stderr
        finally:
            net.bpfdsl("unload", pin)
        pin = bpffs_dir("m17a_")
        r = net.bpfdsl("attach", str(PROG), "--dev", net.xdp_dev, "--pin-dir", pin)
        try:
            assert r.returncode == 0, r.stderr
            assert f"to {net.xdp_dev} in native mode" in r.stdout
            assert net.send_udp(9000, 20) == 20
            seen, err, hash_ = 0, None, 0
            for _ in range(50):  # bounded: the frames reach the program within ~1 s
                err, hash_, _rss, seen = counters(pin)
                if seen >= 20:
                    break
                subprocess.run(["sleep", "0.02"], check=True)
            # veth gives the skb's flow hash (drivers/net/veth.c veth_xdp_rx_hash)
            assert seen >= 20 and err == 0 and hash_ != 0
        finally:
            net.bpfdsl("detach", "--dev", net.xdp_dev)


@pytest.mark.kernel
def test_generic_mode_is_refused_as_the_kernel_does() -> None:
    with veth_net("m17g") as net:
        pin = bpffs_dir("m17g_")
        r = net.bpfdsl(
            "attach", str(PROG), "--dev", net.xdp_dev, "--mode", "generic", "--pin-dir", pin
        )
        if r.returncode == 0:
            net.bpfdsl("detach", "--dev", net.xdp_dev)
        assert r.returncode == 1
        assert "error[attach-failed]" in r.stderr and "is device-bound" in r.stderr
        assert "native mode only" in r.stderr and "--mode native" in r.stderr
        assert "cpumap" not in r.stderr  # not mistaken for an xdp(cpumap) program


@pytest.mark.kernel
def test_a_device_without_native_xdp_is_named() -> None:
    r = bpfdsl("load", str(PROG), "--dev", "lo", "--pin-dir", bpffs_dir("m17o_"))
    assert r.returncode == 1
    assert "error[dev-bound-device]" in r.stderr and "interface lo (ifindex 1)" in r.stderr
