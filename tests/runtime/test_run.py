"""``bpfdsl run``: BPF_PROG_TEST_RUN per packet, verdicts, changes, captures, bad input."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import pytest
from support.objbuild import build
from support.paths import PCAPS, PROGS, ROOT

from bpfdsl.compiler import compile_file
from bpfdsl.obj import collection as objfile
from bpfdsl.obj.spec import choose_program
from bpfdsl.runtime import packets, testrun
from bpfdsl.runtime.packets import udp_frame

MACS = {"src_mac": "02:00:00:00:00:01", "dst_mac": "02:00:00:00:00:02"}


def frame(dport: int, **kw) -> bytes:
    return udp_frame(**MACS, src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1234, dport=dport, **kw)


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def run_json(*args: str) -> dict:
    r = bpfdsl("-j", "run", *args)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.kernel
@pytest.mark.parametrize(
    "dport,port_set,verdict",
    [
        (9999, None, "XDP_DROP"),
        (9998, None, "XDP_PASS"),
        (53, "53", "XDP_DROP"),
        (9999, "53", "XDP_PASS"),
    ],
)
def test_run_filter_verdicts(dport, port_set, verdict):
    args = [str(PROGS / "xdp_udp_filter.bpfd"), "--hex", frame(dport).hex()]
    if port_set:
        args += ["--set", f"port={port_set}"]
    out = run_json(*args)
    (p,) = out["packets"]
    assert p["verdict"] == verdict and p["retval"] in (1, 2)
    assert p["changes"] == [] and p["length_out"] == p["length"]


@pytest.mark.kernel
def test_run_reports_rewritten_fields():
    out = run_json(str(PROGS / "xdp_reflect.bpfd"), "--hex", frame(7).hex())
    (p,) = out["packets"]
    assert p["verdict"] == "XDP_TX"
    assert "ip.saddr: 10.0.0.1 -> 10.0.0.2" in p["changes"]
    assert "udp.dest: 7 -> 1234" in p["changes"]


@pytest.mark.kernel
def test_run_repeat_prints_ns_per_run():
    r = bpfdsl(
        "run", str(PROGS / "xdp_udp_filter.bpfd"), "--hex", frame(9999).hex(), "--repeat", "2000"
    )
    assert r.returncode == 0, r.stderr
    assert "XDP_DROP" in r.stdout and " ns/run" in r.stdout


@pytest.mark.kernel
def test_run_every_shared_pcap_without_traceback():
    """tcpdump's corpus (malformed, truncated, jumbo frames): every frame gets a verdict or
    a reason it was skipped; run in one process with one loaded object."""
    spec = objfile.read_object(build("xdp_udp_filter"))
    name, kind = choose_program(spec, None)
    engine = testrun.open_engine("kernel", spec)
    total = 0
    verdicts: dict[str, int] = {}
    try:
        for pcap in sorted(PCAPS.glob("*.pcap")):
            frames = packets.read_pcap(pcap)
            res = testrun.run_packets(engine, name, kind, [(f.index, f.data) for f in frames])
            assert len(res) == len(frames)
            for r in res:
                assert r.verdict or r.skipped, (pcap.name, r.index)
                verdicts[r.verdict or "skipped"] = verdicts.get(r.verdict or "skipped", 0) + 1
            total += len(frames)
    finally:
        engine.close()
    assert total > 1000
    assert verdicts.get("XDP_PASS", 0) > 0
    assert verdicts.get("skipped", 0) < total // 10


@pytest.mark.kernel
def test_run_cli_on_a_capture_counts_verdicts():
    pcap = PCAPS / "802.1ad_QinQ.pcap"
    out = run_json(str(PROGS / "xdp_udp_filter.bpfd"), "--pcap", str(pcap))
    n = len(packets.read_pcap(pcap))
    assert len(out["packets"]) == n and sum(out["totals"].values()) == n


def test_run_bad_capture_is_clear(tmp_path):
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(PCAPS / "README"))
    assert r.returncode == 2 and "not a pcap" in r.stderr and "Traceback" not in r.stderr
    sll = tmp_path / "cooked.pcap"  # LINKTYPE_LINUX_SLL (tcpdump -i any)
    sll.write_bytes(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 113))
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(sll))
    assert r.returncode == 2 and "not Ethernet" in r.stderr
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--hex", "00zz")
    assert r.returncode == 2 and "not a hex digit" in r.stderr


def test_read_pcap_truncated_keeps_whole_records(tmp_path):
    src = (PCAPS / "802.1ad_QinQ.pcap").read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(src[: len(src) - 7])
    full, part = packets.read_pcap(PCAPS / "802.1ad_QinQ.pcap"), packets.read_pcap(cut)
    assert 0 < len(part) <= len(full)
    assert [f.data for f in part[:-1]] == [f.data for f in full[: len(part) - 1]]


@pytest.mark.kernel
def test_run_refuses_kinds_the_kernel_cannot_test_run():
    r = bpfdsl(
        "run",
        str(build("xdp_cpumap_steer")),
        "--prog",
        "on_cpu",
        "--engine",
        "kernel",
        "--hex",
        frame(1).hex(),
    )
    assert r.returncode == 1, r.stderr
    assert "BPF_PROG_TEST_RUN refuses" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.kernel
def test_run_short_frame_is_skipped_with_reason():
    r = bpfdsl("-j", "run", str(PROGS / "xdp_pass.bpfd"), "--hex", "0011223344")
    assert r.returncode == 1  # nothing could be run (issue 3, #18)
    (p,) = json.loads(r.stdout)["packets"]
    assert p["verdict"] == "" and "at least 14 bytes" in p["skipped"]


def test_read_pcapng(tmp_path):
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcapng

    f = tmp_path / "t.pcapng"
    wrpcapng(str(f), [Ether(frame(9999)), Ether(frame(1))])
    got = packets.read_pcap(f)
    assert [g.data for g in got] == [frame(9999), frame(1)]


# ---- input checks ----


def test_run_corrupt_object_names_the_file(tmp_path):
    cut = tmp_path / "trunc.o"
    cut.write_bytes(compile_file(PROGS / "xdp_udp_filter.bpfd").obj[:600])
    r = bpfdsl("run", str(cut), "--hex", "00" * 60)
    assert r.returncode == 2 and f"{cut}: corrupt ELF object" in r.stderr


def test_run_limit_below_one_and_directory_capture():
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(PCAPS), "--limit", "-1")
    assert r.returncode == 2 and "--limit -1" in r.stderr
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(PCAPS))
    assert r.returncode == 2 and "is a directory" in r.stderr
    assert "no such capture file" not in r.stderr


@pytest.mark.kernel
def test_run_all_skipped_exits_1():
    r = bpfdsl("run", str(PROGS / "xdp_pass.bpfd"), "--hex", "0011")
    assert r.returncode == 1 and "error[nothing-run]: no packet was run" in r.stderr
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
