#!/usr/bin/env python3
"""Checker benchmark (issue 12): bpfdsl's checker against the kernel verifier, same programs.

Per program function of progs/*.bpfd and of the ACL ladder (tests/support/complexity.py,
25, 50 and 100 rules; ``--near-limit`` adds the packet-loop and TCP-option-walk families):
  - the checker's time (CPU seconds of this process in ``bpfdsl.checker.check_program``,
    median of ``--runs``) and the kernel's ("verification time N usec" of BPF_PROG_LOAD
    with log_level 4 = BPF_LOG_STATS, through bpfdsl.runtime.loader, median of as many loads), both and the ratio;
  - the instructions each walked (the checker's ``insns_processed``, the kernel's
    "processed N insns") and their ratio;
  - both verdicts.
Goals (issue 12): time ratio <= 2, processed ratio within 0.9-1.1.  Each row says PASS or
MISS; the exit status is 0 either way (1 only when the benchmark cannot run: not root).
Also printed: which checker ran (bpfdsl.checker.NATIVE: the mypyc-compiled modules, or
pure Python and why), and the floor of this Python for the checker's kind of loop (one call per
instruction through a handler table, no work) in instructions per second.

Usage: python3 benchmarks/checker_bench.py [--runs N] [--quick] [--near-limit] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib as B

sys.path.append(str(B.ROOT / "tests"))  # tests/support
from support import complexity

GOAL_TIME_RATIO = 2.0
GOAL_COUNT = (0.9, 1.1)
ACL_SIZES = (25, 50, 100)
PROCESSED_RE = re.compile(r"processed (\d+) insns")
VTIME_RE = re.compile(r"verification time (\d+) usec")


def sources(near_limit: bool) -> list[tuple[str, str]]:
    """(name, .bpfd text): progs/, the ACL ladders, and with ``near_limit`` the other
    near-limit families at their tests/support/complexity.py sizes."""
    out = [(p.stem, p.read_text()) for p in sorted(B.PROGS.glob("*.bpfd"))]
    out += [(f"acl_ladder_{n}", complexity.acl_ladder(n)) for n in ACL_SIZES]
    if near_limit:
        out += [(f"packet_loops_{k}", complexity.packet_loops(k)) for k in (1, 2, 3)]
        out += [(f"option_walk_{n}", complexity.option_walk(n)) for n in (10, 14, 18, 40)]
    return out


def kernel_figures(spec, runs: int = 1) -> dict[str, tuple[str, int | None, float | None]]:
    """Program name -> (verdict, processed, verification seconds) from loads of the
    object's programs with BPF_LOG_STATS (each program alone, so a rejected one does not
    hide the others' figures); the seconds are the median of ``runs`` loads (one when a
    load took over 0.5 s: those are not noisy)."""
    from dataclasses import replace

    from bpfdsl.runtime.loader import VerifierError, load_collection

    out = {}
    for name in spec.programs:
        # prog_array slots naming the programs left out stay empty (tail calls fall through)
        maps = {
            k: replace(
                m, values={i: t for i, t in m.values.items() if t not in spec.programs or t == name}
            )
            for k, m in spec.maps.items()
        }
        one = replace(spec, programs={name: spec.programs[name]}, maps=maps)
        secs: list[float] = []
        for _ in range(runs):
            try:
                with load_collection(one, log_level=4, log_size=1 << 20) as coll:
                    log, verdict = coll.programs[name].log, "ok"
            except VerifierError as e:
                log, verdict = e.log, "rej"
            m, t = PROCESSED_RE.search(log), VTIME_RE.search(log)
            if t is None:
                break
            secs.append(int(t.group(1)) / 1e6)
            if secs[-1] > 0.5:
                break
        out[name] = (
            verdict,
            int(m.group(1)) if m else None,
            statistics.median(secs) if secs else None,
        )
    return out


def checker_figures(spec, runs: int) -> dict[str, tuple[str, int, float]]:
    """Program name -> (status, processed, median CPU seconds of check_program)."""
    from bpfdsl.checker import CheckOptions, check_program
    from bpfdsl.kernel.syscall import possible_cpus

    nr_cpus = possible_cpus()  # read once: not the checker's work
    out = {}
    for name, p in spec.programs.items():
        times, res = [], None
        for _ in range(runs):
            t0 = time.process_time()
            res = check_program(
                p,
                spec.maps,
                data_sections=spec.data_sections,
                license=spec.license,
                btf=spec.btf,  # global functions verified on their own, as the kernel does
                options=CheckOptions(nr_cpus=nr_cpus),
            )
            times.append(time.process_time() - t0)
            if times[-1] > 2.0:
                break  # one run is enough for the long ones
        out[name] = (res.status, res.insns_processed, statistics.median(times))
    return out


def python_floor(n: int = 1_000_000) -> float:
    """Instructions per second of a loop that does what the checker's does per insn and
    nothing else: count, look the handler up in a table, call it (a no-op)."""

    def nop(env, cfg, st, i, x):
        return None

    handlers = [nop] * 64
    visits = [0] * 64
    t0 = time.process_time()
    processed = i = 0
    while processed < n:
        processed += 1
        visits[i] += 1
        if handlers[i](None, None, None, i, None) is None:
            i = (i + 1) & 63
    return n / (time.process_time() - t0)


def bench(runs: int, near_limit: bool, tmp: Path) -> dict:
    from bpfdsl.compiler import compile_source
    from bpfdsl.obj.collection import read_object

    rows, raw = [], []
    for name, text in sources(near_limit):
        spec = read_object(compile_source(text, f"{tmp}/{name}.bpfd", check=False).obj)
        kern = kernel_figures(spec, runs)
        ours = checker_figures(spec, runs)
        for prog in spec.programs:
            kv, kp, ks = kern[prog]
            ov, op, os_ = ours[prog]
            count = op / kp if kp else None
            tratio = os_ / ks if ks else None
            count_ok = None if count is None else GOAL_COUNT[0] <= count <= GOAL_COUNT[1]
            time_ok = None if tratio is None else tratio <= GOAL_TIME_RATIO
            label = name if len(spec.programs) == 1 else f"{name}:{prog}"
            rows.append(
                [
                    label,
                    f"{ov}/{kv}",
                    op,
                    kp if kp is not None else "-",
                    f"{count:.3f}" if count is not None else "-",
                    f"{os_ * 1e3:.1f}",
                    f"{ks * 1e3:.1f}" if ks is not None else "-",
                    f"{tratio:.1f}x" if tratio is not None else "-",
                    B.verdict(count_ok),
                    B.verdict(time_ok),
                ]
            )
            raw.append(
                {
                    "program": label,
                    "checker": {"verdict": ov, "processed": op, "seconds": os_},
                    "kernel": {"verdict": kv, "processed": kp, "seconds": ks},
                    "processed_ratio": count,
                    "time_ratio": tratio,
                }
            )
    return {"rows": rows, "raw": raw}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="checker runs per program (median)")
    ap.add_argument("--quick", action="store_true", help="1 run per program")
    ap.add_argument(
        "--near-limit",
        action="store_true",
        help="also the packet-loop and TCP-option-walk families (about 2 more minutes)",
    )
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()
    runs = 1 if a.quick else max(1, a.runs)
    try:
        B.require_root()
        B.ensure_bpffs()
        with tempfile.TemporaryDirectory(prefix="bpfdsl-chkbench-") as tmp:
            res = bench(runs, a.near_limit, Path(tmp))
    except B.BenchError as e:
        print(f"checker_bench: {e}", file=sys.stderr)
        return 1
    headers = [
        "program",
        "verdict ours/kernel",
        "processed ours",
        "kernel",
        "ratio",
        "ours ms (CPU)",
        "kernel ms",
        "time ratio",
        "count 0.9-1.1",
        "time <= 2x",
    ]
    print(B.table(headers, res["rows"]))
    times = [r for r in res["raw"] if r["time_ratio"] is not None]
    total_ours = sum(r["checker"]["seconds"] for r in times)
    total_kernel = sum(r["kernel"]["seconds"] for r in times)
    walked = sum(r["checker"]["processed"] for r in times)
    kwalked = sum(r["kernel"]["processed"] or 0 for r in times)
    floor = python_floor()
    from bpfdsl.checker import NATIVE, NATIVE_REASON

    mode = NATIVE_REASON if NATIVE else f"pure Python ({NATIVE_REASON})"
    print()
    print(f"checker: {mode}")
    print(
        f"total: checker {total_ours:.2f} s CPU for {walked:,} insns "
        f"({walked / max(total_ours, 1e-9):,.0f}/s); kernel {total_kernel:.2f} s for "
        f"{kwalked:,} ({kwalked / max(total_kernel, 1e-9):,.0f}/s); "
        f"ratio {total_ours / max(total_kernel, 1e-9):.1f}x"
    )
    print(
        f"floor: this Python runs {floor:,.0f} insns/s through a loop that only counts and "
        "calls a no-op handler per instruction"
    )
    if busy:
        print(f"note: {busy}")
    if a.json:
        Path(a.json).write_text(
            json.dumps(
                {"results": res["raw"], "floor_insns_per_s": floor, "checker_native": NATIVE}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
