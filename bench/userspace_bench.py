"""User space around the program against C (issue #25): event records and test runs.

    sudo python3 bench/userspace_bench.py [--records N] [--frames N] [--runs R]
                                          [--tree DIR] [--quick] [--json FILE]

Builds the C references with the host's cc and libbpf (bench/c/rb_print.c: libbpf's
ring_buffer__poll printing the same JSON lines, or counting with an empty callback;
bench/c/testrun_loop.c: libbpf load + one bpf_prog_test_run_opts per frame of the pcap) and
measures, in the same run, median of ``--runs``:

- ``events --json``: N records already in a ring buffer (written by BPF_PROG_TEST_RUN of the
  bench's program with repeat=N), whole ``bpfdsl events MAP --json --count N`` process
  against ``rb_print``; the records of both outputs must be the same;
- the Python API: ``EventStream.read_batches()`` + ``RecordBatch.array()`` (numpy) and
  ``.rows()``, and ``EventStream.poll()`` (Event objects), in records/s, against rb_print
  with an empty callback;
- ``run --pcap -q`` with the kernel engine over a capture of N UDP frames, whole process
  (start-up included), against ``testrun_loop``; the verdict totals must be the same.

``--tree DIR`` times another checkout's ``bpfdsl`` (e.g. the main branch, for before/after
figures); the Python API rows always use this tree.  Exits 1 only when it cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib as B

HERE = Path(__file__).resolve().parent
PORT = 4242

REPORT = """license "GPL"
struct event { saddr: be32, dport: be16, len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: RING)
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
    if udp.dest == 53 { return XDP_DROP }
    return XDP_PASS
}
"""


def udp_frame(i: int) -> bytes:
    """A 64-byte Ethernet/IPv4/UDP frame; every 4th to port 53 (the program drops those)."""
    eth = b"\x02" * 6 + b"\x04" * 6 + b"\x08\x00"
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 50, i & 0xFFFF, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 1, (i >> 8) & 255, i & 255]))  # fmt: skip
    udp = struct.pack("!HHHH", 40000, 53 if i % 4 == 0 else PORT, 30, 0) + bytes(22)
    return eth + ip + udp


def write_pcap(path: Path, n: int) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i in range(n):
            p = udp_frame(i)
            f.write(struct.pack("<IIII", i // 1_000_000, i % 1_000_000, len(p), len(p)) + p)


def build_refs(tmp: Path) -> dict[str, Path]:
    cc = os.environ.get("CC", "cc")
    B.require_tool(cc, "install gcc or clang (CC=...)")
    out = {}
    for name in ("rb_print", "testrun_loop"):
        exe = tmp / name
        r = subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "c" / f"{name}.c"), "-lbpf"],
                           capture_output=True, text=True)  # fmt: skip
        if r.returncode:
            raise B.BenchError(f"cannot build {name}.c (libbpf-dev installed?):\n{r.stderr}")
        out[name] = exe
    return out


def bpfdsl_cmd(tree: Path | None) -> tuple[list[str], dict[str, str]]:
    """``python -P -m bpfdsl`` of ``tree`` (-P: not the package of the current directory)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str((tree or B.ROOT).resolve())
    return [sys.executable, "-P", "-m", "bpfdsl"], env


def fill(prog_pin: str, n: int) -> None:
    """n records into the ring: BPF_PROG_TEST_RUN of the report program, repeat=n."""
    from bpfdsl.kernel import syscall

    with syscall.obj_get(prog_pin) as fd:
        done = 0
        while done < n:  # repeat runs in one call (the kernel yields between runs)
            k = min(n - done, 1_000_000)
            syscall.prog_test_run(fd, udp_frame(1), repeat=k)
            done += k


def records_of(text: str) -> list[dict]:
    """The records of JSON lines, ``seq`` counted from the first (the program's counter
    goes on across fills)."""
    recs = [json.loads(ln)["record"] for ln in text.splitlines() if ln.strip()]
    first = recs[0]["seq"] if recs else 0
    return [{**r, "seq": r["seq"] - first} for r in recs]


def timed(cmd, env=None, stdout=subprocess.PIPE) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, stdout=stdout, stderr=subprocess.PIPE, text=True,
                       timeout=600)  # fmt: skip
    dt = time.perf_counter() - t0
    if r.returncode:
        raise B.BenchError(f"{' '.join(map(str, cmd))} failed: {r.stderr[-2000:]}")
    return dt, r


def bench_events(obj: Path, refs, n: int, runs: int, tree: Path | None) -> dict:
    from bpfdsl.cli import main

    pin = f"/sys/fs/bpf/bpfdsl_ub_{uuid.uuid4().hex[:8]}"
    with contextlib.redirect_stdout(io.StringIO()):
        loaded = main(["load", str(obj), "--pin-dir", pin])
    if loaded != 0:
        raise B.BenchError("bpfdsl load of the bench program failed")
    ours_t, c_t, c_empty, api = [], [], [], {"array": [], "rows": [], "objects": []}
    same = True
    try:
        cmd, env = bpfdsl_cmd(tree)
        for _ in range(runs):
            fill(f"{pin}/progs/report", n)
            t, r = timed([*cmd, "events", f"{pin}:events", "--json", "--count", str(n)], env)
            ours_t.append(t)
            ours = records_of(r.stdout)
            fill(f"{pin}/progs/report", n)
            t, rc = timed([str(refs["rb_print"]), f"{pin}/maps/events", str(n)])
            c_t.append(t)
            same = same and ours == records_of(rc.stdout) and len(ours) == n
            fill(f"{pin}/progs/report", n)
            t, _ = timed([str(refs["rb_print"]), "-n", f"{pin}/maps/events", str(n)])
            c_empty.append(t)
            for form in api:
                fill(f"{pin}/progs/report", n)
                api[form].append(api_rate(pin, n, form))
    finally:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["unload", pin])
    return {"ours_s": ours_t, "c_s": c_t, "c_empty_s": c_empty, "api_s": api, "same": same}


def api_rate(pin: str, n: int, form: str) -> float:
    """Seconds for the Python API to take n waiting records in ``form``."""
    from bpfdsl.runtime import events

    with events.open_events(f"{pin}:events") as st:
        got = 0
        t0 = time.perf_counter()
        while got < n:
            if form == "objects":
                got += len(st.poll(1.0))
                continue
            for b in st.poll_batches(1.0):
                got += len(b.array() if form == "array" else b.rows() or ())
        return time.perf_counter() - t0


def bench_run(obj: Path, refs, n: int, runs: int, tree: Path | None, tmp: Path) -> dict:
    pcap = tmp / "frames.pcap"
    write_pcap(pcap, n)
    cmd, env = bpfdsl_cmd(tree)
    ours_t, c_t, same = [], [], True
    for _ in range(runs):
        t, r = timed([*cmd, "run", str(obj), "--pcap", str(pcap), "-q", "--engine", "kernel"], env)
        ours_t.append(t)
        t, rc = timed([str(refs["testrun_loop"]), str(obj), "report", str(pcap)])
        c_t.append(t)
        # "N packet(s) through 'report' (kernel): XDP_DROP a, XDP_PASS b" vs "N frames: ..."
        ours = dict(
            (k, int(v)) for k, v in (p.split() for p in r.stdout.split(": ", 1)[1].split(", "))
        )
        words = rc.stdout.split(":", 1)[1].split()
        theirs = {words[i]: int(words[i + 1]) for i in range(0, len(words), 2)}
        same = same and ours == theirs and sum(ours.values()) == n
    return {"ours_s": ours_t, "c_s": c_t, "same": same}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tree", type=Path, help="time this checkout's bpfdsl (before/after)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one run (< 1 minute)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if args.quick:
        args.records, args.frames, args.runs = 2000, 2000, 1
    try:
        B.require_root()
        B.ensure_bpffs()
        note = B.load_note()
        with tempfile.TemporaryDirectory(prefix="bpfdsl-ub-") as d:
            tmp = Path(d)
            refs = build_refs(tmp)
            ring = 1 << max(16, (args.records * 32 - 1).bit_length())
            src = tmp / "report.bpfd"
            src.write_text(REPORT.replace("RING", str(ring)))
            obj = tmp / "report.o"
            err = B.compile_ours(src, obj)
            if err:
                raise B.BenchError(f"cannot compile the bench program: {err}")
            ev = bench_events(obj, refs, args.records, args.runs, args.tree)
            rn = bench_run(obj, refs, args.frames, args.runs, args.tree, tmp)
    except B.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    m = B.median
    n, f = args.records, args.frames
    rows = [
        ["events --json", f"{n / m(ev['ours_s']):,.0f} rec/s", f"{n / m(ev['c_s']):,.0f} rec/s",
         f"{m(ev['c_s']) / m(ev['ours_s']):.3f}", "≥ 0.1", B.verdict(m(ev['c_s']) / m(ev['ours_s']) >= 0.1),
         "yes" if ev["same"] else "NO"],
    ]  # fmt: skip
    for form in ("array", "rows", "objects"):
        s = m(ev["api_s"][form])
        goal = "≥ 5M rec/s" if form == "array" else ""
        rows.append([f"API {form}", f"{n / s:,.0f} rec/s", f"{n / m(ev['c_empty_s']):,.0f} rec/s",
                     f"{m(ev['c_empty_s']) / s:.3f}", goal,
                     B.verdict(n / s >= 5e6) if goal else "", ""])  # fmt: skip
    ratio = m(rn["c_s"]) / m(rn["ours_s"])
    rows.append(["run --pcap -q", f"{f / m(rn['ours_s']):,.0f} frames/s",
                 f"{f / m(rn['c_s']):,.0f} frames/s", f"{ratio:.3f}", "≥ 0.3", B.verdict(ratio >= 0.3),
                 "yes" if rn["same"] else "NO"])  # fmt: skip
    print(f"{n} records, {f} frames, median of {args.runs} run(s); bpfdsl from "
          f"{args.tree or B.ROOT}; C: libbpf ring_buffer__poll / bpf_prog_test_run_opts loop "
          "(API rows: against the empty callback; whole processes include start-up)")  # fmt: skip
    print(B.table(["path", "bpfdsl", "C", "ratio", "goal", "", "same output"], rows))
    if note:
        print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps({"events": ev, "run": rn, "load": os.getloadavg()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
