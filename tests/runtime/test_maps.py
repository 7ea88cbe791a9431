"""``bpfdsl map``: keys and values read and written by their BTF types, on pinned maps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from support.netns import bpffs_dir
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.kernel import syscall


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def jrun(*args: str):
    r = bpfdsl("-j", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture
def pinned():
    """compat_maps.o (hash, array, percpu maps, .rodata) loaded and pinned by `bpfdsl load`."""
    d = bpffs_dir("bpfdsl_maps_")
    r = bpfdsl("load", str(build("compat_maps")), "--pin-dir", d, "--set", "min_len=77")
    assert r.returncode == 0, r.stderr
    try:
        yield d
    finally:
        bpfdsl("unload", d)
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.kernel
def test_map_update_lookup_delete_hash(pinned):
    m = f"{pinned}:by_proto"
    assert jrun("map", "update", m, "0x0800", "7") == {"key": 2048, "value": 7}
    assert jrun("map", "lookup", m, "2048") == {"key": 2048, "value": 7, "found": True}
    assert jrun("map", "dump", m)["entries"] == [{"key": 2048, "value": 7}]
    assert jrun("map", "delete", m, "2048")["deleted"] is True
    for cmd in ("lookup", "delete"):  # a missing key: an error on stderr, nothing on stdout
        r = bpfdsl("map", cmd, m, "2048")
        assert r.returncode == 1 and r.stdout == "", r.stdout
        assert f"error[key-not-found]: {m}: no entry for key 2048" in r.stderr
        r = bpfdsl("--json", "map", cmd, m, "2048")
        assert r.returncode == 1 and r.stderr == ""
        assert json.loads(r.stdout)["error"][0]["code"] == "key-not-found"
    # noexist on an existing key is refused with a reason, not a traceback
    jrun("map", "update", m, "1", "1")
    r = bpfdsl("map", "update", m, "1", "2", "--flags", "noexist")
    assert r.returncode == 1 and "exists" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.kernel
def test_map_percpu_values_per_cpu_and_sum(pinned):
    m = f"{pinned}:pkts"
    jrun("map", "update", m, "0", "5")
    ncpu = syscall.possible_cpus()
    per_cpu = jrun("map", "dump", m)["entries"]
    assert per_cpu == [{"key": 0, "value": [5] * ncpu}]
    assert jrun("map", "dump", m, "--sum")["entries"] == [{"key": 0, "value": 5 * ncpu}]


@pytest.mark.kernel
def test_map_rodata_struct_fields(pinned):
    d = jrun("map", "dump", f"{pinned}:rodata")
    (entry,) = d["entries"]
    assert entry["key"] == 0
    assert entry["value"]["min_len"] == 77  # the --set value, printed as a field


@pytest.mark.kernel
def test_map_errors_are_clear(pinned):
    r = bpfdsl("map", "dump", f"{pinned}:nope")
    assert r.returncode == 2 and "no map 'nope'" in r.stderr and "by_proto" in r.stderr
    r = bpfdsl("map", "update", f"{pinned}:pkts", "0", "zz")
    assert r.returncode == 2 and "bad value" in r.stderr
    r = bpfdsl("map", "delete", f"{pinned}:pkts", "0")
    assert r.returncode == 1 and "array maps cannot delete" in r.stderr
    r = bpfdsl("map", "dump", pinned)
    assert r.returncode == 2 and f"{pinned}:NAME" in r.stderr
    assert os.path.isdir(pinned)


@pytest.mark.kernel
def test_map_update_changes_live_verdicts_lpm_ip_keys():
    """IPs/prefixes as text in and out; an entry added from the CLI blocks real traffic."""
    from support.netns import veth_net

    d = bpffs_dir("bpfdsl_acl_")
    with veth_net("bm") as net:
        try:
            r = net.bpfdsl(
                "attach",
                "xdp",
                str(ROOT / "progs" / "xdp_acl.bpfd"),
                "--dev",
                net.xdp_dev,
                "--pin-dir",
                d,
            )
            assert r.returncode == 0, r.stderr
            prefix = f"{net.peer_ip.rsplit('.', 1)[0]}.0/24"
            with net.udp_receiver(6000) as rx:
                net.send_udp(6000, 10)
                assert rx.drain() == 10
                assert jrun("map", "update", f"{d}:v4_block", prefix, "1")["key"] == prefix
                assert jrun("map", "dump", f"{d}:v4_block")["entries"] == [
                    {"key": prefix, "value": 1}
                ]
                net.send_udp(6000, 10)
                assert rx.drain() == 0
                assert jrun("map", "dump", f"{d}:dropped", "--sum")["entries"][0] == {
                    "key": 0,
                    "value": 10,
                }
                assert jrun("map", "delete", f"{d}:v4_block", prefix)["deleted"] is True
                net.send_udp(6000, 10)
                assert rx.drain() == 10
        finally:
            net.bpfdsl("detach", net.xdp_dev)
            bpfdsl("unload", d)
            shutil.rmtree(d, ignore_errors=True)
