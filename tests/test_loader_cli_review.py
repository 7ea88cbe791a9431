"""Issue 3 new-user review of load / attach / map / run: each defect found, as a test.

Values never wrap (--set, map update), usage errors are exit 2 and list what is known,
errors name the file, privileges give one line and exit 3, unload never suggests removing
a bpffs root, attach of an object file says what it pinned and detach removes it, run
refuses a bad --limit, exits 1 when nothing ran, and reports a cut capture itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from conftest import PCAPS, PROGS, ROOT
from netns import bpffs_dir, veth_net

from bpfdsl.compiler import compile_source
from bpfdsl.obj import collection as objfile
from bpfdsl.obj.config import ConfigError, config_bytes
from bpfdsl.runtime import packets

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


def test_run_corrupt_object_names_the_file(flows_obj, tmp_path):
    cut = tmp_path / "trunc.o"
    cut.write_bytes(open(flows_obj, "rb").read()[:600])
    r = bpfdsl("run", str(cut), "--hex", "00" * 60)
    assert r.returncode == 2 and f"{cut}: corrupt ELF object" in r.stderr


@pytest.mark.parametrize("item", ["nosuch=1", "x"])
def test_bad_set_items_exit_2_listing_configs(flows_obj, item):
    r = bpfdsl("run", flows_obj, "--hex", "00" * 60, "--set", item)
    assert r.returncode == 2, r.stderr
    assert "configs of this object: a, c, p, s" in r.stderr and "Traceback" not in r.stderr


# ---- 12: attach of other kinds says only xdp --------------------------------------------


def test_attach_tc_says_only_xdp():
    r = bpfdsl("attach", "tc", "/sys/fs/bpf/nothing_here", "--dev", "lo")
    assert r.returncode == 2
    assert "only XDP" in r.stderr and "two interfaces" not in r.stderr


# ---- 13: without privileges: one line, exit 3 ------------------------------------------


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
                sys.stdout = open(os.devnull, "w")  # the child exits below
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


# ---- 14: unload never advises removing bpffs roots -------------------------------------


@pytest.mark.parametrize("root", ["/sys/fs/bpf", "/sys/fs/bpf/bpfdsl"])
def test_unload_of_bpffs_roots_refused_without_rm_advice(root):
    if not os.path.isdir(root):
        pytest.skip(f"{root} does not exist")
    before = sorted(os.listdir(root))
    r = bpfdsl("unload", root)
    assert r.returncode == 2 and "is not a bpfdsl pin dir" in r.stderr
    assert "rm " not in r.stderr and "remove it yourself" not in r.stderr
    assert set(before) <= set(os.listdir(root))


# ---- 18: run input checks ---------------------------------------------------------------


def test_run_limit_below_one_and_directory_capture():
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(PCAPS), "--limit", "-1")
    assert r.returncode == 2 and "--limit -1" in r.stderr
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(PCAPS))
    assert r.returncode == 2 and "is a directory" in r.stderr
    assert "no such capture file" not in r.stderr


@pytest.mark.kernel
def test_run_all_skipped_exits_1():
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--hex", "0011")
    assert r.returncode == 1 and "no packet was run" in r.stderr
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--hex", "00" * 60)
    assert r.returncode == 0, r.stderr


@pytest.mark.kernel
def test_run_truncated_capture_reported_in_our_words(tmp_path):
    src = (PCAPS / "802.1ad_QinQ.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src[: len(src) - 7])
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(cut))
    assert r.returncode == 0, r.stderr
    assert "WARNING" not in r.stdout + r.stderr
    assert "the capture ends inside packet" in r.stderr and "truncated file" in r.stderr
    whole = len(packets.read_pcap(PCAPS / "802.1ad_QinQ.pcap")) - 1  # the last one is cut
    assert f"{whole} packet(s)" in r.stdout


# ---- 19: attach of an object says what it pinned; detach and unload clean up ------------


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
