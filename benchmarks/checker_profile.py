#!/usr/bin/env python3
"""Profile of the checker on one progs/ program (issue 12: the fixed per-program cost).

Compiles ``progs/NAME.bpfd`` once, then checks every program of the object ``N`` times per
round (``bpfdsl.checker.check_program``, as checker_bench.py calls it, possible_cpus()
read once outside the timed region): prints the CPU milliseconds per check of the whole
object (the best of 5 rounds: the least disturbed by other work), then a cProfile of N
more checks sorted by ``--sort`` (tottime: where the time is spent; cumulative: which
stage costs what).  No kernel needed.

Usage: python3 benchmarks/checker_profile.py NAME [N] [--sort tottime|cumulative] [--top K]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time

import benchlib as B


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help="program file progs/NAME.bpfd")
    ap.add_argument("n", type=int, nargs="?", default=200, help="checks per round")
    ap.add_argument("--sort", default="tottime", choices=("tottime", "cumulative"))
    ap.add_argument("--top", type=int, default=30, help="profile rows shown")
    a = ap.parse_args(argv)

    from bpfdsl.checker import CheckOptions, check_program
    from bpfdsl.compiler import compile_source
    from bpfdsl.kernel.syscall import possible_cpus
    from bpfdsl.obj.collection import read_object

    path = B.PROGS / f"{a.name}.bpfd"
    if not path.exists():
        print(f"checker_profile: no {path}", file=sys.stderr)
        return 1
    spec = read_object(compile_source(path.read_text(), str(path), check=False).obj)
    cpus = possible_cpus()

    def check_all() -> None:
        for p in spec.programs.values():
            check_program(
                p,
                spec.maps,
                data_sections=spec.data_sections,
                license=spec.license,
                btf=spec.btf,
                options=CheckOptions(nr_cpus=cpus),
            )

    check_all()  # warm-up: imports, per-opcode tables
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(a.n):
            check_all()
        best = min(best, (time.process_time() - t0) / a.n)
    print(f"{a.name}: {best * 1e3:.3f} ms CPU per check of its {len(spec.programs)} program(s)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(a.n):
        check_all()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats(a.sort).print_stats(a.top)
    print(out.getvalue())
    busy = B.load_note()
    if busy:
        print(f"note: {busy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
