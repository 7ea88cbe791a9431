"""`bpfdsl events`: records of loaded programs streamed from the kernel -- the xdpdump-like
progs/xdp_sampler.bpfd to a pcap that tcpdump reads while frames flow on a veth, a ring
buffer as JSON lines, clang's objects (the checker and the kernel agree on a leaked
reservation; records decoded by a struct named on the command line) and the errors."""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.netns import bpffs_dir, veth_net
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.cli import main
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import events, loader
from bpfdsl.runtime.packets import read_pcap, udp_frame

PORT = 4242


def start_stream(net, *args: str) -> subprocess.Popen:
    """``bpfdsl events ARGS`` in the XDP namespace, returned once it reads (the line it
    prints to stderr when its rings are set up)."""
    p = subprocess.Popen(
        net.nsenter(sys.executable, "-m", "bpfdsl", "events", *args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = p.stderr.readline()  # bounded: the process ends (EOF) if it fails
    if not line.startswith("reading "):
        p.kill()
        out, err = p.communicate(timeout=10)
        pytest.fail(f"bpfdsl events did not start: {line}{err}{out}")
    return p


def stop(p: subprocess.Popen) -> tuple[str, str]:
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 0, err
    return out, err


def sent_frames(net, n: int) -> list[bytes]:
    return [
        udp_frame(
            src_mac=net.peer_mac,
            dst_mac=net.xdp_mac,
            src_ip=net.peer_ip,
            dst_ip=net.xdp_ip,
            sport=40000,
            dport=PORT,
            payload=b"bpfdsl-test",
            ident=i,
        )
        for i in range(n)
    ]  # fmt: skip (the frames VethNet.send_udp sends)


@pytest.mark.kernel
def test_sampler_streams_the_frames_to_a_pcap_tcpdump_reads(tmp_path):
    if shutil.which("tcpdump") is None:
        pytest.skip("tcpdump not installed")
    pcap = tmp_path / "samples.pcap"
    pin = bpffs_dir("evs_")
    n = 20
    with veth_net("es") as net:
        r = net.bpfdsl("attach", "xdp", str(ROOT / "progs/xdp_sampler.bpfd"),
                       "--dev", net.xdp_dev, "--pin-dir", pin)  # fmt: skip
        assert r.returncode == 0, r.stderr
        try:
            p = start_stream(net, f"{pin}:samples", "--pcap", str(pcap), "--lines")
            try:
                before = time.time_ns()
                assert net.send_udp(PORT, n, interval=0.002) == n
                after = time.time_ns()
                deadline = time.monotonic() + 10
                while time.monotonic() < deadline:  # until the n frames are in the file
                    if len([f for f in read_pcap(pcap) if _dport(f.data) == PORT]) >= n:
                        break
                    time.sleep(0.1)
            finally:
                out, err = stop(p)
        finally:
            d = net.bpfdsl("detach", "--dev", net.xdp_dev)
            assert d.returncode == 0, d.stderr
    assert "frame(s) written to" in err and "pkt_len=" in out
    dump = subprocess.run(["tcpdump", "-nr", str(pcap), "udp", "port", str(PORT)],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert dump.returncode == 0, dump.stderr
    lines = dump.stdout.splitlines()
    assert len(lines) == n, dump.stdout
    assert all(f"{net.peer_ip}.40000 > {net.xdp_ip}.{PORT}: UDP, length 11" in ln for ln in lines)
    got = [f.data for f in read_pcap(pcap) if _dport(f.data) == PORT]
    assert got == sent_frames(net, n)  # every byte, in the order sent (ip id 0..n-1)
    # each record's timestamp: when the kernel wrote it (PERF_SAMPLE_TIME, CLOCK_MONOTONIC)
    # as UTC ns (docs/language.md), so within the sending, in order; 5 ms of slack for the
    # realtime - monotonic offset `events` measured once
    stamps = [t for t, f in _pcap_times(pcap) if _dport(f) == PORT]
    assert len(stamps) == n and stamps == sorted(stamps)
    assert before - 5_000_000 <= stamps[0] and stamps[-1] <= after + 5_000_000
    assert not Path(pin).exists()


def _pcap_times(path: Path) -> list[tuple[int, bytes]]:
    """(timestamp in ns since the epoch, frame) of each record of a nanosecond pcap."""
    raw = path.read_bytes()
    assert struct.unpack_from("<I", raw)[0] == 0xA1B23C4D  # nanosecond timestamps
    out, off = [], 24
    while off + 16 <= len(raw):
        sec, nsec, cap, _wire = struct.unpack_from("<IIII", raw, off)
        out.append((sec * 1_000_000_000 + nsec, raw[off + 16 : off + 16 + cap]))
        off += 16 + cap
    return out


def _dport(frame: bytes) -> int | None:
    if len(frame) < 38 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 15) * 4
    return struct.unpack_from("!H", frame, 14 + ihl + 2)[0]


REPORT = """license "GPL"
struct event { saddr: be32, dport: be16, len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: 65536)
map n: array<u32, u64>(max_entries: 1)

xdp fn report(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let c = n.lookup(0) else { return XDP_PASS }
    c += 1
    let r = ringbuf_reserve(events) else { return XDP_PASS }
    r.saddr = ip.saddr
    r.dport = udp.dest
    r.len = ctx.len as u32
    r.seq = c
    ringbuf_submit(r)
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_ringbuf_records_as_json_lines(tmp_path):
    src = tmp_path / "report.bpfd"
    src.write_text(REPORT)
    pin = bpffs_dir("evj_")
    n = 5
    with veth_net("ej") as net:
        r = net.bpfdsl("attach", "xdp", str(src), "--dev", net.xdp_dev, "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            p = start_stream(net, f"{pin}:events", "--json", "--count", str(n),
                             "--duration", "20")  # fmt: skip
            assert net.send_udp(PORT, n, interval=0.002) == n
            out, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
        finally:
            net.bpfdsl("detach", "--dev", net.xdp_dev)
    docs = [json.loads(ln) for ln in out.splitlines()]
    assert [d["record"] for d in docs] == [
        {"saddr": net.peer_ip, "dport": PORT, "len": 53, "seq": i} for i in range(1, n + 1)
    ]
    assert all(d["map"] == "events" and "cpu" not in d for d in docs)


@pytest.mark.kernel
def test_checker_and_kernel_refuse_a_leaked_reservation_alike(capsys):
    obj = build("ringbuf_leak")
    assert main(["check", str(obj)]) == 1
    out = capsys.readouterr().out
    assert "unreleased-ref" in out and "ringbuf_leak.c:19" in out
    with pytest.raises(loader.VerifierError) as ei:
        loader.load_collection(read_object(obj))
    assert "Unreleased reference" in ei.value.log


@pytest.mark.kernel
def test_records_of_a_clang_object_decode_by_a_named_struct():
    """clang's object has no bpfdsl_records: `--type event` names the struct of its BTF."""
    spec = read_object(build("ringbuf_event"))
    with loader.load_collection(spec) as coll:
        map_id = syscall.map_info(coll.maps["rb"].fd).id
        with events.open_events(f"id:{map_id}") as plain:
            assert plain.record is None  # nothing says what the records are
        with events.open_events(f"id:{map_id}", type_name="event") as st:
            fd = coll.programs["report"].fd
            for _ in range(3):
                assert syscall.prog_test_run(fd, bytes(64)).retval == 2
            got = [e.value for e in st.poll(1.0)]
        with pytest.raises(Exception, match="no struct 'nope'"):
            events.open_events(f"id:{map_id}", type_name="nope")
    assert got == [{"len": 64, "ifindex": 1, "seq": s} for s in (1, 2, 3)]


@pytest.mark.kernel
def test_events_of_a_map_that_is_no_event_map(tmp_path, capsys):
    src = tmp_path / "report.bpfd"
    src.write_text(REPORT)
    pin = bpffs_dir("eve_")
    assert main(["load", str(src), "--pin-dir", pin]) == 0
    try:
        capsys.readouterr()
        assert main(["events", f"{pin}:n"]) == 2
        err = capsys.readouterr().err
        assert "error[not-event-map]: map 'n'" in err and "is of type array, not ringbuf" in err
        assert main(["events", f"{pin}:nothere"]) == 2
        assert "no map 'nothere' pinned" in capsys.readouterr().err
        assert main(["events", f"{pin}:events", "--count", "0"]) == 2
    finally:
        assert main(["unload", pin]) == 0


@pytest.mark.kernel
def test_a_full_perf_ring_reports_the_records_it_lost():
    """One page per CPU ring: records that do not fit are dropped by the kernel (the
    program's perf_event_output fails, so `sampled` does not count them) and, once there is
    room again, a PERF_RECORD_LOST says how many; delivered + lost == written."""
    from bpfdsl.compiler import compile_file

    spec = read_object(compile_file(str(ROOT / "progs/xdp_sampler.bpfd")).obj)
    n = 200
    os_cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(os_cpus)})  # one CPU: one ring fills
    try:
        with loader.load_collection(spec) as coll:
            lm = coll.maps["samples"]
            fd = syscall.Fd(os.dup(int(lm.fd)))
            rec = events.record_type_of(spec.btf, "samples")
            with events.EventStream(fd, syscall.map_info(fd), rec, pages=1) as st:
                prog = coll.programs["xdp_sampler"].fd
                for _ in range(n):
                    syscall.prog_test_run(prog, bytes(60))
                got = st.read()  # room again: the next record comes after a LOST record
                syscall.prog_test_run(prog, bytes(60))
                got += st.read()
            counted = syscall.map_lookup(
                coll.maps["sampled"].fd, bytes(4), 8 * syscall.possible_cpus()
            )
    finally:
        os.sched_setaffinity(0, os_cpus)
    samples = [e for e in got if not e.lost]
    lost = sum(e.lost for e in got)
    assert 0 < len(samples) < n and lost > 0
    assert len(samples) + lost == n + 1
    assert sum(struct.unpack(f"<{len(counted) // 8}Q", counted)) == len(samples)
    assert all(e.packet == bytes(60) and e.value["pkt_len"] == 60 for e in samples)


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_events_stops_promptly_whatever_the_ring_holds_and_however_started(tmp_path, sig):
    """A shell starts a background job (`bpfdsl events ... &`) with SIGINT ignored, and a
    service manager stops it with SIGTERM: either way the stream stops well under a second
    after the signal, with the summary, while a backlog of records waits in the ring."""
    src = tmp_path / "report.bpfd"
    src.write_text(REPORT)
    pin = bpffs_dir("evq_")
    assert main(["load", str(src), "--pin-dir", pin]) == 0
    try:
        frame = sent_frames_plain()
        with syscall.obj_get(f"{pin}/progs/report") as fd:
            syscall.prog_test_run(fd, frame, repeat=2000)  # 2,000 records waiting
        p = subprocess.Popen(
            [sys.executable, "-m", "bpfdsl", "events", f"{pin}:events", "--lines"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )  # fmt: skip
        try:
            assert p.stderr is not None and p.stderr.readline().startswith("reading ")
            time.sleep(0.2)
            t0 = time.monotonic()
            p.send_signal(sig)
            out, err = p.communicate(timeout=20)
            took = time.monotonic() - t0
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        assert p.returncode == 0, err
        assert "record(s) from events" in err
        assert took < 5.0, took  # a bound for a hang, not a timing: it takes ~0.1 s
    finally:
        assert main(["unload", pin]) == 0


def sent_frames_plain() -> bytes:
    """A UDP frame the report program records (64 bytes, to PORT)."""
    return udp_frame(
        src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02", src_ip="10.0.0.1",
        dst_ip="10.0.0.2", sport=40000, dport=PORT, payload=b"x" * 22,
    )  # fmt: skip
