#!/usr/bin/env python3
"""Load benchmark (issue 3): load + pin + attach of the same object, bpfdsl vs bpftool.

One timed iteration is two processes, run inside a namespace this script creates (entered
with ``nsenter --net``; ``ip netns exec`` would hide /sys/fs/bpf):
  bpfdsl : ``bpfdsl load OBJ --pin-dir DIR``  then  ``bpfdsl attach DIR DEV --prog PROG``
  bpftool: ``bpftool prog loadall OBJ DIR``    then  ``bpftool net attach xdp pinned DIR/PROG dev DEV``
Between iterations (untimed) the program is detached and the pin directory removed.  The
figure is the whole-process median over --runs iterations and the ratio bpfdsl/bpftool
(goal <= 1.5).  Done for the bpfdsl-compiled object (progs/NAME.bpfd) and the clang-19 one
(tests/data/c/NAME.c): both tools load both objects.  Exit status 0 whether or not the goal
is met; 1 when the benchmark cannot run.  The namespace, veths and pins are removed on exit,
also on failure.

Usage: python3 bench/load_bench.py [--program xdp_udp_filter] [--runs N] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib as B
from netns import VethNs

GOAL_RATIO = 1.5


def ours_steps(obj: Path, pin: Path, prog: str, dev: str) -> list[list[str]]:
    """The bpfdsl command lines of one load + pin + attach."""
    bpfdsl = [sys.executable, "-m", "bpfdsl"]
    return [
        [*bpfdsl, "load", str(obj), "--pin-dir", str(pin)],
        [*bpfdsl, "attach", str(pin), dev, "--prog", prog],
    ]


def ours_undo(pin: Path, dev: str) -> list[list[str]]:
    bpfdsl = [sys.executable, "-m", "bpfdsl"]
    return [[*bpfdsl, "unload", str(pin)], [*bpfdsl, "detach", dev]]


def bpftool_steps(obj: Path, pin: Path, prog: str, dev: str) -> list[list[str]]:
    return [
        ["bpftool", "prog", "loadall", str(obj), str(pin)],
        ["bpftool", "net", "attach", "xdp", "pinned", str(pin / prog), "dev", dev],
    ]


def bpftool_undo(pin: Path, dev: str) -> list[list[str]]:
    return [["bpftool", "net", "detach", "xdp", "dev", dev], ["rm", "-rf", str(pin)]]


def xdp_attached(ns: VethNs, dev: str) -> bool:
    return " xdp" in ns.ip("-d", "link", "show", "dev", dev).stdout.replace("xdpgeneric", " xdp")


def one_run(ns: VethNs, steps, undo, env) -> tuple[float, float]:
    """Time each step (seconds), check the program is attached, then undo (untimed)."""
    times = []
    try:
        for cmd in steps:
            t0 = time.perf_counter()
            B.run(ns.in_ns(cmd), env=env)
            times.append(time.perf_counter() - t0)
    finally:
        for cmd in undo:
            B.run(ns.in_ns(cmd), env=env, check=False)
    return times[0], times[1]


def have_bpfdsl_cli(env) -> bool:
    """True when this tree's CLI has the load and attach commands."""
    for cmd in ("load", "attach"):
        proc = B.run([sys.executable, "-m", "bpfdsl", cmd, "--help"], env=env, check=False)
        if proc.returncode != 0:
            return False
    return True


def bench(objs: dict[str, Path], runs: int) -> dict:
    """objs: label -> object path.  Returns rows per (object, tool) and notes."""
    env = B.env_with_tree()
    rows, notes = [], []
    tools = [("bpfdsl", ours_steps, ours_undo), ("bpftool", bpftool_steps, bpftool_undo)]
    if not have_bpfdsl_cli(env):
        notes.append("`bpfdsl load`/`bpfdsl attach` not available in this tree: bpftool only")
        tools = tools[1:]
    B.ensure_bpffs()
    with VethNs(1) as ns:
        dev = ns.pairs[0][0]
        for label, obj in objs.items():
            prog = program_name(obj)
            per_tool = {}
            for tool, steps_f, undo_f in tools:
                loads, attaches, totals = [], [], []
                for _ in range(runs):
                    pin = Path("/sys/fs/bpf") / f"bpfdsl_lbench_{uuid.uuid4().hex[:10]}"
                    try:
                        steps = steps_f(obj, pin, prog, dev)
                        # check the attach took effect on the first run (outside the timing)
                        t_load, t_att = one_run(ns, steps, [], env)
                        if not loads and not xdp_attached(ns, dev):
                            raise B.BenchError(f"{tool}: no XDP program on {dev} after attach")
                    finally:
                        for cmd in undo_f(pin, dev):
                            B.run(ns.in_ns(cmd), env=env, check=False)
                        shutil.rmtree(pin, ignore_errors=True)
                    loads.append(t_load)
                    attaches.append(t_att)
                    totals.append(t_load + t_att)
                per_tool[tool] = {
                    "load_ms": B.median(loads) * 1000,
                    "attach_ms": B.median(attaches) * 1000,
                    "total_ms": B.median(totals) * 1000,
                }
            ratio = None
            if "bpfdsl" in per_tool:
                ratio = per_tool["bpfdsl"]["total_ms"] / per_tool["bpftool"]["total_ms"]
            rows.append(
                {
                    "object": label,
                    "runs": runs,
                    **{f"{t}_{k}": v for t, d in per_tool.items() for k, v in d.items()},
                    "ratio": ratio,
                    "goal": None if ratio is None else ratio <= GOAL_RATIO,
                }
            )
    floor = B.python_floor(runs, ["bpfdsl.cli", "bpfdsl.loader", "bpfdsl.attach"])
    return {"rows": rows, "notes": notes, "floor_ms": floor}


def render(res: dict) -> str:
    head = [
        "object",
        "runs",
        "bpfdsl load",
        "attach",
        "total ms",
        "bpftool load",
        "attach",
        "total ms",
        "ratio",
        "goal",
    ]
    keys = [
        "bpfdsl_load_ms",
        "bpfdsl_attach_ms",
        "bpfdsl_total_ms",
        "bpftool_load_ms",
        "bpftool_attach_ms",
        "bpftool_total_ms",
    ]
    rows = [
        [
            r["object"],
            r["runs"],
            *(_f(r.get(k)) for k in keys),
            _f(r["ratio"], ".2f"),
            B.verdict(r["goal"]),
        ]
        for r in res["rows"]
    ]
    return "\n".join(
        [
            f"Load + pin + attach, whole-process medians (ms); goal: ratio <= {GOAL_RATIO}",
            B.table(head, rows),
        ]
        + [
            "note: start-up floor of a bpfdsl process (medians): "
            + ", ".join(f"{k} {v:.1f} ms" for k, v in res.get("floor_ms", {}).items())
        ]
        + [f"note: {n}" for n in res["notes"]]
    )


def _f(v, spec=".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default="xdp_udp_filter", help="reference program name")
    ap.add_argument("--runs", type=int, default=15, help="timed iterations per tool and object")
    ap.add_argument("--quick", action="store_true", help="3 iterations (< 1 min)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    if a.quick:
        a.runs = min(a.runs, 3)
    if a.runs < 1:
        ap.error("--runs must be >= 1")
    csrc, bpfd = B.C_DIR / f"{a.program}.c", B.PROGS / f"{a.program}.bpfd"
    if not csrc.exists():
        ap.error(f"no C reference tests/data/c/{a.program}.c")
    try:
        B.require_root()
        B.require_tool("bpftool", "apt-get install bpftool")
        with tempfile.TemporaryDirectory(prefix="bpfdsl-lbench-") as tmp:
            objs = {"clang": B.build_c(Path(tmp), [a.program])[a.program]}
            notes = []
            ours = Path(tmp) / f"{a.program}.ours.o"
            why = B.compile_ours(bpfd, ours)
            if why is None:
                objs = {"bpfdsl": ours, **objs}
            else:
                notes.append(f"{why}: clang object only")
            res = bench(objs, a.runs)
            res["notes"] += notes
    except B.BenchError as e:
        print(f"load_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        res.setdefault("notes", []).append(busy)
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


def program_name(obj: Path) -> str:
    """Name of the first program in section ``xdp`` of ``obj`` (what both tools pin)."""
    for sec, name, _n in B.program_slots(obj):
        if sec == "xdp":
            return name
    raise B.BenchError(f"{obj.name} has no program in section xdp")


if __name__ == "__main__":
    sys.exit(main())
