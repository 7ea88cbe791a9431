"""Values given on the command line never wrap: ``--set`` configs (bpfdsl.obj.config) and
``bpfdsl map update`` refuse a value outside the type it fills, naming the type's range
(exit 2, nothing pinned), take addresses where the BTF type is an address, and a bad
``--set`` item is a usage error listing the configs of the object."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from support.netns import bpffs_dir
from support.paths import PROGS, ROOT

from bpfdsl.compiler import compile_source
from bpfdsl.obj import collection as objfile
from bpfdsl.obj.config import ConfigError, config_bytes

FLOWS = """license "GPL"
struct flow { saddr: be32, daddr: be32, sport: be16, dport: be16, proto: u8 }
map flows: hash<flow, u64>(max_entries: 64)
map seen6: hash<ipv6_addr, u64>(max_entries: 4)
config c: u8 = 1
config s: i8 = 2
config p: be16 = 53
config a: be32 = 10.0.0.1

xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        seen6[ip6.saddr] += 1
        return XDP_PASS
    }
    let ip = parse ipv4 else { return XDP_PASS }
    let k = flow(saddr: ip.saddr, daddr: ip.daddr, sport: p, dport: be16(0), proto: ip.protocol)
    flows[k] += 1
    if ip.saddr == a && ip.protocol == c && s > 0 { return XDP_DROP }
    return XDP_PASS
}
"""


def bpfdsl(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def flows_obj():
    d = tempfile.mkdtemp(prefix="bpfdsl_review_")
    path = os.path.join(d, "flows.o")
    with open(path, "wb") as f:
        f.write(compile_source(FLOWS, "flows.bpfd").obj)
    try:
        yield path
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def pin_dir():
    d = bpffs_dir("bdrev_")
    try:
        yield d
    finally:
        if os.path.lexists(d):
            bpfdsl("unload", d)
        shutil.rmtree(d, ignore_errors=True)


# ---- 8: --set and map update refuse values outside the type (no wrapping) -------------


@pytest.mark.parametrize(
    "name,value,text",
    [
        ("c", "-1", "-1 does not fit in u8 (0..255)"),
        ("c", "256", "256 does not fit in u8 (0..255)"),
        ("s", "200", "200 does not fit in i8 (-128..127)"),
        ("p", "-1", "-1 does not fit in be16 (0..65535)"),
        ("a", "-1", "-1 does not fit in be32 (0..4294967295)"),
    ],
)
def test_config_out_of_range_is_refused(flows_obj, name, value, text):
    spec = objfile.read_object(flows_obj)
    with pytest.raises(ConfigError) as ei:
        config_bytes(spec, name, value)
    assert ei.value.exit_code == 2
    assert ei.value.diagnostics[0].message == f"config '{name}': {text}"


def test_config_edges_and_address_literal(flows_obj):
    spec = objfile.read_object(flows_obj)
    assert config_bytes(spec, "s", "-128") == b"\x80"
    assert config_bytes(spec, "c", "255") == b"\xff"
    assert config_bytes(spec, "p", "65535") == b"\xff\xff"
    assert config_bytes(spec, "a", "10.1.2.3") == bytes([10, 1, 2, 3])


@pytest.mark.kernel
def test_load_set_negative_exit_2_nothing_pinned(flows_obj, pin_dir):
    r = bpfdsl("load", flows_obj, "--pin-dir", pin_dir, "--set", "c=-1")
    assert r.returncode == 2, r.stderr
    assert "config 'c': -1 does not fit in u8 (0..255)" in r.stderr
    assert not os.path.exists(pin_dir)


@pytest.mark.kernel
def test_map_update_refuses_wrap_takes_addresses_and_shows_them(flows_obj, pin_dir):
    assert bpfdsl("load", flows_obj, "--pin-dir", pin_dir).returncode == 0
    r = bpfdsl("map", "update", f"{pin_dir}:flows", '{"saddr": "1.2.3.4"}', "-1")
    assert r.returncode == 2 and "does not fit in u64 (0..18446744073709551615)" in r.stderr
    assert "map 'flows'" in r.stderr
    r = bpfdsl("map", "update", f"{pin_dir}:flows", '{"saddr": "1.2.3.4", "proto": 300}', "1")
    assert r.returncode == 2 and "300 does not fit in u8 (0..255)" in r.stderr
    key = '{"saddr": "1.2.3.4", "daddr": "10.0.0.2", "sport": 53}'
    r = bpfdsl("map", "update", f"{pin_dir}:flows", key, "3")
    assert r.returncode == 0, r.stderr
    r = bpfdsl("-j", "map", "dump", f"{pin_dir}:flows")
    entries = json.loads(r.stdout)["entries"]
    assert entries == [
        {
            "key": {"saddr": "1.2.3.4", "daddr": "10.0.0.2", "sport": 53, "dport": 0, "proto": 0},
            "value": 3,
        }
    ]
    r = bpfdsl("map", "update", f"{pin_dir}:seen6", "fd00::1", "7")
    assert r.returncode == 0, r.stderr
    r = bpfdsl("-j", "map", "dump", f"{pin_dir}:seen6")
    key = json.loads(r.stdout)["entries"][0]["key"]
    assert key == "fd00::1"  # an ipv6_addr key prints as an address (BTF typedef ipv6_addr)


@pytest.mark.kernel
def test_map_without_btf_takes_integers(pin_dir):
    r = bpfdsl("load", str(PROGS / "xdp_cpumap_steer.bpfd"), "--pin-dir", pin_dir)
    assert r.returncode == 0, r.stderr
    r = bpfdsl("-j", "map", "update", f"{pin_dir}:cpu_map", "0", "5")
    assert r.returncode == 0, r.stderr
    r = bpfdsl("-j", "map", "lookup", f"{pin_dir}:cpu_map", "0")
    assert json.loads(r.stdout)["value"] == "05 00 00 00 00 00 00 00"  # qsize 5, no program
    r = bpfdsl("map", "update", f"{pin_dir}:cpu_map", "0", "-1")
    assert r.returncode == 2 and "-1 does not fit in 8 bytes" in r.stderr
    assert "fromhex" not in r.stderr


# ---- 11, 16: errors name the file; --set errors are usage errors listing the configs --


@pytest.mark.parametrize("item", ["nosuch=1", "x"])
def test_bad_set_items_exit_2_listing_configs(flows_obj, item):
    r = bpfdsl("run", flows_obj, "--hex", "00" * 60, "--set", item)
    assert r.returncode == 2, r.stderr
    assert "configs of this object: a, c, p, s" in r.stderr and "Traceback" not in r.stderr


# ---- 12: attach of other kinds says only xdp --------------------------------------------


# ---- 13: without privileges: one line, exit 3 ------------------------------------------


# ---- 14: unload never advises removing bpffs roots -------------------------------------


# ---- 18: run input checks ---------------------------------------------------------------


# ---- 19: attach of an object says what it pinned; detach and unload clean up ------------
