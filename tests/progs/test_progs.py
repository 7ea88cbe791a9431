"""Every progs/*.bpfd compiles, and the kernel, bpftool (libbpf) and iproute2 accept it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from support.paths import PROGS

from bpfdsl.compiler import compile_file

ALL = sorted(p.name for p in PROGS.glob("*.bpfd"))


@pytest.fixture(scope="module")
def objects(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("objs")
    objs = {}
    for name in ALL:
        res = compile_file(PROGS / name)
        path = out / (Path(name).stem + ".o")
        path.write_bytes(res.obj)
        objs[name] = path
    return objs


@pytest.mark.parametrize("name", ALL)
def test_compile_prog(name):
    res = compile_file(PROGS / name, stats=True)
    assert res.obj[:4] == b"\x7fELF"
    assert int.from_bytes(res.obj[18:20], "little") == 247  # EM_BPF
    assert res.programs, "a prog file defines at least one program"
    assert [s.name for s in res.stats] == res.programs
    assert all(0 < s.insns < 4096 and 0 <= s.stack <= 512 for s in res.stats)


@pytest.mark.kernel
@pytest.mark.parametrize("name", ALL)
def test_kernel_accepts_prog(name, objects):
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(objects[name])
    with load_collection(spec) as coll:
        assert set(coll.programs) == set(compile_file(PROGS / name).programs)
        assert all(int(p.fd) >= 0 for p in coll.programs.values())


@pytest.mark.kernel
@pytest.mark.parametrize("name", ALL)
def test_bpftool_loadall_prog(name, objects):
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool not installed")
    from support.netns import bpffs_dir

    pin = bpffs_dir("bdcc_")
    try:
        r = subprocess.run(
            ["bpftool", "prog", "loadall", str(objects[name]), pin],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert Path(pin).is_dir() and any(Path(pin).iterdir())
    finally:
        shutil.rmtree(pin, ignore_errors=True)


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["xdp_udp_filter.bpfd", "xdp_acl.bpfd", "xdp_reflect.bpfd"])
def test_ip_link_attaches_prog(name, objects):
    """iproute2 loads the object itself (its own libbpf path) and attaches it to a veth."""
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed")
    from support.netns import veth_net

    from bpfdsl.kernel import netlink

    with veth_net("cc") as net:
        with netlink.in_netns(net.xdp_ns):
            r = subprocess.run(
                [
                    "ip",
                    "link",
                    "set",
                    "dev",
                    net.xdp_dev,
                    "xdp",
                    "obj",
                    str(objects[name]),
                    "sec",
                    "xdp",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            show = subprocess.run(
                ["ip", "link", "show", "dev", net.xdp_dev],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout
            assert "prog/xdp" in show
            subprocess.run(
                ["ip", "link", "set", "dev", net.xdp_dev, "xdp", "off"],
                capture_output=True,
                timeout=30,
            )


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["xdp_udp_filter.bpfd", "xdp_reflect.bpfd"])
def test_xdp_loader_attaches_prog(name, objects):
    """xdp-tools' xdp-loader (libxdp) loads and attaches the object too."""
    if shutil.which("xdp-loader") is None:
        pytest.skip("xdp-loader not installed")
    from support.netns import veth_net

    from bpfdsl.kernel import netlink

    stem = Path(name).stem.removeprefix("xdp_")
    with veth_net("cl") as net, netlink.in_netns(net.xdp_ns):
        try:
            r = subprocess.run(
                ["xdp-loader", "load", "-m", "skb", net.xdp_dev, str(objects[name])],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            status = subprocess.run(
                ["xdp-loader", "status", net.xdp_dev], capture_output=True, text=True, timeout=60
            ).stdout
            assert stem in status
        finally:
            subprocess.run(
                ["xdp-loader", "unload", "--all", net.xdp_dev], capture_output=True, timeout=60
            )


@pytest.mark.kernel
@pytest.mark.parametrize("mcpu", ["v1", "v2", "v4"])
def test_kernel_accepts_every_prog_at_other_isa_levels(mcpu):
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    for name in ALL:
        with load_collection(read_object(compile_file(PROGS / name, mcpu=mcpu).obj)) as coll:
            assert coll.programs, name
