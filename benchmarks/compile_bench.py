#!/usr/bin/env python3
"""Compiler benchmark (issue 2): bpfdsl vs clang-19 on the reference programs.

For every progs/NAME.bpfd that has a tests/data/c/NAME.c twin, prints
  1. per program function: instruction count ours vs clang's, and verifier-processed
     instructions ours vs clang's ("processed N insns" from the kernel log of BPF_PROG_LOAD
     with log_level 1|4 = BPF_LOG_LEVEL1 | BPF_LOG_STATS);
  2. per file: whole-process compile time ``bpfdsl compile`` vs
     ``clang-19 -O2 -g -target bpf -c`` (median of --runs runs, ratio ours/clang, the two run
     alternately), and the
     in-process time of ``bpfdsl.compiler.compile_source`` (median of --inproc-runs runs after a
     first, discarded, warm-up call).
Goals (issue 2): insns and processed insns <= clang's; whole-process ratio <= 1.5; in-process
<= 10 ms.  Each row says PASS or MISS; the exit status is 0 either way (1 only when the
benchmark itself cannot run).

Instruction counts are in 8-byte slots, as the kernel counts them (``insn_cnt`` of
BPF_PROG_LOAD): an ld_imm64 counts as two, for both compilers.  A program's count includes
the .text subprograms its object carries (none for inlined code).

The whole-process ``bpfdsl`` is the ``bpfdsl`` script of a venv holding the working tree
installed as a user installs it (``pip install .``: byte-compiled, no editable-install hook;
built once per tree state under the temp dir, see benchlib.installed_venv); ``--tree`` times
``python -m bpfdsl`` from the tree instead.

Usage: python3 benchmarks/compile_bench.py [--runs N] [--inproc-runs N] [--programs a,b] [--quick]
       [--tree]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import benchlib as B

GOAL_RATIO = 1.5
GOAL_INPROC_MS = 10.0
STAGES = ("front", "codegen", "llvm", "check")  # CompileResult.timings, in-process columns
PROCESSED_RE = re.compile(r"processed (\d+) insns")


def processed_insns(obj: Path) -> tuple[dict[str, int], str]:
    """(function name -> verifier-processed insns, how it was loaded), loading ``obj`` once.

    Primary path: bpfdsl's loader (``bpfdsl.runtime.loader.load_collection`` with
    ``log_level=1|4`` = BPF_LOG_LEVEL1 | BPF_LOG_STATS, BPF_PROG_LOAD through bpfdsl.kernel.syscall);
    the kernel log's "processed N insns" line gives the figure.  Fallback when that loader is
    missing or refuses the object: libbpf (``bpftool -d prog loadall`` asks for log level
    1|2|4 and prints each program's log) into a throw-away pin dir removed afterwards.
    """
    try:
        from bpfdsl.obj.collection import read_object
        from bpfdsl.runtime.loader import load_collection

        with load_collection(read_object(obj), log_level=1 | 4) as coll:
            out = {}
            for name, p in coll.programs.items():
                m = PROCESSED_RE.search(p.log)
                if m:
                    out[name] = int(m.group(1))
            return out, "bpfdsl.runtime.loader"
    except ImportError:
        pass
    except Exception as e:  # fall back to libbpf and say so
        why = f"bpfdsl loader failed on {obj.name} ({type(e).__name__}: {e}); used bpftool"
        return _processed_bpftool(obj), why
    return _processed_bpftool(obj), "bpftool"


def _processed_bpftool(obj: Path) -> dict[str, int]:
    import shutil
    import uuid

    B.ensure_bpffs()
    pin = Path("/sys/fs/bpf") / f"bpfdsl_cbench_{uuid.uuid4().hex[:10]}"
    try:
        proc = B.run(["bpftool", "-d", "prog", "loadall", str(obj), str(pin)], check=False)
    finally:
        shutil.rmtree(pin, ignore_errors=True)
    if proc.returncode != 0:
        raise B.BenchError(f"kernel rejected {obj.name}:\n" + proc.stderr[-2000:])
    out, cur = {}, None
    for line in proc.stderr.splitlines():
        m = re.search(r"prog '([^']+)': -- BEGIN PROG LOAD LOG --", line)
        if m:
            cur = m.group(1)
            continue
        m = PROCESSED_RE.search(line)
        if m and cur is not None:
            out[cur] = int(m.group(1))
            cur = None
    return out


def pair_programs(ours, clang):
    """Pair functions of the two objects by section, then by order within the section."""
    pairs = []
    by_sec: dict[str, list] = {}
    for sec, name, n in clang:
        by_sec.setdefault(sec, []).append((name, n))
    used: dict[str, int] = {}
    for sec, name, n in ours:
        i = used.get(sec, 0)
        other = by_sec.get(sec, [])
        pairs.append((sec, (name, n), other[i] if i < len(other) else None))
        used[sec] = i + 1
    for sec, lst in by_sec.items():
        for c in lst[used.get(sec, 0) :]:
            pairs.append((sec, None, c))
    return pairs


def inproc_ms(src: Path, runs: int) -> dict[str, float]:
    """Median ms of compile_source(text) over ``runs`` calls after one warm-up call, per
    stage (CompileResult.timings: front, codegen, llvm, check) and in total."""
    from bpfdsl.compiler import compile_source

    text = src.read_text()
    compile_source(text, str(src))
    xs: dict[str, list[float]] = {}
    for _ in range(runs):
        t0 = time.perf_counter()
        res = compile_source(text, str(src))
        xs.setdefault("wall", []).append((time.perf_counter() - t0) * 1000)
        for k, v in res.timings.items():
            xs.setdefault(k, []).append(v)
    return {k: B.median(v) for k, v in xs.items()}


def llvm_floor_ms(csrc: Path, work: Path, runs: int) -> float | None:
    """Median ms of LLVM alone on clang's own IR for the C twin: parse + the same O2 pipeline
    + BPF code generation through llvmlite (bpfdsl.backend.target), as our ``llvm`` stage runs it.
    The IR is clang-19's before its optimisation passes (``-Xclang -disable-llvm-passes``).
    It shows what the LLVM stage costs whatever IR bpfdsl would write; None if clang fails."""
    from bpfdsl.backend import target

    ll = work / (csrc.stem + ".clang.ll")
    cmd = B.clang_cmd(csrc, ll)
    cmd[cmd.index("-c")] = "-S"
    proc = B.run([*cmd, "-emit-llvm", "-Xclang", "-disable-llvm-passes"], check=False)
    if proc.returncode != 0:
        return None
    text = ll.read_text()
    tm = target.target_machine("v3")
    xs = []
    for i in range(runs + 1):
        t0 = time.perf_counter()
        tm.emit_object(target.optimize(target.parse(text)))
        if i:  # the first run warms up
            xs.append((time.perf_counter() - t0) * 1000)
    return B.median(xs)


def le(a, b):
    return None if a is None or b is None else a <= b


def bench(
    names,
    runs: int,
    inproc_runs: int,
    kernel: bool,
    work: Path,
    budget: float = 1e9,
    venv: Path | None = None,
) -> dict:
    """Run everything; returns {"programs": [...rows], "files": [...rows], "notes": [...]}."""
    res = {"programs": [], "files": [], "notes": [], "loaded_with": set()}
    env = B.env_with_tree() if venv is None else B.clean_env()
    t_start = time.monotonic()
    for name in names:
        if time.monotonic() - t_start > budget and runs > 1:
            res["notes"].append(f"time budget reached: 1 run (not {runs}) from {name} on")
            runs = inproc_runs = 1
        bpfd, csrc = B.PROGS / f"{name}.bpfd", B.C_DIR / f"{name}.c"
        if not csrc.exists():
            res["notes"].append(f"{name}: no C reference, skipped")
            continue
        cobj, oobj = work / f"{name}.clang.o", work / f"{name}.ours.o"
        B.run(B.clang_cmd(csrc, cobj))
        why = B.compile_ours(bpfd, oobj)  # library call: insn and verifier columns
        have_ours = why is None
        if why is not None:
            res["notes"].append(f"{name}: {why} (clang only)")
        c_slots = B.program_slots(cobj)
        o_slots = B.program_slots(oobj) if have_ours else []
        c_proc = o_proc = {}
        if kernel:
            try:
                c_proc, how_c = processed_insns(cobj)
                o_proc, how_o = processed_insns(oobj) if have_ours else ({}, None)
                for how in {how_c, how_o} - {None}:
                    if how in ("bpfdsl.runtime.loader", "bpftool"):
                        res["loaded_with"].add(how)
                    else:
                        res["notes"].append(f"{name}: {how}")
            except B.BenchError as e:
                res["notes"].append(f"{name}: {e}")
        for sec, o, c in pair_programs(o_slots, c_slots):
            op = o_proc.get(o[0]) if o else None
            cp = c_proc.get(c[0]) if c else None
            res["programs"].append(
                {
                    "file": name,
                    "section": sec,
                    "ours": o[0] if o else None,
                    "clang": c[0] if c else None,
                    "insns_ours": o[1] if o else None,
                    "insns_clang": c[1] if c else None,
                    "insns_goal": le(o[1] if o else None, c[1] if c else None),
                    "processed_ours": op,
                    "processed_clang": cp,
                    "processed_goal": le(op, cp),
                }
            )
        row = {"file": name, "runs": runs}
        clang_cmd = B.clang_cmd(csrc, cobj)
        if have_ours:
            try:
                ours_cmd = B.ours_compile_cmd(bpfd, oobj, venv)
                t_clang, t_ours = map(
                    B.median, B.time_interleaved([clang_cmd, ours_cmd], runs, env=env)
                )
                row.update(clang_ms=t_clang * 1000, ours_ms=t_ours * 1000, ratio=t_ours / t_clang)
                row["ratio_goal"] = row["ratio"] <= GOAL_RATIO
            except B.BenchError as e:
                res["notes"].append(f"{name}: `bpfdsl compile` (whole process) failed: {e}")
        if "clang_ms" not in row:
            row["clang_ms"] = B.median(B.time_process(clang_cmd, runs)) * 1000
        if have_ours:
            try:
                stages = inproc_ms(bpfd, inproc_runs)
                row["inproc_ms"] = stages["wall"]
                row["inproc_stages_ms"] = stages
                row["inproc_goal"] = row["inproc_ms"] <= GOAL_INPROC_MS
                row["llvm_clang_ir_ms"] = llvm_floor_ms(csrc, work, inproc_runs)
            except Exception as e:  # report, keep benchmarking the others
                res["notes"].append(f"{name}: in-process compile failed: {e}")
        res["files"].append(row)
    res["loaded_with"] = sorted(res["loaded_with"])
    try:
        res["floor_ms"] = B.python_floor(runs, ["bpfdsl.cli", "bpfdsl.compiler"], venv)
    except B.BenchError as e:
        res["notes"].append(f"start-up floor not measured: {e}")
    return res


def fmt(v, spec=".1f"):
    return "n/a" if v is None else format(v, spec)


def render(res: dict) -> str:
    rows = [
        [
            p["file"],
            p["section"],
            p["ours"] or "-",
            fmt(p["insns_ours"], "d"),
            fmt(p["insns_clang"], "d"),
            B.verdict(p["insns_goal"]),
            fmt(p["processed_ours"], "d"),
            fmt(p["processed_clang"], "d"),
            B.verdict(p["processed_goal"]),
        ]
        for p in res["programs"]
    ]
    out = [
        "Instructions (8-byte slots) and verifier-processed insns; goal: ours <= clang",
        B.table(
            ["file", "section", "function", "insns", "clang", "goal", "processed", "clang", "goal"],
            rows,
        ),
        "",
        f"Compile time (median); goals: whole-process ratio <= {GOAL_RATIO}, "
        f"in-process <= {GOAL_INPROC_MS:g} ms",
    ]
    frows = [
        [
            f["file"],
            f["runs"],
            fmt(f.get("ours_ms")),
            fmt(f["clang_ms"]),
            fmt(f.get("ratio"), ".2f"),
            B.verdict(f.get("ratio_goal")),
            fmt(f.get("inproc_ms"), ".2f"),
            B.verdict(f.get("inproc_goal")),
            *(fmt(f.get("inproc_stages_ms", {}).get(k), ".1f") for k in STAGES),
            fmt(f.get("llvm_clang_ir_ms"), ".1f"),
        ]
        for f in res["files"]
    ]
    out.append(
        B.table(
            [
                "file",
                "runs",
                "bpfdsl ms",
                "clang ms",
                "ratio",
                "goal",
                "in-proc ms",
                "goal",
                *STAGES,
                "llvm(clang IR)",
            ],
            frows,
        )
    )
    out.append(
        "in-process columns: medians of CompileResult.timings per stage; llvm(clang IR): the "
        "same LLVM stage (parse, O2, BPF codegen) on clang-19's unoptimised IR of the C twin"
    )
    if res.get("floor_ms"):
        floor = ", ".join(f"{k} {v:.1f} ms" for k, v in res["floor_ms"].items())
        out.append(f"note: start-up floor of a bpfdsl process (medians): {floor}")
    if res["loaded_with"]:
        out.append("note: verifier figures from loads by " + " and ".join(res["loaded_with"]))
    out += [f"note: {n}" for n in res["notes"]]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=9, help="whole-process runs per compiler")
    ap.add_argument("--inproc-runs", type=int, default=20, help="in-process runs per program")
    ap.add_argument(
        "--programs", help="comma-separated subset of " + ",".join(B.REFERENCE_PROGRAMS)
    )
    ap.add_argument("--quick", action="store_true", help="3 runs, 5 in-process runs (< 1 min)")
    ap.add_argument("--no-kernel", action="store_true", help="skip the verifier column")
    ap.add_argument("--budget", type=float, default=200, help="seconds before runs drop to 1")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument(
        "--tree",
        action="store_true",
        help="time `python -m bpfdsl` from the working tree instead of an installed venv",
    )
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    if a.quick:
        a.runs, a.inproc_runs = min(a.runs, 3), min(a.inproc_runs, 5)
    if a.runs < 1 or a.inproc_runs < 1:
        ap.error("--runs and --inproc-runs must be >= 1")
    names = B.REFERENCE_PROGRAMS
    if a.programs:
        names = tuple(n.strip() for n in a.programs.split(",") if n.strip())
        unknown = [n for n in names if not (B.C_DIR / f"{n}.c").exists()]
        if unknown:
            ap.error(f"no C reference for: {', '.join(unknown)}")
    try:
        B.require_tool(B.CLANG, "apt-get install clang-19 (or set CLANG=)")
        kernel = not a.no_kernel
        if kernel:
            B.require_root()
            B.require_tool("bpftool", "apt-get install bpftool (or pass --no-kernel)")
        with B.venv_lock(), tempfile.TemporaryDirectory(prefix="bpfdsl-cbench-") as tmp:
            venv = None if a.tree else B.installed_venv()
            res = bench(names, a.runs, a.inproc_runs, kernel, Path(tmp), a.budget, venv)
        how = "the working tree (python -m bpfdsl)" if venv is None else f"{venv}/bin/bpfdsl"
        res["notes"].insert(0, f"whole-process bpfdsl timed as {how}")
    except B.BenchError as e:
        print(f"compile_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        res.setdefault("notes", []).append(busy)
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
