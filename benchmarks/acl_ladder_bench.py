#!/usr/bin/env python3
"""ACL ladder benchmark (issue 11): the kernel verifier's work for an ACL written as code,
bpfdsl (one ``global fn`` per rule) against clang-19's C (one ``__noinline`` global function
per rule), 25/50/100/200 rules, both generated from the same rules by benchmarks/acl_gen.py in
this run.

1. Verifier-processed instructions per object: ``bpf_prog_info.verified_insns`` after
   BPF_PROG_LOAD through bpfdsl's loader (the kernel's ``processed N insns``: the program
   and every global function, each verified once).  clang compiles the C as the other
   benchmarks do (``clang-19 -O2 -g -target bpf``: ISA v1) and again with ``-mcpu=v3``,
   bpfdsl's default ISA.  Goal: ours <= clang's (ratio <= 1.0) at each size, for both.
2. Compile + check time of the 200-rule ACL: ``bpfdsl.compiler.compile_source`` with the
   checker on, in a fresh process per run (the figure a user's ``bpfdsl compile`` pays past
   start-up), CPU seconds of the process and wall seconds, median of ``--runs``.  Goal:
   <= 2 s (CPU: the wall time on a shared machine counts waits for a CPU).

Run as root from the repository root; ``--quick`` does 25 and 50 rules and 1 timing run;
``--json FILE`` writes the raw figures.  Exit 0 whether or not goals are met (1 only when the
benchmark cannot run).

Usage: python3 benchmarks/acl_ladder_bench.py [--sizes 25,50,100,200] [--runs N] [--quick]
       [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import acl_gen
import benchlib as B

SIZES = (25, 50, 100, 200)
GOAL_RATIO = 1.0
GOAL_SECONDS = 2.0

TIMER = """
import sys, time
from bpfdsl.compiler import compile_source
src = open(sys.argv[1]).read()
c0, w0 = time.process_time(), time.perf_counter()
compile_source(src, sys.argv[1], check=True)
print(time.process_time() - c0, time.perf_counter() - w0)
"""


def verified_insns(obj: Path) -> int:
    """The kernel's processed-instruction count of the object's one program."""
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    with load_collection(read_object(obj)) as coll:
        (prog,) = coll.programs.values()
        return syscall.prog_info(prog.fd).verified_insns


VARIANTS = {
    "scalar": (acl_gen.bpfd_source, acl_gen.c_source),
    "struct-key": (acl_gen.bpfd_key_source, acl_gen.c_key_source),
}
"""Rule arguments: four scalars (``rule_k(saddr, daddr, proto, dport)``), or the 16-byte
flow key struct (bpfdsl ``rule_k(key: flow_key)``, C ``rule_k(const struct flow_key *)``)."""


def ladder(sizes, tmp: Path, variant: str = "scalar") -> list[dict]:
    bpfd_source, c_source = VARIANTS[variant]
    rows = []
    for n in sizes:
        stem = f"acl{n}_{variant}"
        bpfd, c = tmp / f"{stem}.bpfd", tmp / f"{stem}.c"
        bpfd.write_text(bpfd_source(n))
        c.write_text(c_source(n))
        ours = tmp / f"{stem}.o"
        why = B.compile_ours(bpfd, ours)
        if why:
            raise B.BenchError(why)
        clang, clang3 = tmp / f"{stem}_c.o", tmp / f"{stem}_c3.o"
        B.run(B.clang_cmd(c, clang))
        cmd3 = B.clang_cmd(c, clang3)
        B.run([cmd3[0], "-mcpu=v3", *cmd3[1:]])
        row = {"variant": variant, "rules": n, "ours": verified_insns(ours)}
        row["clang"] = verified_insns(clang)
        row["clang_v3"] = verified_insns(clang3)
        row["ratio"] = row["ours"] / row["clang"]
        row["ratio_v3"] = row["ours"] / row["clang_v3"]
        rows.append(row)
    return rows


def compile_times(n: int, runs: int, tmp: Path) -> dict:
    src = tmp / f"acl{n}_time.bpfd"
    src.write_text(acl_gen.bpfd_source(n))
    cpu, wall = [], []
    for _ in range(runs):
        out = B.run([sys.executable, "-c", TIMER, str(src)], env=B.env_with_tree(), timeout=300)
        c, w = (float(x) for x in out.stdout.split())
        cpu.append(c)
        wall.append(w)
    return {"rules": n, "cpu_s": B.median(cpu), "wall_s": B.median(wall), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="rule counts")
    ap.add_argument("--runs", type=int, default=5, help="timing runs (fresh processes)")
    ap.add_argument("--quick", action="store_true", help="25 and 50 rules, 1 timing run")
    ap.add_argument("--json", metavar="FILE", help="write the raw figures as JSON")
    args = ap.parse_args(argv)
    sizes = (25, 50) if args.quick else tuple(int(s) for s in args.sizes.split(","))
    runs = 1 if args.quick else args.runs
    try:
        B.require_root()
        B.require_tool(B.CLANG, "apt-get install clang-19 (or set CLANG=)")
        note = B.load_note()
        with tempfile.TemporaryDirectory(prefix="bpfdsl_acl_") as d:
            rows = [r for v in VARIANTS for r in ladder(sizes, Path(d), v)]
            timing = compile_times(max(sizes) if args.quick else 200, runs, Path(d))
    except (B.BenchError, subprocess.SubprocessError) as e:
        print(f"acl_ladder_bench: cannot run: {e}", file=sys.stderr)
        return 1
    print("verifier-processed instructions (bpf_prog_info.verified_insns), ours vs clang-19")
    print(
        B.table(
            ["args", "rules", "ours", "clang", "ratio", "goal", "clang -mcpu=v3", "ratio", "goal"],
            [
                [
                    r["variant"],
                    r["rules"],
                    r["ours"],
                    r["clang"],
                    f"{r['ratio']:.3f}x",
                    B.verdict(r["ratio"] <= GOAL_RATIO),
                    r["clang_v3"],
                    f"{r['ratio_v3']:.3f}x",
                    B.verdict(r["ratio_v3"] <= GOAL_RATIO),
                ]
                for r in rows
            ],
        )  # fmt: skip
    )
    print()
    t = timing
    ok = t["cpu_s"] <= GOAL_SECONDS
    print(
        f"compile + check, {t['rules']} rules (median of {t['runs']} fresh processes): "
        f"{t['cpu_s']:.2f} s CPU, {t['wall_s']:.2f} s wall; goal <= {GOAL_SECONDS:.1f} s: "
        f"{B.verdict(ok)}"
    )
    if note:
        print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps({"ladder": rows, "compile": timing}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
