#!/usr/bin/env python3
"""XDP throughput benchmark (issue 4): packets per second, bpfdsl vs clang-19, same run.

Traffic: our live-frame generator (bench/xdpgen.py: BPF_PROG_TEST_RUN with
BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX out of veth ``va0``) sends 60-byte IPv4/UDP frames
(64 on the wire with FCS) into ``vb0``, where the program under test runs in native (driver)
XDP mode.  Scenarios:
  drop    vb0: xdp_drop                                   counted: frames vb0's XDP processed
  devmap  vb0: xdp_devmap_forward -> va1 (with its xdp/devmap program when the object has one);
          vb1 runs a drop program so veth accepts XDP frames   counted: frames reaching vb1
  cpumap  vb0: xdp_cpumap_steer -> cpumap slot of the other CPU, whose entry runs the object's
          xdp/cpumap program (it drops the UDP test port)   counted: frames the on-CPU
          program saw (its per-CPU counter map) when it has one, else frames redirected
The generator is pinned to CPU 0 (veth's NAPI runs there too); cpumap targets CPU 1.  Both
objects are loaded the same way (libbpf via ``bpftool prog loadall``) so only the code differs;
runs alternate clang/bpfdsl.  pps = counted frames / wall-clock seconds of the BPF_PROG_RUN
call.  Table per scenario: each run, the average and the delta against clang in percent;
goal (issue 4): bpfdsl >= 0.98 x clang.  Everything (namespace, veths, pins) is removed on
exit, also on failure.  Exit status 0 whether or not goals are met.

Usage: python3 bench/xdp_bench.py [--scenarios drop,devmap,cpumap] [--runs N]
                                   [--frames N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import sys
import tempfile
import time
from pathlib import Path

import benchlib as B
from netns import VethNs

GOAL = 0.98
SCENARIOS = {"drop": "xdp_drop", "devmap": "xdp_devmap_forward", "cpumap": "xdp_cpumap_steer"}
UDP_PORT = 9  # destination port of the test frames (the cpumap programs drop it)


def percpu_sum(fd, info, key: int = 0) -> int:
    from bpfdsl.kernel import syscall

    n = syscall.possible_cpus()
    raw = syscall.map_lookup(fd, struct.pack("<I", key), syscall.percpu_value_size(8)) or b""
    return sum(struct.unpack_from("<Q", raw, 8 * i)[0] for i in range(n) if len(raw) >= 8 * (i + 1))


def setup(scenario: str, lo: B.Loaded, ns: VethNs, sink_fd) -> callable:
    """Attach the scenario's program(s) of ``lo``; returns a function -> counted frames so far."""
    from xdpgen import link_stats

    from bpfdsl.abi.uapi import MapType
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime import attach

    (va0, vb0) = ns.pairs[0]
    attach.attach_xdp(int(lo.progs["xdp"]), vb0, mode="native", method="netlink", replace=True)
    if scenario == "drop":
        return lambda: link_stats(vb0)["rx"]["packets"]
    if scenario == "devmap":
        (va1, vb1) = ns.pairs[1]
        attach.attach_xdp(int(sink_fd), vb1, mode="native", method="netlink", replace=True)
        dev_prog = lo.progs.get("xdp/devmap")
        val = struct.pack("<Ii", ns.ifindex(va1), int(dev_prog) if dev_prog else 0)
        hit = lo.map_of_type(MapType.DEVMAP_HASH)
        if hit is not None:  # keyed by ingress ifindex
            syscall.map_update(hit[0], struct.pack("<I", ns.ifindex(vb0)), val[: hit[1].value_size])
        else:
            hit = lo.map_of_type(MapType.DEVMAP)
            if hit is None:
                raise B.BenchError("devmap object has no devmap/devmap_hash map")
            for k in range(min(hit[1].max_entries, 64)):  # every slot: the key scheme varies
                syscall.map_update(hit[0], struct.pack("<I", k), val[: hit[1].value_size])
        return lambda: link_stats(vb1)["rx"]["packets"]
    if scenario == "cpumap":
        cpu = 1 if syscall.possible_cpus() > 1 else 0
        cpumap = lo.map_of_type(MapType.CPUMAP)
        arr = lo.map_of_type(MapType.ARRAY)
        if cpumap is None:
            raise B.BenchError("cpumap object has no cpumap")
        on_cpu = lo.progs.get("xdp/cpumap")
        val = struct.pack("<Ii", 2048, int(on_cpu) if on_cpu else 0)
        syscall.map_update(cpumap[0], struct.pack("<I", cpu), val[: cpumap[1].value_size])
        if arr is not None and arr[1].value_size == 4:  # slot -> CPU table: all slots -> cpu
            for k in range(min(arr[1].max_entries, 64)):
                syscall.map_update(arr[0], struct.pack("<I", k), struct.pack("<I", cpu))
        counter = lo.map_of_type(MapType.PERCPU_ARRAY)
        if counter is not None:
            return lambda: percpu_sum(*counter)
        return lambda: link_stats(vb0)["rx"]["packets"]
    raise B.BenchError(f"unknown scenario {scenario}")


def bench(
    objs: dict[str, dict[str, Path]], scenarios, runs: int, frames: int, budget: float = 1e9
) -> dict:
    """objs: scenario -> {impl label: object}.  Returns per scenario and impl the pps of each run."""
    from xdpgen import LiveFrameGenerator

    from bpfdsl.kernel import netlink
    from bpfdsl.runtime.packets import udp_frame

    frame = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=4242,
        dport=UDP_PORT,
        payload=bytes(18),
    )
    res = {"frames_per_run": frames, "frame_bytes": len(frame), "scenarios": {}, "notes": []}
    # each scenario gets an equal share of the time budget; at least one run per impl
    share = budget / max(len(scenarios), 1)
    B.ensure_bpffs()
    old_aff = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {0})
    loaded: list[B.Loaded] = []
    try:
        sink = B.Loaded(objs["drop"]["clang"])  # drop program on vb1 for devmap, same for both
        loaded.append(sink)
        for sc in scenarios:
            per = {label: [] for label in objs[sc]}
            los = {}
            for label, obj in objs[sc].items():
                los[label] = B.Loaded(obj)
                loaded.append(los[label])
            with VethNs(2) as ns, netlink.in_netns(ns.name):
                with LiveFrameGenerator(ns.ifindex(ns.pairs[0][0]), frame) as gen:
                    t_start = time.monotonic()
                    for i in range(runs):
                        if i and time.monotonic() - t_start > share:
                            res["notes"].append(f"{sc}: time budget reached after {i} runs")
                            break
                        order = list(los.items())
                        if i % 2:  # ABBA order: drift and warm-up favour nobody
                            order.reverse()
                        for label, lo in order:
                            count = setup(sc, lo, ns, sink.progs["xdp"])
                            gen.send(min(frames // 10, 100_000))  # warm-up
                            time.sleep(0.02)
                            c0 = count()
                            secs = gen.send(frames)
                            time.sleep(0.05)  # let NAPI / the cpumap kthread drain
                            got = count() - c0
                            if got < frames // 100:
                                raise B.BenchError(
                                    f"{sc}/{label}: only {got} of {frames} frames counted; "
                                    "the program under test did not receive the traffic"
                                )
                            per[label].append(got / secs)
            res["scenarios"][sc] = per
    finally:
        os.sched_setaffinity(0, old_aff)
        for lo in loaded:
            lo.close()
    return res


def render(res: dict) -> str:
    out = [
        f"XDP pps ({res['frame_bytes']}-byte frames + FCS, {res['frames_per_run']} frames "
        f"per run, runs in ABBA order); goal: bpfdsl >= {GOAL} x clang"
    ]
    for sc, per in res["scenarios"].items():
        runs = max(len(v) for v in per.values())
        head = [
            "scenario",
            "impl",
            *[f"run {i + 1}" for i in range(runs)],
            "average",
            "sd",
            "delta",
            "goal",
        ]
        base = B.mean_sd(per["clang"])[0] if "clang" in per else None
        rows = []
        for label, xs in per.items():
            avg, sd = B.mean_sd(xs)
            delta, goal = "baseline", "-"
            if label != "clang" and base:
                delta = f"{(avg / base - 1) * 100:+.2f}%"
                goal = B.verdict(avg >= GOAL * base) if label == "bpfdsl" else "-"
            cells = [f"{x / 1e6:.3f}M" for x in xs] + ["-"] * (runs - len(xs))
            rows.append([sc, label, *cells, f"{avg / 1e6:.3f}M", f"{sd / 1e6:.3f}M", delta, goal])
        out += ["", B.table(head, rows)]
    if any("clang-again" in per for per in res["scenarios"].values()):
        out.append(
            "note: clang-again = the clang object loaded a second time (A/A): its delta "
            "is the noise floor of this run"
        )
    out += [f"note: {n}" for n in res.get("notes", [])]
    return "\n".join(out)


def build_objects(work: Path, scenarios, aa: bool = False) -> tuple[dict, list[str]]:
    """clang objects for every scenario (+ xdp_drop for the devmap sink), ours where the
    .bpfd exists and compiles."""
    names = sorted({SCENARIOS[s] for s in scenarios} | {"xdp_drop"})
    cobjs = B.build_c(work / "clang", names)
    notes, objs = [], {}
    for sc in ("drop", *scenarios):
        name = SCENARIOS[sc]
        objs[sc] = {"clang": cobjs[name]}
        if aa and sc in scenarios:
            objs[sc]["clang-again"] = cobjs[name]
        out = work / f"{name}.ours.o"
        why = B.compile_ours(B.PROGS / f"{name}.bpfd", out)
        if why is None:
            objs[sc]["bpfdsl"] = out
        else:
            notes.append(f"{sc}: {why}, clang only")
    return objs, sorted(set(notes))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="drop,devmap,cpumap", help="comma-separated subset")
    ap.add_argument("--runs", type=int, default=10, help="runs per implementation")
    ap.add_argument("--frames", type=int, default=3_000_000, help="frames per run")
    ap.add_argument("--quick", action="store_true", help="2 runs of 200000 frames (< 1 min)")
    ap.add_argument("--aa", action="store_true", help="also measure clang against itself")
    ap.add_argument("--budget", type=float, default=240, help="seconds of measuring (all runs)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    if a.quick:
        a.runs, a.frames = min(a.runs, 2), min(a.frames, 200_000)
    scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad or not scenarios:
        ap.error(f"unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    if a.runs < 1 or not 1000 <= a.frames <= 50_000_000:
        ap.error("--runs >= 1 and 1000 <= --frames <= 50000000")
    try:
        B.require_root()
        B.require_tool("bpftool", "apt-get install bpftool")
        with tempfile.TemporaryDirectory(prefix="bpfdsl-xbench-") as tmp:
            objs, notes = build_objects(Path(tmp), scenarios, a.aa)
            res = bench(objs, scenarios, a.runs, a.frames, a.budget)
            res["notes"] += notes
    except B.BenchError as e:
        print(f"xdp_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        res.setdefault("notes", []).append(busy)
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
