"""XDP attach, verdicts on real traffic, detach, show, unload, and CLI errors (veths in test
netns); without privileges a command says so in one line (exit 3)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from support.netns import bpffs_dir, veth_net
from support.paths import PROGS, ROOT

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
    assert r.returncode == 3
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


# ---- attach of an object file, detach and unload; privileges ----


def test_attach_tc_says_only_xdp():
    r = bpfdsl("attach", "tc", "/sys/fs/bpf/nothing_here", "--dev", "lo")
    assert r.returncode == 2
    assert "only XDP" in r.stderr and "two interfaces" not in r.stderr


def _as_nobody(argv: list[str]) -> tuple[int, str]:
    """Run the CLI in a forked child with uid/gid 65534 (modules imported beforehand:
    the interpreter's own tree may not be readable by nobody)."""
    import bpfdsl.cli.attach_cmds
    import bpfdsl.cli.load_cmds
    import bpfdsl.runtime.inventory
    import bpfdsl.runtime.pins  # noqa: F401
    from bpfdsl.cli import main

    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # child: never returns into pytest
            code = 99
            try:
                sys.stdout = open(os.devnull, "w")
                sys.stderr = open(os.dup(err.fileno()), "w")
                os.setgroups([])
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                code = main(argv)
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        err.seek(0)
        return os.waitstatus_to_exitcode(status), err.read().decode()


@pytest.mark.kernel
def test_not_root_attach_and_unload_one_line_exit_3(pin_dir):
    assert bpfdsl("load", str(PROGS / "xdp_pass.bpfd"), "--pin-dir", pin_dir).returncode == 0
    for argv in (["attach", "xdp", pin_dir, "--dev", "lo"], ["unload", pin_dir]):
        code, err = _as_nobody(argv)
        assert code == 3, (argv, err)
        assert err.count("\n") == 1 and "needs root (CAP_BPF + CAP_NET_ADMIN" in err, err
        assert "Errno" not in err and "no program pinned" not in err
    assert os.path.isdir(os.path.join(pin_dir, "progs"))  # nothing was removed


@pytest.mark.kernel
@pytest.mark.parametrize("root", ["/sys/fs/bpf", "/sys/fs/bpf/bpfdsl"])
def test_unload_of_bpffs_roots_refused_without_rm_advice(root):
    made = not os.path.isdir(root)  # a fresh machine has no /sys/fs/bpf/bpfdsl yet
    if made:
        os.mkdir(root)
    try:
        before = sorted(os.listdir(root))
        r = bpfdsl("unload", root)
        assert r.returncode == 2 and "is not a bpfdsl pin dir" in r.stderr
        assert "rm " not in r.stderr and "remove it yourself" not in r.stderr
        assert set(before) <= set(os.listdir(root))
    finally:
        if made:
            os.rmdir(root)


@pytest.mark.kernel
@pytest.mark.parametrize("via", ["link", "netlink"])
def test_attach_object_prints_pins_detach_removes_them(via):
    with veth_net("rv") as net:
        d = bpffs_dir("bdrev_")
        try:
            extra = ["--netlink"] if via == "netlink" else []
            r = net.bpfdsl(
                "attach", "xdp", str(PROGS / "xdp_pass.bpfd"), "--dev", net.xdp_dev,
                "--mode", "generic", "--pin-dir", d, *extra,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
            assert f"pinned under {d}" in r.stdout and os.path.isdir(f"{d}/progs")
            show = json.loads(net.bpfdsl("-j", "show").stdout)
            att = [a for a in show["attachments"] if a["dev"] == net.xdp_dev]
            assert len(att) == 1 and att[0]["method"] == via
            r = net.bpfdsl("detach", net.xdp_dev)
            assert r.returncode == 0, r.stderr
            assert f"removed {d}" in r.stdout and not os.path.exists(d)
        finally:
            if os.path.exists(d):
                bpfdsl("unload", d)


@pytest.mark.kernel
def test_detach_keeps_load_pins_and_unload_says_it_detached():
    with veth_net("rv") as net:
        d = bpffs_dir("bdrev_")
        try:
            assert net.bpfdsl("load", str(PROGS / "xdp_pass.bpfd"), "--pin-dir", d).returncode == 0
            r = net.bpfdsl("attach", d, net.xdp_dev, "--mode", "generic")
            assert r.returncode == 0, r.stderr
            r = net.bpfdsl("detach", net.xdp_dev)
            assert r.returncode == 0 and f"still pinned: {d}" in r.stdout
            assert os.path.isdir(f"{d}/progs")
            assert net.bpfdsl("attach", d, net.xdp_dev, "--mode", "generic").returncode == 0
            r = net.bpfdsl("unload", d)
            assert r.returncode == 0, r.stderr
            assert f"detached XDP on {net.xdp_dev}" in r.stdout and not os.path.exists(d)
        finally:
            if os.path.exists(d):
                bpfdsl("unload", d)


def test_show_without_privileges_says_so():
    """`bpfdsl show` as nobody: one line naming what it needs, exit 3 (not an empty list)."""
    code, err = _as_nobody(["show"])
    assert code == 3, err
    assert err.count("\n") == 1 and "needs root" in err and "sudo bpfdsl show" in err
