#!/usr/bin/env python3
"""XDP throughput benchmark (issue 4): packets per second, bpfdsl vs clang-19, same run.

A thin layer over ``bpfdsl bench``'s library (bpfdsl/bench): each scenario runs
the program compiled from ``progs/NAME.bpfd`` against its clang twin
``tests/data/c/NAME.c`` as the baseline, on the command's own setup (two namespaces joined
by the veth pair gen0 <-> dut0, a live-frame generator on CPU 0: BPF_PROG_TEST_RUN with
BPF_F_TEST_XDP_LIVE_FRAMES, XDP_TX out of gen0), in ABBA order.  Scenarios and what counts:
  drop    xdp_drop on dut0 (bench xdp)                  frames dut0's program ran on / s
  devmap  xdp_devmap_forward -> egr1 with its xdp/devmap program (bench redirect)
                                                        frames that arrived at snk1 / s
  cpumap  xdp_cpumap_steer -> CPU 1, whose entry runs its xdp/cpumap program (bench
          redirect, CPU table slot 0 -> 1, no TCP)      frames the remote CPU processed / s
Both objects are loaded by bpfdsl's loader, so only the generated code differs.  Table per
scenario: each run, the average, ± sd and the delta against clang; goal (issue 4): bpfdsl
>= 0.98 x clang.  Where the .bpfd does not compile, clang is measured alone (a note says
why).  Everything is removed on exit, also on failure.  Exit status 0 whether or not goals
are met (1 only when it cannot run).

Usage: python3 benchmarks/xdp_bench.py [--scenarios drop,devmap,cpumap] [--runs N]
                                   [--duration S] [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import benchlib as B

from bpfdsl.bench import xdp
from bpfdsl.bench.report import RichProgress
from bpfdsl.bench.target import ObjectUnderTest
from bpfdsl.diagnostics import DiagnosticError

GOAL = 0.98
SCENARIOS = {"drop": "xdp_drop", "devmap": "xdp_devmap_forward", "cpumap": "xdp_cpumap_steer"}
COUNTED = {"drop": "rx_pps", "devmap": "egress_pps", "cpumap": "cpu_pps"}  # metric per scenario
MAPS = {"cpumap": [("cpus", "0", "1")]}  # the CPU table: slot 0 -> CPU 1


def run_scenario(sc: str, objs: list[ObjectUnderTest], runs: int, duration: float):
    opts = xdp.XdpOptions(runs=runs, duration=duration, tcp=False)
    if sc == "cpumap":
        opts.cpus = [1]
    run = xdp.run_xdp if sc == "drop" else xdp.run_redirect
    return run(objs, opts, RichProgress())


def goal_line(sc: str, rep) -> str:
    key = COUNTED[sc]
    (s,) = [s for s in rep.sections if any(m.key == key for m in s.metrics)]
    if "bpfdsl" not in s.runs or "clang" not in s.runs:
        return f"{sc}: goal n/a (one implementation only)"
    ratio = s.average("bpfdsl", key)[0] / s.average("clang", key)[0]
    return f"{sc}: bpfdsl/clang {key} = {ratio:.3f}: {B.verdict(ratio >= GOAL)} (goal >= {GOAL})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="drop,devmap,cpumap", help="comma-separated subset")
    ap.add_argument("--runs", type=int, default=10, help="runs per implementation")
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of traffic per run")
    ap.add_argument("--quick", action="store_true", help="2 runs of 0.3 s (< 1 min)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    if a.quick:
        a.runs, a.duration = min(a.runs, 2), min(a.duration, 0.3)
    scenarios = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    bad = [s for s in scenarios if s not in SCENARIOS]
    if bad or not scenarios:
        ap.error(f"unknown scenario(s) {bad}; choose from {', '.join(SCENARIOS)}")
    if a.runs < 1 or not 0.05 <= a.duration <= 600:
        ap.error("--runs >= 1 and 0.05 <= --duration <= 600")
    res: dict = {"duration_s": a.duration, "runs": a.runs, "scenarios": {}, "notes": []}
    out = []
    try:
        B.require_root()
        with tempfile.TemporaryDirectory(prefix="bpfdsl-xbench-") as tmp:
            work = Path(tmp)
            cobjs = B.build_c(work / "clang", [SCENARIOS[s] for s in scenarios])
            for sc in scenarios:
                name = SCENARIOS[sc]
                maps = MAPS.get(sc, [])
                clang = ObjectUnderTest(
                    "clang", str(cobjs[name]), cobjs[name].read_bytes(), maps=maps
                )
                ours = work / f"{name}.ours.o"
                why = B.compile_ours(B.PROGS / f"{name}.bpfd", ours)
                if why is None:
                    objs = [
                        ObjectUnderTest("bpfdsl", str(ours), ours.read_bytes(), maps=maps),
                        clang,
                    ]
                else:
                    objs = [clang]
                    res["notes"].append(f"{sc}: {why}, clang only")
                rep = run_scenario(sc, objs, a.runs, a.duration)
                key = COUNTED[sc]
                (s,) = [s for s in rep.sections if any(m.key == key for m in s.metrics)]
                res["scenarios"][sc] = {lbl: s.values(lbl, key) for lbl in s.runs}
                res.setdefault("reports", {})[sc] = rep.to_dict()
                out += [rep.render(), goal_line(sc, rep), ""]
    except (B.BenchError, DiagnosticError) as e:
        print(f"xdp_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        res["notes"].append(busy)
    print("\n".join(out + [f"note: {n}" for n in res["notes"]]))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
