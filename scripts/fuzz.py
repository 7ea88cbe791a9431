#!/usr/bin/env python3
"""bpfdsl fuzz campaigns (issue #13): the generators of tests/fuzz with a seed and a bound.

Kinds: ``sources`` (mutated .bpfd through the compiler; as root also the loader),
``programs`` (random valid XDP programs on the kernel and the interpreter; root),
``bigprogs`` (ACLs of 1,000-3,000 `if` rules and 16-256-arm `match`es at every --mcpu,
on the kernel and the interpreter; root),
``subprograms`` (the same with noinline/global fns, bpf_loop, tail calls, ring buffers;
root),
``objects`` (corrupted ELF objects through check/disasm/run/load), ``captures``
(corrupted pcap/pcapng through ``bpfdsl run --pcap``), ``cli`` (the CLI-misuse list
through the ``bpfdsl`` command), ``all``.  Prints per kind the cases run, seconds, counts
per outcome, and each failure kind once with its reduced reproducer; failures of kinds
other engineers are fixing (tests/fuzz/known.py) are listed as known.  Exit status 1
when a new failure kind was found, 0 otherwise.

    scripts/fuzz.py --kind sources --seed 7 --count 3000 --time-limit 600
    scripts/fuzz.py --kind all --count 200 --json out.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # the package `fuzz` (tests/fuzz) and objbuild
sys.path.insert(1, str(ROOT))

KINDS = {  # kind -> module of tests/fuzz
    "sources": "fuzz.sources",
    "programs": "fuzz.programs",
    "bigprogs": "fuzz.bigprogs",
    "subprograms": "fuzz.subprograms",
    "objects": "fuzz.objects",
    "captures": "fuzz.captures",
    "cli": "fuzz.cli_misuse",
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=[*KINDS, "all"], default="all")
    ap.add_argument("--seed", type=int, default=1, help="campaign seed (default 1)")
    ap.add_argument("--count", type=int, default=200, help="cases per kind (default 200)")
    ap.add_argument(
        "--time-limit",
        type=float,
        metavar="S",
        help="stop starting cases after S seconds (with --kind all: S shared by the kinds)",
    )
    ap.add_argument(
        "--timeout", type=float, metavar="S", help="per-case timeout (default: per kind)"
    )
    ap.add_argument("--shrink", type=float, default=60.0, metavar="S",
                    help="seconds to reduce each new failure kind (0: report the input as is)")  # fmt: skip
    ap.add_argument("--no-kernel", action="store_true", help="skip the kernel parts even as root")
    ap.add_argument("--json", metavar="FILE", help="also write the reports as JSON")
    ap.add_argument("-q", "--quiet", action="store_true", help="known failure kinds in one line")
    a = ap.parse_args(argv)
    from fuzz.harness import kernel_usable, run_campaign

    kernel = not a.no_kernel and kernel_usable()
    kinds = list(KINDS) if a.kind == "all" else [a.kind]
    for needs_root in ("programs", "bigprogs", "subprograms"):
        if needs_root in kinds and not kernel:
            print(f"{needs_root}: skipped (needs root and a usable bpf() syscall)",
                  file=sys.stderr)  # fmt: skip
            kinds.remove(needs_root)
    t0 = time.monotonic()
    reports = []
    for n, kind in enumerate(kinds):
        fuzzer = importlib.import_module(KINDS[kind]).FUZZER
        if a.timeout:
            fuzzer.timeout = a.timeout
        limit = None
        if a.time_limit is not None:
            limit = max(1.0, (a.time_limit - (time.monotonic() - t0)) / (len(kinds) - n))
        print(f"== {kind}: seed {a.seed}, {a.count} cases"
              + (f", {limit:.0f} s at most" if limit else "") + (" (kernel)" if kernel else ""),
              flush=True)  # fmt: skip
        rep = run_campaign(fuzzer, a.seed, a.count, time_limit=limit, kernel=kernel,
                           shrink_s=a.shrink)  # fmt: skip
        reports.append(rep)
        for f in rep.failures.values():
            if f.known is not None and a.quiet:
                print(f"  known: {f.result.signature} x{f.hits} ({f.known.name}, {f.known.owner})")
            else:
                print(f.describe() + "\n")
        print(rep.summary(), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps([r.to_json() for r in reports], indent=2))
    new = sum(len(r.new_failures) for r in reports)
    print(f"total: {sum(r.cases for r in reports)} cases in {time.monotonic() - t0:.0f} s, "
          f"{new} new failure kind(s)")  # fmt: skip
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
