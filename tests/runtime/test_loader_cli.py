"""`bpfdsl load` / `bpfdsl unload` on the kernel: pins, configs, manifest, exit codes, errors
without tracebacks, nothing left behind on failure, links detached by unload."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest
from support.netns import bpffs_dir, veth_net
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.cli import main
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.pins import MANIFEST, read_manifest

pytestmark = pytest.mark.kernel


@pytest.fixture
def pin_dir():
    d = bpffs_dir("bdcli_")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args], capture_output=True, text=True, timeout=60
    )


def test_load_pins_everything_with_configs_then_unload(pin_dir, capsys):
    obj = str(build("compat_maps"))
    assert main(["--json", "load", obj, "--pin-dir", pin_dir, "--set", "min_len=100"]) == 0
    out = json.loads(capsys.readouterr().out)
    names = {(o["kind"], o["name"]) for o in out["objects"]}
    assert ("prog", "compat_maps") in names and ("map", ".rodata") in names
    assert os.path.exists(f"{pin_dir}/maps/rodata") and os.path.exists(f"{pin_dir}/maps/pkts")
    man = read_manifest(pin_dir)
    assert man["programs"] == ["compat_maps"] and man["object"] == os.path.abspath(obj)
    with S.obj_get(f"{pin_dir}/progs/compat_maps") as prog:
        assert S.prog_test_run(prog, bytes(99)).retval == 1  # DROP: min_len set to 100
        assert S.prog_test_run(prog, bytes(100)).retval == 2
    # a second load into the same dir is refused, naming unload
    assert main(["load", obj, "--pin-dir", pin_dir]) == 2
    assert f"bpfdsl unload {pin_dir}" in capsys.readouterr().err
    assert main(["unload", pin_dir]) == 0
    assert not os.path.exists(pin_dir)
    assert main(["unload", pin_dir]) == 2


def test_unload_refuses_foreign_dirs(pin_dir):
    os.mkdir(pin_dir)
    with S.map_create(2, 4, 4, 1) as m:
        S.obj_pin(m, f"{pin_dir}/theirs")
    r = _run("unload", pin_dir)
    assert r.returncode == 2 and "is not a bpfdsl pin dir" in r.stderr
    assert "rm -r" not in r.stderr
    assert os.listdir(pin_dir) == ["theirs"]


def test_rejected_program_exit_1_with_source_line_and_no_pins(pin_dir):
    r = _run("load", str(build("reject_bounds")), "--pin-dir", pin_dir)
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert "reject_bounds.c:13" in r.stderr and "outside of the packet" in r.stderr
    assert not os.path.exists(pin_dir)
    r = _run("load", str(build("reject_bounds")), "--pin-dir", pin_dir, "--log")
    assert "processed 2 insns" in r.stderr


@pytest.mark.parametrize(
    ("fixture", "code", "text"),
    [
        ("legacy_maps", 2, "legacy 'maps' section"),
        ("no_license", 1, "no license"),
    ],
)
def test_bad_objects_clear_errors(pin_dir, fixture, code, text):
    r = _run("load", str(build(fixture)), "--pin-dir", pin_dir)
    assert r.returncode == code and text in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(pin_dir)


def test_unknown_config_and_missing_file(pin_dir, tmp_path):
    r = _run("load", str(build("compat_maps")), "--pin-dir", pin_dir, "--set", "nope=1")
    assert r.returncode == 2 and "magic, min_len, tag, verdict" in r.stderr
    r = _run("load", str(tmp_path / "missing.o"))
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_unload_detaches_pinned_xdp_link():
    with veth_net("ld") as net:
        d = bpffs_dir("bdcli_")
        try:
            r = net.bpfdsl("load", str(build("xdp_drop")), "--pin-dir", d)
            assert r.returncode == 0, r.stderr
            r = net.bpfdsl("attach", d, "--dev", net.xdp_dev, "--mode", "generic")
            assert r.returncode == 0, r.stderr
            links = [f for f in os.listdir(d) if f.startswith("link")]
            assert links, os.listdir(d)
            ip = subprocess.run(
                ["ip", "-n", net.xdp_ns, "link", "show", net.xdp_dev],
                capture_output=True,
                text=True,
            ).stdout
            assert "xdp" in ip
            r = net.bpfdsl("unload", d)
            assert r.returncode == 0, r.stderr
            assert not os.path.exists(d)
            ip = subprocess.run(
                ["ip", "-n", net.xdp_ns, "link", "show", net.xdp_dev],
                capture_output=True,
                text=True,
            ).stdout
            assert "xdp" not in ip
        finally:
            shutil.rmtree(d, ignore_errors=True)


def test_manifest_is_a_symlink_bpffs_accepts(pin_dir):
    assert main(["load", str(build("xdp_pass")), "--pin-dir", pin_dir]) == 0
    assert os.path.islink(os.path.join(pin_dir, MANIFEST))
    assert main(["unload", pin_dir]) == 0


def test_without_privileges_one_line_exit_3(pin_dir):
    if shutil.which("capsh") is None:
        pytest.skip("capsh not installed")
    cmd = f"{sys.executable} -m bpfdsl load {build('xdp_pass')} --pin-dir {pin_dir}"
    r = subprocess.run(
        ["capsh", "--drop=cap_bpf,cap_sys_admin,cap_net_admin,cap_perfmon", "--", "-c", cmd],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "needs root (CAP_BPF + CAP_NET_ADMIN" in r.stderr
    assert not os.path.exists(pin_dir)


@pytest.mark.kernel
def test_pin_dir_with_dot_is_a_usage_error(tmp_path):
    src = tmp_path / "p.bpfd"
    src.write_text('license "GPL"\nxdp fn f(ctx) { return XDP_PASS }\n')
    pin = f"/sys/fs/bpf/rv{uuid.uuid4().hex[:8]}.x"
    try:
        r = _run("load", str(src), "--pin-dir", pin)
        out = r.stdout + r.stderr
        assert r.returncode == 2, out
        assert "Errno" not in out
        assert "'.'" in out or "dot" in out
    finally:
        if os.path.isdir(pin):
            _run("unload", pin)
