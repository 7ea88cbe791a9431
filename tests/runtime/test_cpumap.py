"""cpumap steering on a real veth (issue 4): with several flows the on-CPU program's per-CPU
counters show each flow on the CPU its hash selects and both CPUs get flows; a drop in the
on-CPU program means the packet never reaches the stack; entry and map errors are explained
(program without BPF_XDP_CPUMAP, qsize 0, CPU not possible, max_entries above the possible
CPUs -- FIELD-BUGS B09).

The program is tests/data/redirect_c/xdp_cpumap_steer_cfg.c: the clang-19 reference
tests/data/c/xdp_cpumap_steer.c with its two settings in an array map (bpftool cannot set
.rodata); its flow hash is FNV-1a over the raw 32-bit words saddr, daddr, protocol.
"""

from __future__ import annotations

import json
import shutil
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest
from support.flowhash import flow_hash as fnv1a
from support.netns import send_frames, veth_net
from support.paths import PROGS, ROOT
from support.redirect_testlib import (
    Loaded,
    build_c,
    load_bpfdsl,
    load_object,
    percpu_values,
    quiet_ipv6,
)

from bpfdsl.abi.flags import XdpFlags
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import cpumap_entries, cpumap_set, create_cpumap
from bpfdsl.runtime.packets import udp_frame

pytestmark = pytest.mark.kernel
N = 25  # frames per flow


def spread_flows(candidates: list[str], dst: str, n: int = 8) -> list[str]:
    """``n`` of ``candidates`` whose reference hash covers both CPUs of a 2-CPU table (the
    destination address is random per test, so a fixed list could land on one CPU)."""
    flows = candidates[:n]
    cpu = {f: fnv1a(word(f), word(dst), socket.IPPROTO_UDP) % 2 for f in candidates}
    if len({cpu[f] for f in flows}) == 1:
        flows[-1] = next(f for f in candidates[n:] if cpu[f] != cpu[flows[0]])
    return flows


def word(ip: str) -> int:
    """The u32 the program loads from the header: network-order bytes read little-endian."""
    return int.from_bytes(socket.inet_aton(ip), "little")


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("cpumap"))


@pytest.fixture
def steer(objs) -> Loaded:
    with load_object(objs["xdp_cpumap_steer_cfg"]) as ld:
        yield ld


def setup(ld: Loaded, cpus: list[int], drop_port: int = 0) -> None:
    cfg = ld.maps["config"]
    for slot, cpu in enumerate(cpus):
        S.map_update(ld.maps["cpus"], struct.pack("<I", slot), struct.pack("<I", cpu))
    S.map_update(cfg, struct.pack("<I", 0), struct.pack("<I", len(cpus)))
    S.map_update(cfg, struct.pack("<I", 1), struct.pack("<I", drop_port))
    for cpu in sorted(set(cpus)):
        cpumap_set(
            ld.maps["cpu_map"], cpu, 192, ld.progs["on_cpu"], map_name="cpu_map", prog_name="on_cpu"
        )


def wait_total(ld: Loaded, want: int, limit: float = 5.0) -> list[int]:
    """Per-CPU on-CPU counters once their sum reaches ``want`` (or after ``limit`` s)."""
    end = time.monotonic() + limit
    while True:
        vals = percpu_values(ld.maps["on_cpu_count"], 0)
        if sum(vals) >= want or time.monotonic() > end:
            return vals
        time.sleep(0.02)


def test_cpumap_flows_land_on_hashed_cpu(steer: Loaded) -> None:
    if S.possible_cpus() < 2:
        pytest.skip("needs at least 2 CPUs")
    cpus = [0, 1]
    setup(steer, cpus)
    assert [(e.cpu, e.qsize) for e in cpumap_entries(steer.maps["cpu_map"])] == [(0, 192), (1, 192)]
    with veth_net("cm") as net:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        with net.in_xdp_ns():
            netlink.xdp_set(
                netlink.ifindex(net.xdp_dev),
                int(steer.progs["steer"]),
                XdpFlags.DRV_MODE,
                dev=net.xdp_dev,
            )
        cands = [f"{10 + k}.77.{k * 7 % 250}.{k + 1}" for k in range(64)]
        flows = spread_flows(cands, net.xdp_ip)
        expect = {
            f: cpus[fnv1a(word(f), word(net.xdp_ip), socket.IPPROTO_UDP) % len(cpus)] for f in flows
        }
        assert set(expect.values()) == {0, 1}, "the chosen flows must cover both CPUs"
        before = percpu_values(steer.maps["on_cpu_count"], 0)
        for f in flows:
            frames = [
                udp_frame(
                    src_mac=net.peer_mac,
                    dst_mac=net.xdp_mac,
                    src_ip=f,
                    dst_ip=net.xdp_ip,
                    sport=4000,
                    dport=4001,
                    ident=i,
                )
                for i in range(N)
            ]
            assert send_frames(net.peer_ns, net.peer_dev, frames) == N
            after = wait_total(steer, sum(before) + N)
            delta = [a - b for a, b in zip(after, before, strict=True)]
            want = [N if c == expect[f] else 0 for c in range(len(delta))]
            assert delta == want, f"flow from {f}: per-CPU counts {delta}, hash says {want}"
            before = after


def test_cpumap_drop_on_cpu_never_reaches_stack(steer: Loaded) -> None:
    """UDP to the drop port is counted on the CPU and dropped there: the socket gets nothing,
    while another port (and the same port before the rule) get every datagram."""
    setup(steer, list(range(min(2, S.possible_cpus()))), drop_port=0)
    with veth_net("cd") as net:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        with net.in_xdp_ns():
            netlink.xdp_set(
                netlink.ifindex(net.xdp_dev),
                int(steer.progs["steer"]),
                XdpFlags.DRV_MODE,
                dev=net.xdp_dev,
            )
        drop_port, pass_port = 7101, 7102
        with net.udp_receiver(drop_port) as rd, net.udp_receiver(pass_port) as rp:
            base = sum(percpu_values(steer.maps["on_cpu_count"], 0))
            assert net.send_udp(drop_port, N) == N  # rule not set yet: control
            assert rd.drain() == N
            S.map_update(steer.maps["config"], struct.pack("<I", 1), struct.pack("<I", drop_port))
            assert net.send_udp(drop_port, N) == N
            assert net.send_udp(pass_port, N) == N
            assert rp.drain() == N
            assert rd.drain(quiet=0.5) == 0
            assert sum(wait_total(steer, base + 3 * N)) - base == 3 * N  # all went via cpumap


def test_cpumap_b09_loader_clamps_and_empty_slot_falls_back(objs) -> None:
    """FIELD-BUGS B09 check: the reference declares 64 slots; bpfdsl's loader creates the
    cpumap with at most the possible CPUs; redirecting to an empty slot gives the declared
    fallback (XDP_PASS) under BPF_PROG_TEST_RUN, and XDP_REDIRECT once the slot is set with a
    BPF_XDP_CPUMAP program."""
    frame = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="192.0.2.1",
        dst_ip="192.0.2.2",
        sport=1,
        dport=2,
    )
    with load_bpfdsl(objs["xdp_cpumap_steer"], {"n_cpus": 1}) as ld:
        assert S.map_info(ld.maps["cpu_map"]).max_entries == min(64, S.possible_cpus())
        S.map_update(ld.maps["cpus"], struct.pack("<I", 0), struct.pack("<I", 0))
        assert S.prog_test_run(ld.progs["steer"], frame).retval == XdpAction.PASS
        cpumap_set(ld.maps["cpu_map"], 0, 192, ld.progs["on_cpu"], map_name="cpu_map")
        assert S.prog_test_run(ld.progs["steer"], frame).retval == XdpAction.REDIRECT


def test_cpumap_entry_needs_cpumap_program(steer: Loaded) -> None:
    """The kernel says ENOMEM for a plain XDP program in a cpumap entry; we say what is wrong."""
    with pytest.raises(DiagnosticError) as ei:
        cpumap_set(
            steer.maps["cpu_map"],
            0,
            192,
            steer.progs["steer"],
            map_name="cpu_map",
            prog_name="steer",
        )
    msg = str(ei.value)
    assert "cpumap-wrong-program" in msg and "'steer'" in msg and "xdp/cpumap" in msg
    assert cpumap_entries(steer.maps["cpu_map"]) == []


@pytest.mark.parametrize(
    ("cpu", "qsize", "code"),
    [(0, 0, "cpumap-qsize-zero"), (4096, 192, "cpumap-cpu"), (0, 100000, "cpumap-qsize")],
)
def test_cpumap_bad_entry(steer: Loaded, cpu: int, qsize: int, code: str) -> None:
    with pytest.raises(DiagnosticError) as ei:
        cpumap_set(steer.maps["cpu_map"], cpu, qsize, map_name="cpu_map")
    assert code in str(ei.value)
    assert cpumap_entries(steer.maps["cpu_map"]) == []


def test_cpumap_max_entries_clamped_or_explained() -> None:
    """B09: a cpumap declared above the host's CPU limit is clamped (with a warning) or,
    without clamping, fails with a message naming map, size and limit instead of E2BIG."""
    name = f"cm{uuid.uuid4().hex[:6]}"
    fd, warning = create_cpumap(name, 100_000)
    with fd:
        assert S.map_info(fd).max_entries == S.possible_cpus()
    assert warning and "100000" in warning and name in warning
    with pytest.raises(DiagnosticError) as ei:
        create_cpumap(name, 100_000, clamp=False)
    assert "cpumap-too-large" in str(ei.value) and "100000" in str(ei.value)


def test_cpumap_program_cannot_attach_to_interface(steer: Loaded) -> None:
    from bpfdsl.runtime.attach import attach_xdp

    with veth_net("ci") as net, net.in_xdp_ns(), pytest.raises(DiagnosticError) as ei:
        attach_xdp(steer.progs["on_cpu"], net.xdp_dev)
    assert "entry-program-on-interface" in str(ei.value)
    assert "xdp(cpumap)" in str(ei.value)


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_cli_cpumap_set_show_delete(objs) -> None:
    """`bpfdsl load` (our loader: BPF_XDP_CPUMAP for xdp/cpumap, cpumap clamped to the
    possible CPUs), then `bpfdsl cpumap set/show/delete` by pin dir and map name."""
    pin = f"/sys/fs/bpf/bpfdsl_cm_{uuid.uuid4().hex[:8]}"
    try:
        r = bpfdsl("load", str(objs["xdp_cpumap_steer"]), "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        r = bpfdsl("cpumap", "set", f"{pin}:cpu_map", "0", "--qsize", "64", "--prog", "on_cpu")
        assert r.returncode == 0, r.stderr
        r = bpfdsl("-j", "cpumap", "show", f"{pin}/maps/cpu_map")
        (row,) = json.loads(r.stdout)
        assert (row["cpu"], row["qsize"]) == (0, 64) and row["prog_id"] > 0
        r = bpfdsl("cpumap", "set", f"{pin}:cpu_map", "1", "--qsize", "64", "--prog", "steer")
        assert r.returncode == 1 and "cpumap-wrong-program" in r.stderr
        r = bpfdsl("cpumap", "set", f"{pin}:cpu_map", "1", "--qsize", "0")
        assert r.returncode == 2 and "cpumap-qsize-zero" in r.stderr
        r = bpfdsl("cpumap", "set", f"{pin}:cpus", "1", "--qsize", "8")
        assert r.returncode == 2 and "wrong-map-kind" in r.stderr
        r = bpfdsl("cpumap", "delete", f"{pin}:cpu_map", "0")
        assert r.returncode == 0 and "removed" in r.stdout
        assert json.loads(bpfdsl("-j", "cpumap", "show", f"{pin}:cpu_map").stdout) == []
    finally:
        bpfdsl("unload", pin)
        shutil.rmtree(pin, ignore_errors=True)


def start_steering(ld: Loaded, net) -> None:
    """Slots 0, 1 -> CPUs 0, 1 with the on-CPU program; steer attached to the XDP end."""
    for slot in (0, 1):
        S.map_update(ld.maps["cpus"], struct.pack("<I", slot), struct.pack("<I", slot))
        cpumap_set(
            ld.maps["cpu_map"],
            slot,
            192,
            ld.progs["on_cpu"],
            map_name="cpu_map",
            prog_name="on_cpu",
        )
    quiet_ipv6(net.xdp_ns)
    quiet_ipv6(net.peer_ns)
    with net.in_xdp_ns():
        netlink.xdp_set(
            netlink.ifindex(net.xdp_dev),
            int(ld.progs["steer"]),
            XdpFlags.DRV_MODE,
            dev=net.xdp_dev,
        )


def flow_cpus(ld: Loaded, net, flows: list[str], check_hash: bool) -> dict[str, int]:
    """Send N UDP frames per flow (source address), each flow twice; the CPU each flow's
    frames were counted on.  Asserts a flow never splits or moves; with ``check_hash`` that
    the CPU is the reference hash's choice."""
    seen: dict[str, int] = {}
    before = percpu_values(ld.maps["on_cpu_count"], 0)
    for f in flows * 2:  # each flow twice: the same CPU both times
        frames = [
            udp_frame(
                src_mac=net.peer_mac,
                dst_mac=net.xdp_mac,
                src_ip=f,
                dst_ip=net.xdp_ip,
                sport=4000,
                dport=4001,
                ident=i,
            )
            for i in range(N)
        ]
        assert send_frames(net.peer_ns, net.peer_dev, frames) == N
        after = wait_total(ld, sum(before) + N)
        delta = [a - b for a, b in zip(after, before, strict=True)]
        assert sorted(delta)[-1] == N and sum(delta) == N, f"flow {f} split: {delta}"
        cpu = delta.index(N)
        assert seen.setdefault(f, cpu) == cpu, f"flow {f} moved from CPU {seen[f]} to {cpu}"
        if check_hash:
            assert cpu == fnv1a(word(f), word(net.xdp_ip), socket.IPPROTO_UDP) % 2
        before = after
    return seen


@pytest.mark.parametrize("src", ["c", "bpfd"])
def test_cpumap_steer_loaded_by_bpfdsl(objs, src: str) -> None:
    """The steering program as users load it -- bpfdsl's loader with .rodata configs
    (n_cpus, drop_port): the clang-19 reference and progs/xdp_cpumap_steer.bpfd.  Every flow
    stays on one CPU (the hashed one for the reference), both CPUs get flows, the on-CPU
    drop rule keeps its port's datagrams from the stack while another port gets all."""
    if S.possible_cpus() < 2:
        pytest.skip("needs at least 2 CPUs")
    path = objs["xdp_cpumap_steer"] if src == "c" else PROGS / "xdp_cpumap_steer.bpfd"
    drop_port, pass_port = 7301, 7302
    with load_bpfdsl(path, {"n_cpus": 2, "drop_port": drop_port}) as ld, veth_net("cb") as net:
        start_steering(ld, net)
        flows = spread_flows([f"{10 + k}.88.{k}.{k + 1}" for k in range(64)], net.xdp_ip)
        seen = flow_cpus(ld, net, flows, check_hash=True)
        assert set(seen.values()) == {0, 1}, f"flows did not spread: {seen}"
        with net.udp_receiver(drop_port) as rd, net.udp_receiver(pass_port) as rp:
            base = sum(percpu_values(ld.maps["on_cpu_count"], 0))
            assert net.send_udp(drop_port, N) == N
            assert net.send_udp(pass_port, N) == N
            assert rp.drain() == N
            assert rd.drain(quiet=0.5) == 0
            assert sum(wait_total(ld, base + 2 * N)) - base == 2 * N


@pytest.mark.parametrize("src", ["c", "bpfd"])
def test_cpumap_flows_from_one_prefix_spread(objs, src: str) -> None:
    """Issue 4: 'flows spread evenly' -- also clients of one network (10.0.0.0/8): each
    flow lands on the CPU the reference hash (FNV-1a + fmix32) picks; 12 flows, so all on one
    CPU has odds 2**-11 for the random destination address of the test."""
    if S.possible_cpus() < 2:
        pytest.skip("needs at least 2 CPUs")
    path = objs["xdp_cpumap_steer"] if src == "c" else PROGS / "xdp_cpumap_steer.bpfd"
    with load_bpfdsl(path, {"n_cpus": 2}) as ld, veth_net("cp") as net:
        start_steering(ld, net)
        flows = [f"10.{k * 37 % 256}.{k * 11 % 256}.{k + 2}" for k in range(12)]
        seen = flow_cpus(ld, net, flows, check_hash=True)
    assert set(seen.values()) == {0, 1}, f"flows from 10.0.0.0/8 did not spread: {seen}"
