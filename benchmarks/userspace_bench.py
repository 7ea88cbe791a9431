"""User space around the program against C (issue #25): event records and test runs.

    sudo python3 benchmarks/userspace_bench.py [--records N] [--frames N] [--entries N]
                                          [--runs R] [--paths events,run,maps]
                                          [--tree DIR] [--quick] [--json FILE]

Builds the C references with the host's cc and libbpf (benchmarks/c/rb_print.c: libbpf's
ring_buffer__poll printing the same JSON lines, or counting with an empty callback;
benchmarks/c/testrun_loop.c: libbpf load + one bpf_prog_test_run_opts per frame of the pcap) and
measures, in the same run, median of ``--runs``:

- ``events --json``: N records already in a ring buffer (written by BPF_PROG_TEST_RUN of the
  bench's program with repeat=N), whole ``bpfdsl events MAP --json --count N`` process
  against ``rb_print``; the records of both outputs must be the same;
- the Python API: ``EventStream.read_batches()`` + ``RecordBatch.array()`` (numpy) and
  ``.rows()``, and ``EventStream.poll()`` (Event objects), in records/s, against rb_print
  with an empty callback;
- ``run --pcap -q`` with the kernel engine over a capture of N UDP frames, whole process
  (start-up included), against ``testrun_loop``; the verdict totals must be the same;
- map tables: N entries of a hash map with a flow key (``struct flow { saddr, daddr: be32,
  sport, dport: be16, proto: u8 }``) and a counters/action value, written into the same
  pinned map (emptied between runs) by ``bpftool batch file F`` (N ``map update pinned ...
  key hex ... value hex ...`` lines), by the whole ``bpfdsl map update MAP --from F.jsonl``
  process and by the Python API ``open_map(MAP).update_batch(...)`` from typed Python values
  (dicts, addresses as text); the map's bytes after each must be the same; and the dump,
  ``bpfdsl map dump MAP --json`` against ``bpftool map dump pinned P -j``.

``--tree DIR`` times another checkout's ``bpfdsl`` (e.g. the main branch, for before/after
figures); the Python API rows always use this tree.  Exits 1 only when it cannot run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

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
    """``python -P -m bpfdsl`` of ``tree`` (-P: not the package of the current directory),
    its byte code cached under the temp dir (PYTHONPYCACHEPREFIX, also where the
    environment sets PYTHONDONTWRITEBYTECODE) as an installed package has it: no run but
    the first compiles the modules from source."""
    env = dict(os.environ)
    root = (tree or B.ROOT).resolve()
    env["PYTHONPATH"] = str(root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(
        tempfile.gettempdir(),
        "bpfdsl-ub-pycache-" + hashlib.sha1(str(root).encode()).hexdigest()[:12],
    )
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


MAPS = """license "GPL"
struct flow { saddr: be32, daddr: be32, sport: be16, dport: be16, proto: u8 }
struct flow_stats { packets: u64, bytes: u64, action: u32, next_hop: mac_addr }
map flows: hash<flow, flow_stats>(max_entries: MAX)

xdp fn count(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let k = flow(saddr: ip.saddr, daddr: ip.daddr, sport: be16(0), dport: be16(0), proto: ip.protocol)
    if let s = flows.lookup(k) {
        s.packets += 1
        if s.action == 1 { return XDP_DROP }
    }
    return XDP_PASS
}
"""
# the C layout of both structs (bpfdsl lays structs out as C does; checked against the map)
_KEY = struct.Struct("!4s4sHHB3x")  # saddr, daddr (network order), sport, dport (be16), proto
_VALUE = struct.Struct("<QQI6s6x")  # packets, bytes, action, next_hop; 32 bytes (8-aligned)


def flow_entry(i: int) -> tuple[dict, dict]:
    """Entry i as typed Python values (the forms ``map dump --json`` prints)."""
    key = {
        "saddr": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
        "daddr": f"192.0.2.{i % 7 + 1}",
        "sport": 1024 + i % 60000,
        "dport": (53, 80, 443)[i % 3],
        "proto": (6, 17)[i % 2],
    }
    value = {
        "packets": i * 3,
        "bytes": i * 1500,
        "action": i % 4,
        "next_hop": f"02:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
    }
    return key, value


def flow_bytes(i: int) -> tuple[bytes, bytes]:
    """Entry i's key and value bytes, packed here (not by bpfdsl) for bpftool."""
    k, v = flow_entry(i)
    key = _KEY.pack(bytes(int(x) for x in k["saddr"].split(".")),
                    bytes(int(x) for x in k["daddr"].split(".")), k["sport"], k["dport"],
                    k["proto"])  # fmt: skip
    val = _VALUE.pack(v["packets"], v["bytes"], v["action"],
                      bytes.fromhex(v["next_hop"].replace(":", "")))  # fmt: skip
    return key, val


def _raw_dump(pin: str) -> list[tuple[bytes, bytes | None]]:
    from bpfdsl.runtime.mapview import open_map

    with open_map(pin) as m:
        return sorted(m.raw_items())


def _empty(pin: str) -> None:
    """Delete every entry (untimed, between runs)."""
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.mapview import open_map

    with open_map(pin) as m:
        keys = [k for k, _ in m.raw_items()]
        for i in range(0, len(keys), 4096):
            part = keys[i : i + 4096]
            syscall.map_delete_batch(m.fd, b"".join(part), len(part))
        if next(m.raw_items(), None) is not None:
            raise B.BenchError("the bench map did not empty")


def api_write(pin: str, entries: list[tuple[dict, dict]]) -> tuple[float, float]:
    """(wall, CPU) seconds for ``open_map(pin).update_batch(entries)`` (open included)."""
    from bpfdsl.runtime.mapview import open_map

    t0, c0 = time.perf_counter(), time.process_time()
    with open_map(pin) as m:
        n = m.update_batch(entries)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    if n != len(entries):
        raise B.BenchError(f"update_batch wrote {n} of {len(entries)} entries")
    return dt, dc


def timed_cpu(cmd, env=None) -> tuple[float, float, subprocess.CompletedProcess]:
    """:func:`timed` and the child's CPU seconds (user + system, from its rusage): on a
    shared machine the CPU time each side needs is steadier than the wall time."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t, r = timed(cmd, env)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return t, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), r


def bench_maps(n: int, runs: int, tree: Path | None, tmp: Path) -> dict:
    from bpfdsl.cli import main
    from bpfdsl.runtime.mapview import open_map

    B.require_tool("bpftool", "apt-get install bpftool (or linux-tools)")
    src = tmp / "flows.bpfd"
    src.write_text(MAPS.replace("MAX", str(max(n, 1024) * 5 // 4)))
    obj = tmp / "flows.o"
    err = B.compile_ours(src, obj)
    if err:
        raise B.BenchError(f"cannot compile the map bench program: {err}")
    pin = f"/sys/fs/bpf/bpfdsl_ubmap_{uuid.uuid4().hex[:8]}"
    with contextlib.redirect_stdout(io.StringIO()):
        loaded = main(["load", str(obj), "--pin-dir", pin])
    if loaded != 0:
        raise B.BenchError("bpfdsl load of the map bench program failed")
    mpin = f"{pin}/maps/flows"
    res: dict[str, Any] = {k: [] for k in ("bpftool_s", "cli_s", "api_s", "dump_bpftool_s",
                                           "dump_cli_s", "bpftool_cpu", "cli_cpu", "api_cpu",
                                           "dump_bpftool_cpu", "dump_cli_cpu")}  # fmt: skip
    same = True
    try:
        with open_map(mpin) as m:
            if (m.key_size, m.value_size) != (_KEY.size, _VALUE.size):
                raise B.BenchError(f"flow/flow_stats are {m.key_size}/{m.value_size} bytes, "
                                   f"the bench packs {_KEY.size}/{_VALUE.size}")  # fmt: skip
        entries = [flow_entry(i) for i in range(n)]
        packed = [flow_bytes(i) for i in range(n)]
        batch = tmp / "flows.batch"
        with open(batch, "w") as f:
            for k, v in packed:
                f.write(f"map update pinned {mpin} key hex {k.hex(' ')} value hex {v.hex(' ')}\n")
        jsonl = tmp / "flows.jsonl"
        with open(jsonl, "w") as f:
            for k, v in entries:
                f.write(json.dumps({"key": k, "value": v}) + "\n")
        want = sorted(packed)
        cmd, env = bpfdsl_cmd(tree)
        timed([*cmd, "map", "update", mpin, "--from", str(jsonl)], env)  # byte code cached
        timed([*cmd, "map", "dump", mpin, "--json"], env)
        for _ in range(runs):
            _empty(mpin)
            t, c, _ = timed_cpu(["bpftool", "batch", "file", str(batch)])
            res["bpftool_s"].append(t)
            res["bpftool_cpu"].append(c)
            same = same and _raw_dump(mpin) == want
            t, c, _ = timed_cpu(["bpftool", "map", "dump", "pinned", mpin, "-j"])
            res["dump_bpftool_s"].append(t)
            res["dump_bpftool_cpu"].append(c)
            t, c, r = timed_cpu([*cmd, "map", "dump", mpin, "--json"], env)
            res["dump_cli_s"].append(t)
            res["dump_cli_cpu"].append(c)
            same = same and len(json.loads(r.stdout)["entries"]) == n
            _empty(mpin)
            t, c, _ = timed_cpu([*cmd, "map", "update", mpin, "--from", str(jsonl)], env)
            res["cli_s"].append(t)
            res["cli_cpu"].append(c)
            same = same and _raw_dump(mpin) == want
            _empty(mpin)
            t, c = api_write(mpin, entries)
            res["api_s"].append(t)
            res["api_cpu"].append(c)
            same = same and _raw_dump(mpin) == want
    finally:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["unload", pin])
    res["same"] = same
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=500_000)
    ap.add_argument("--frames", type=int, default=100_000)
    ap.add_argument("--entries", type=int, default=100_000, help="map entries written")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--paths", default="events,run,maps",
                    help="comma-separated subset of events,run,maps")  # fmt: skip
    ap.add_argument("--tree", type=Path, help="time this checkout's bpfdsl (before/after)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one run (< 1 minute)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    if args.quick:
        args.records, args.frames, args.entries, args.runs = 2000, 2000, 2000, 1
    paths = set(args.paths.split(","))
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
            ev = bench_events(obj, refs, args.records, args.runs, args.tree) \
                if "events" in paths else None  # fmt: skip
            rn = bench_run(obj, refs, args.frames, args.runs, args.tree, tmp) \
                if "run" in paths else None  # fmt: skip
            mp = bench_maps(args.entries, args.runs, args.tree, tmp) if "maps" in paths else None
    except B.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    m = B.median
    n, f, e = args.records, args.frames, args.entries
    rows = []
    if ev is not None:
        rows.append(["events --json", f"{n / m(ev['ours_s']):,.0f} rec/s",
                     f"{n / m(ev['c_s']):,.0f} rec/s", f"{m(ev['c_s']) / m(ev['ours_s']):.3f}",
                     "≥ 0.1", B.verdict(m(ev['c_s']) / m(ev['ours_s']) >= 0.1),
                     "yes" if ev["same"] else "NO"])  # fmt: skip
        for form in ("array", "rows", "objects"):
            s = m(ev["api_s"][form])
            goal = "≥ 5M rec/s" if form == "array" else ""
            rows.append([f"API {form}", f"{n / s:,.0f} rec/s",
                         f"{n / m(ev['c_empty_s']):,.0f} rec/s", f"{m(ev['c_empty_s']) / s:.3f}",
                         goal, B.verdict(n / s >= 5e6) if goal else "", ""])  # fmt: skip
    if rn is not None:
        ratio = m(rn["c_s"]) / m(rn["ours_s"])
        rows.append(["run --pcap -q", f"{f / m(rn['ours_s']):,.0f} frames/s",
                     f"{f / m(rn['c_s']):,.0f} frames/s", f"{ratio:.3f}", "≥ 0.3",
                     B.verdict(ratio >= 0.3), "yes" if rn["same"] else "NO"])  # fmt: skip
    if rows:
        print(f"{n} records, {f} frames, median of {args.runs} run(s); bpfdsl from "
              f"{args.tree or B.ROOT}; C: libbpf ring_buffer__poll / bpf_prog_test_run_opts "
              "loop (API rows: against the empty callback; whole processes include start-up)")  # fmt: skip
        print(B.table(["path", "bpfdsl", "C", "ratio", "goal", "", "same output"], rows))
    if mp is not None:
        mrows = []
        for label, key, ref, goal in (
            ("map update --from F.jsonl", "cli", "bpftool", 1.0),
            ("API open_map().update_batch()", "api", "bpftool", 1.0),
            ("map dump --json", "dump_cli", "dump_bpftool", None),
        ):
            t, rt = m(mp[f"{key}_s"]), m(mp[f"{ref}_s"])
            cpu, rcpu = m(mp[f"{key}_cpu"]), m(mp[f"{ref}_cpu"])
            mrows.append([label, f"{t:.3f} s", f"{e / t:,.0f}/s", f"{rt:.3f} s",
                          f"{t / rt:.2f}", f"{cpu:.2f} / {rcpu:.2f} s", f"{cpu / rcpu:.2f}",
                          f"≤ {goal}" if goal else "", B.verdict(t / rt <= goal) if goal else "",
                          "yes" if mp["same"] else "NO"])  # fmt: skip
        print(f"\n{e} hash entries (flow key, counters/action value), median of {args.runs} "
              f"run(s); bpfdsl from {args.tree or B.ROOT}; reference: `bpftool batch file` of "
              "`map update pinned` lines / `bpftool map dump -j`, same map, whole processes")  # fmt: skip
        print(B.table(["path", "bpfdsl", "entries/s", "bpftool", "ours/bpftool",
                       "CPU ours / bpftool", "CPU ratio", "goal", "", "same map"],
                      mrows))  # fmt: skip
    if note:
        print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(
            json.dumps({"events": ev, "run": rn, "maps": mp, "load": os.getloadavg()})
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
