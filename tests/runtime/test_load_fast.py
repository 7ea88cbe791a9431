"""The one-process load + pin + attach (`bpfdsl attach xdp FILE.o --dev --pin-dir`) works on a
veth in a test namespace, and its import graph holds none of the packages it does not use
(pyroute2, pyelftools, llvmlite, lark, rich, scapy) and none of the modules of other paths
(compiler, checker, interpreter, test runs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from support.netns import bpffs_dir, veth_net
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.kernel import syscall
from bpfdsl.runtime import attach

FILTER = ROOT / "progs" / "xdp_udp_filter.bpfd"
PROG = "udp_filter"  # the program of progs/xdp_udp_filter.bpfd and its clang twin

# What the load + pin + attach path must never import (top-level package, or exact module).
HEAVY_PACKAGES = {"pyroute2", "elftools", "llvmlite", "lark", "rich", "scapy"}
OTHER_PATHS = {
    "bpfdsl.compiler",
    "bpfdsl.lang.parser",
    "bpfdsl.lang.sema.analyzer",
    "bpfdsl.backend.codegen.generator",
    "bpfdsl.backend.target",
    "bpfdsl.checker",
    "bpfdsl.interp",
    "bpfdsl.runtime.testrun",
    "bpfdsl.runtime.mapview",
    "bpfdsl.runtime.packets",
}
# The modules of the path (what `bpfdsl attach FILE.o` runs through).
PATH_MODULES = (
    "bpfdsl.cli.attach_cmds",
    "bpfdsl.cli.load_cmds",
    "bpfdsl.runtime.inventory",
    "bpfdsl.runtime.attach",
    "bpfdsl.kernel.netlink",
    "bpfdsl.kernel.syscall",
    "bpfdsl.runtime.loader",
    "bpfdsl.runtime.pins",
    "bpfdsl.obj.collection",
    "bpfdsl.obj.elf",
    "bpfdsl.obj.maps",
    "bpfdsl.obj.link",
    "bpfdsl.abi.btf.core",
    "bpfdsl.abi.btf.ext",
    "bpfdsl.abi.commands",
    "bpfdsl.abi.flags",
    "bpfdsl.abi.map_types",
    "bpfdsl.abi.prog_types",
    "bpfdsl.abi.bpf_attr",
)
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \|\s*(\S+)")


def imported(argv: list[str], prefix: tuple[str, ...] = ()) -> set[str]:
    """Modules ``python -X importtime ARGV`` (run after ``prefix``, e.g. an nsenter)
    imports beyond a bare ``python -c pass`` (same interpreter and environment, so site's
    own imports cancel out)."""

    def run(args: list[str]) -> set[str]:
        proc = subprocess.run(
            [*prefix, sys.executable, "-X", "importtime", *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return set(_IMPORT_LINE.findall(proc.stderr))

    return run(argv) - run(["-c", "pass"])


def forbidden(mods: set[str]) -> list[str]:
    return sorted(
        m
        for m in mods
        if m.split(".")[0] in HEAVY_PACKAGES
        or any(m == o or m.startswith(o + ".") or m.startswith(o + "_") for o in OTHER_PATHS)
    )


def test_load_path_imports_nothing_heavy():
    """Importing every module of the path pulls in none of the forbidden modules."""
    mods = imported(["-c", "import " + ", ".join(PATH_MODULES)])
    assert "bpfdsl.runtime.loader" in mods and "bpfdsl.obj.link" in mods  # the probe works
    assert forbidden(mods) == []


@pytest.fixture
def net():
    with veth_net("lf") as n:
        yield n


@pytest.fixture
def pin_dir():
    d = bpffs_dir("bpfdsl_lfast_")
    try:
        yield d
    finally:  # removing the pins releases the link too (and the namespace goes with `net`)
        shutil.rmtree(d, ignore_errors=True)


def object_file(which: str, tmp_path) -> str:
    """``progs/xdp_udp_filter.bpfd`` compiled by bpfdsl, or its clang-19 twin."""
    if which == "clang":
        return str(build("xdp_udp_filter"))
    from bpfdsl.compiler import compile_file

    out = tmp_path / "xdp_udp_filter.o"
    out.write_bytes(compile_file(str(FILTER)).obj)
    return str(out)


@pytest.mark.kernel
@pytest.mark.parametrize("which", ["bpfdsl", "clang"])
def test_one_process_attach_object_pins_attaches_filters(net, pin_dir, tmp_path, which):
    obj = object_file(which, tmp_path)
    r = net.bpfdsl("attach", "xdp", obj, "--dev", net.xdp_dev, "--pin-dir", pin_dir, "--prog", PROG)
    assert r.returncode == 0, r.stderr
    assert f"attached {PROG}" in r.stdout and "via link" in r.stdout
    # pinned: the program, its maps and the link, under the pin dir
    prog_pin = os.path.join(pin_dir, "progs", PROG)
    link_pin = attach.link_pin_path(pin_dir, net.xdp_dev)
    assert os.path.exists(prog_pin) and os.path.exists(link_pin)
    assert os.path.exists(os.path.join(pin_dir, "maps", "drops"))
    # attached: the program XDP runs on the device is the pinned one, through that link
    with syscall.obj_get(prog_pin) as fd:
        pinned_id = int(syscall.prog_info(fd).id)
    with syscall.obj_get(link_pin) as fd:
        link = syscall.link_info(fd)
    with net.in_xdp_ns():
        cur = attach.xdp_attachment(net.xdp_dev)
    assert cur is not None and cur.prog_id == pinned_id and cur.method == "link"
    assert int(link.prog_id) == pinned_id and cur.link_id == int(link.id)
    # gets packets: UDP to the default port 9999 is dropped and counted, 9998 passes
    with net.udp_receiver(9999) as blocked, net.udp_receiver(9998) as allowed:
        assert net.send_udp(9999, 20) == 20
        assert net.send_udp(9998, 15) == 15
        assert blocked.drain() == 0
        assert allowed.drain() == 15
    dump = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "-j", "map", "dump", f"{pin_dir}:drops", "--sum"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert dump.returncode == 0, dump.stderr
    assert json.loads(dump.stdout)["entries"] == [{"key": 0, "value": 20}]
    d = net.bpfdsl("detach", net.xdp_dev)
    assert d.returncode == 0, d.stderr
    assert not os.path.exists(pin_dir)  # attach pinned it, detach removed it
    with net.in_xdp_ns():
        assert attach.xdp_attachment(net.xdp_dev) is None


@pytest.mark.kernel
def test_one_process_attach_import_graph(net, pin_dir):
    """The real command (load + pin + attach of an object, in a test namespace) imports
    none of the forbidden modules."""
    obj = str(build("xdp_udp_filter"))
    argv = ["attach", "xdp", obj, "--dev", net.xdp_dev, "--pin-dir", pin_dir]
    code = f"import sys; from bpfdsl.cli import main; sys.exit(main({argv!r}))"
    mods = imported(["-c", code], prefix=tuple(net.nsenter()))
    assert (
        "bpfdsl.runtime.loader" in mods and "bpfdsl.runtime.attach" in mods
    )  # it did load and attach
    assert os.path.exists(attach.link_pin_path(pin_dir, net.xdp_dev))
    assert forbidden(mods) == []
    assert net.bpfdsl("detach", net.xdp_dev).returncode == 0


@pytest.mark.kernel
def test_two_process_load_then_attach_import_graph(net, pin_dir):
    """`bpfdsl load OBJ --pin-dir DIR` and `bpfdsl attach xdp DIR --dev DEV` (the
    two-process form) import none of the forbidden modules either."""
    obj = str(build("xdp_udp_filter"))
    steps = (
        ["load", obj, "--pin-dir", pin_dir],
        ["attach", "xdp", pin_dir, "--dev", net.xdp_dev, "--prog", PROG],
    )
    for argv in steps:
        code = f"import sys; from bpfdsl.cli import main; sys.exit(main({argv!r}))"
        mods = imported(["-c", code], prefix=tuple(net.nsenter()))
        assert "bpfdsl.kernel.syscall" in mods and forbidden(mods) == [], argv
    assert os.path.exists(attach.link_pin_path(pin_dir, net.xdp_dev))
    assert net.bpfdsl("detach", net.xdp_dev).returncode == 0
    assert net.bpfdsl("unload", pin_dir).returncode == 0
