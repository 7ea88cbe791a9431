#!/usr/bin/env python3
"""sk_msg benchmark (issue 5): TCP over loopback, plain vs sk_msg ingress redirection.

A thin layer over ``bpfdsl bench skmsg``'s library (bpfdsl/bench/skmsg.py): for
every message size (64 B ... 256 KiB) and mode -- ``plain`` (no program), ``clang``
(tests/data/c/sk_msg_redirect_ingress.c built with clang-19, the baseline) and ``bpfdsl``
(progs/sk_msg_redirect_ingress.bpfd) -- it measures
  throughput: SIZE-byte messages sent for --millis ms, MB/s = bytes received / time to the
              last byte (1 MB = 1e6 B);
  latency:    ping-pong of a SIZE-byte message answered by 1 byte (TCP_NODELAY); round
              trip in microseconds, mean per run;
and prints mean ± sample standard deviation over --runs runs, the change against plain TCP
in percent and the ratio bpfdsl / clang (goal: bpfdsl >= 0.98 x clang throughput at every size).

Sender and receiver are the command's C helper (bpfdsl/bench/tcpbench.c, compiled
with the host's cc): one send()/recv() system call per message, in a network namespace of
its own (its TCP OutSegs count only its traffic: segs/msg ≈ 0 shows redirected data
skipped the TCP stack), in a child cgroup v2 where the object's sock_ops program is
attached.  Exit status 0 whether or not goals are met.

Usage: python3 benchmarks/skmsg_bench.py [--runs N] [--sizes 64,1k,...] [--millis MS] [--quick]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import benchlib as B

from bpfdsl.bench import skmsg
from bpfdsl.bench.report import RichProgress
from bpfdsl.bench.target import ObjectUnderTest
from bpfdsl.diagnostics import DiagnosticError, UsageError

GOAL = 0.98
NAME = "sk_msg_redirect_ingress"
QUICK_SIZES = (64, 4096, 262144)
KEYS = {"tput": "tput_mbs", "lat": "lat_us", "user": "send_user_pct", "segs": "segs_per_msg"}


def render_goals(rep) -> list[str]:
    out = []
    for s in rep.sections:
        if "bpfdsl" in s.runs and "clang" in s.runs:
            r = s.average("bpfdsl", "tput_mbs")[0] / s.average("clang", "tput_mbs")[0]
            out.append(f"{s.title}: bpfdsl/clang throughput {r:.3f}: {B.verdict(r >= GOAL)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per mode and size")
    ap.add_argument("--sizes", help="comma-separated message sizes (64,1k,256k); default all")
    ap.add_argument("--millis", type=float, default=300, help="run length per measurement (ms)")
    ap.add_argument("--quick", action="store_true", help="sizes 64,4k,256k, 2 runs of 100 ms")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    sizes = skmsg.SIZES
    if a.sizes:
        try:
            sizes = skmsg.parse_sizes(a.sizes)
        except UsageError:
            ap.error("--sizes: numbers with an optional k/m suffix, e.g. 64,1k,256k")
    if a.quick:
        sizes = sizes if a.sizes else QUICK_SIZES
        a.runs, a.millis = min(a.runs, 2), min(a.millis, 100)
    if a.runs < 1 or not 10 <= a.millis <= 10_000:
        ap.error("--runs >= 1, 10 <= --millis <= 10000")
    notes = []
    try:
        B.require_root()
        with tempfile.TemporaryDirectory(prefix="bpfdsl-skbench-") as tmp:
            work = Path(tmp)
            cobj = B.build_c(work / "clang", [NAME])[NAME]
            objs = [ObjectUnderTest("clang", str(cobj), cobj.read_bytes())]
            ours = work / f"{NAME}.ours.o"
            why = B.compile_ours(B.PROGS / f"{NAME}.bpfd", ours)
            if why is None:
                objs.insert(0, ObjectUnderTest("bpfdsl", str(ours), ours.read_bytes()))
            else:
                notes.append(f"{why}: clang program only")
            opts = skmsg.SkmsgOptions(runs=a.runs, duration=a.millis / 1000, sizes=sizes)
            rep = skmsg.run_skmsg(objs, opts, RichProgress())
    except (B.BenchError, DiagnosticError) as e:
        print(f"skmsg_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        notes.append(busy)
    print(
        "\n".join([rep.render(verbose=False), *render_goals(rep)] + [f"note: {n}" for n in notes])
    )
    if a.json:
        modes = {skmsg.PLAIN: "plain", "clang": "clang", "bpfdsl": "bpfdsl"}
        data = {
            modes[lbl]: {
                size: {k: s.values(lbl, key) for k, key in KEYS.items()}
                for size, s in zip(sizes, rep.sections, strict=True)
            }
            for lbl in rep.labels
        }
        res = {"sizes": list(sizes), "runs": a.runs, "millis": a.millis, "data": data}
        res |= {"notes": notes, "report": rep.to_dict()}
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
