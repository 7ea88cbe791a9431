"""XDP attach, verdicts on real traffic, detach, show, and CLI errors (veths in test netns)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.netns import bpffs_dir, veth_net
from support.paths import ROOT

from bpfdsl.kernel import netlink
from bpfdsl.runtime import attach

FILTER = ROOT / "progs" / "xdp_udp_filter.bpfd"


def bpfdsl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def net():
    with veth_net("ba") as n:
        yield n


@pytest.fixture
def pin_dir():
    d = bpffs_dir()
    try:
        yield d
    finally:
        if os.path.lexists(d):
            bpfdsl("unload", d)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.kernel
def test_attach_filter_verdicts_counters_detach(net, pin_dir):
    r = net.bpfdsl(
        "attach",
        "xdp",
        str(FILTER),
        "--dev",
        net.xdp_dev,
        "--pin-dir",
        pin_dir,
        "--set",
        "port=7000",
    )
    assert r.returncode == 0, r.stderr
    assert os.path.exists(attach.link_pin_path(pin_dir, net.xdp_dev))
    with net.udp_receiver(7000) as blocked, net.udp_receiver(7001) as allowed:
        assert net.send_udp(7000, 30) == 30
        assert net.send_udp(7001, 25) == 25
        assert blocked.drain() == 0
        assert allowed.drain() == 25
        dump = bpfdsl("-j", "map", "dump", f"{pin_dir}:drops", "--sum")
        assert dump.returncode == 0, dump.stderr
        assert json.loads(dump.stdout)["entries"] == [{"key": 0, "value": 30}]
        # the link is pinned: the program stays attached after the CLI exited
        with net.in_xdp_ns():
            cur = attach.xdp_attachment(net.xdp_dev)
        assert cur is not None and cur.method == "link" and cur.mode == "native"
        d = net.bpfdsl("detach", "--dev", net.xdp_dev)
        assert d.returncode == 0, d.stderr
        assert not os.path.exists(attach.link_pin_path(pin_dir, net.xdp_dev))
        # attach loaded the object itself: detach removes what it pinned (issue 3, #19)
        assert f"removed {pin_dir}" in d.stdout and not os.path.exists(pin_dir)
        assert net.send_udp(7000, 10) == 10
        assert blocked.drain() == 10  # no filter any more
    with net.in_xdp_ns():
        assert netlink.xdp_state(netlink.ifindex(net.xdp_dev)).mode is None


@pytest.mark.kernel
def test_attach_generic_netlink_and_show(net, pin_dir):
    r = net.bpfdsl("load", str(FILTER), "--pin-dir", pin_dir)
    assert r.returncode == 0, r.stderr
    a = net.bpfdsl(
        "-j", "attach", "xdp", pin_dir, "--dev", net.xdp_dev, "--mode", "generic", "--netlink"
    )
    assert a.returncode == 0, a.stderr
    info = json.loads(a.stdout)
    assert info["method"] == "netlink" and info["mode"] == "generic"
    s = net.bpfdsl("-j", "show")
    assert s.returncode == 0, s.stderr
    shown = json.loads(s.stdout)
    att = [x for x in shown["attachments"] if x["dev"] == net.xdp_dev]
    assert att and att[0]["prog_id"] == info["prog_id"] and att[0]["mode"] == "generic"
    assert any(d["dir"].startswith(pin_dir) for d in shown["pins"])
    with net.udp_receiver(9999) as blocked:
        net.send_udp(9999, 10)
        assert blocked.drain() == 0
    # a replace keeps the mode: asking for another one is refused, nothing changes
    r = net.bpfdsl("attach", "xdp", pin_dir, "--dev", net.xdp_dev)
    assert r.returncode == 1 and "generic mode, not native" in r.stderr
    r = net.bpfdsl("-j", "attach", "xdp", pin_dir, "--dev", net.xdp_dev, "--mode", "generic")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["method"] == "netlink"  # replaced in place (REPLACE + expected fd)
    assert net.bpfdsl("detach", net.xdp_dev).returncode == 0
    with net.in_xdp_ns():
        assert attach.xdp_attachment(net.xdp_dev) is None


@pytest.mark.kernel
def test_attach_refuses_occupied_without_replace(net, pin_dir):
    assert net.bpfdsl("attach", str(FILTER), net.xdp_dev, "--pin-dir", pin_dir).returncode == 0
    r = net.bpfdsl("attach", str(FILTER), net.xdp_dev, "--pin-dir", pin_dir + "_2", "--no-replace")
    assert r.returncode == 1
    assert "already has XDP program" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(pin_dir + "_2")  # the failed attach left no pins
    assert net.bpfdsl("detach", net.xdp_dev).returncode == 0


@pytest.mark.kernel
def test_attach_unknown_interface_is_clear(pin_dir):
    r = bpfdsl("attach", "xdp", str(FILTER), "--dev", "nosuchdev0", "--pin-dir", pin_dir)
    assert r.returncode == 1
    assert "no network interface named 'nosuchdev0'" in r.stderr
    assert "Traceback" not in r.stderr
    assert not os.path.exists(pin_dir)


def test_attach_offload_refused():
    r = bpfdsl("attach", "xdp", str(FILTER), "--dev", "lo", "--mode", "offload")
    assert r.returncode == 2
    assert "offload" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.kernel
def test_objects_of_ours_load_with_bpftool_and_xdp_loader(net, tmp_path):
    for tool in ("bpftool", "xdp-loader"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    obj = tmp_path / "xdp_udp_filter.o"
    c = bpfdsl("compile", str(FILTER), "-o", str(obj))
    assert c.returncode == 0, c.stderr
    d = bpffs_dir("bpfdsl_bt_")
    try:
        r = subprocess.run(
            ["bpftool", "prog", "loadall", str(obj), d], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        assert os.listdir(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    load = subprocess.run(
        net.nsenter("xdp-loader", "load", "-m", "skb", "-s", "xdp", net.xdp_dev, str(obj)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    try:
        assert load.returncode == 0, load.stderr
        with net.udp_receiver(9999) as blocked, net.udp_receiver(9998) as allowed:
            net.send_udp(9999, 10)
            net.send_udp(9998, 10)
            assert blocked.drain() == 0 and allowed.drain() == 10
    finally:
        subprocess.run(
            net.nsenter("xdp-loader", "unload", net.xdp_dev, "--all"),
            capture_output=True,
            timeout=60,
        )


@pytest.mark.kernel
def test_attach_cpumap_program_to_interface_is_refused(net, pin_dir):
    from support.objbuild import build

    obj = str(build("xdp_cpumap_steer"))
    r = net.bpfdsl(
        "attach", "xdp", obj, "--prog", "on_cpu", "--dev", net.xdp_dev, "--pin-dir", pin_dir
    )
    assert r.returncode == 1 and "cpumap" in r.stderr and "Traceback" not in r.stderr
    assert not os.path.exists(pin_dir)
    # the same from a pinned program: the kernel's EINVAL is explained, not shown bare
    assert net.bpfdsl("load", obj, "--pin-dir", pin_dir).returncode == 0
    r = net.bpfdsl("attach", f"{pin_dir}/progs/on_cpu", net.xdp_dev)
    assert r.returncode == 1 and "cpumap" in r.stderr and "Traceback" not in r.stderr
    with net.in_xdp_ns():
        assert attach.xdp_attachment(net.xdp_dev) is None
