#!/usr/bin/env python3
"""Filter-corpus benchmark (issue 17): tcpdump filters in bpfdsl vs hand-written C.

For every filter of the corpus (tests/corpus/filters/NAME.bpfd and NAME.c, and
progs/xdp_src_net.bpfd with tests/data/c/xdp_src_net.c; tests/support/filter_corpus.py
lists them) prints the instruction count of our program and of its C equivalent
(``clang-19 -O2 -g -target bpf -c``), in 8-byte slots as the kernel counts them
(``insn_cnt`` of BPF_PROG_LOAD, ld_imm64 = 2), the ratio and the goal (ours <= 1.3 x C).
With ``--verdicts`` (root: BPF_PROG_TEST_RUN) it also runs both objects and the
interpreter on every Ethernet frame of tests/data/pcaps and counts the frames where any of
them disagrees with libpcap (``tcpdump -r ... -w - EXPR``), as
tests/corpus/test_filter_corpus.py asserts.

Exit status 0 whether or not goals are met (1 only when it cannot run).

Usage: python3 benchmarks/filter_corpus_bench.py [--verdicts] [--filters a,b] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib as B

sys.path.insert(0, str(B.ROOT / "tests"))

from support import filter_corpus as FC

GOAL_RATIO = 1.3


def build(f: FC.Filter, out: Path) -> tuple[int, int]:
    """(our slots, C slots) of filter ``f``; objects written under ``out``."""
    from bpfdsl.compiler import compile_file

    ours = out / f"{f.name}.o"
    ours.write_bytes(compile_file(f.source).obj)
    c_obj = out / f"{f.name}_c.o"
    B.run(B.clang_cmd(f.c_source, c_obj))
    return FC.slots(ours), FC.slots(c_obj)


def verdicts(fs: list[FC.Filter], out: Path) -> dict[str, dict[str, int]]:
    """Per filter: frames run, libpcap matches, disagreements of ours (kernel, interp) and
    of the C object (kernel) with libpcap."""
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.testrun import InterpEngine, KernelEngine, PacketSkipped

    frames = list(FC.frames())
    lp = FC.Libpcap(frames)
    res: dict[str, dict[str, int]] = {}
    try:
        for f in fs:
            want = lp.matches(f.expr, as_seen=f.uses_length)
            ours = read_object(out / f"{f.name}.o")
            engines = {
                "kernel": KernelEngine(ours),
                "interp": InterpEngine(ours),
                "c": KernelEngine(read_object(out / f"{f.name}_c.o")),
            }
            row = {"frames": 0, "matches": sum(want), "skipped": 0}
            row.update({k: 0 for k in engines})
            try:
                for fr, match in zip(frames, want, strict=True):
                    expect = FC.XDP_PASS if match else FC.XDP_DROP
                    try:
                        got = {k: e.run(f.name, fr.data).retval for k, e in engines.items()}
                    except PacketSkipped:
                        row["skipped"] += 1
                        continue
                    row["frames"] += 1
                    for k, v in got.items():
                        row[k] += v != expect
            finally:
                for e in engines.values():
                    e.close()
            res[f.name] = row
    finally:
        lp.close()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--verdicts", action="store_true", help="also compare with libpcap (root)")
    ap.add_argument("--filters", help="comma-separated subset of the corpus names")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    fs = FC.filters()
    if a.filters:
        want = {n.strip() for n in a.filters.split(",") if n.strip()}
        unknown = want - {f.name for f in fs}
        if unknown:
            ap.error(f"no such filter: {', '.join(sorted(unknown))}")
        fs = [f for f in fs if f.name in want]
    try:
        B.require_tool(B.CLANG, "apt-get install clang-19 (or set CLANG=)")
        if a.verdicts:
            B.require_root()
            B.require_tool("tcpdump", "apt-get install tcpdump")
    except B.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="bpfdsl_fcb_") as tmp:
        out = Path(tmp)
        try:
            counts = {f.name: build(f, out) for f in fs}
            checked = verdicts(fs, out) if a.verdicts else {}
        except (subprocess.CalledProcessError, B.BenchError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    rows = []
    for f in fs:
        ours, c = counts[f.name]
        ratio = ours / c
        row: list[object] = [
            f.name,
            f.expr,
            ours,
            c,
            f"{ratio:.2f}x",
            B.verdict(ratio <= GOAL_RATIO),
        ]
        if checked:
            v = checked[f.name]
            row += [v["frames"], v["matches"], v["kernel"] + v["interp"], v["c"]]
        rows.append(row)
    headers = ["filter", "tcpdump expression", "ours", "C", "ours/C", f"<= {GOAL_RATIO}x"]
    if checked:
        headers += ["frames", "libpcap match", "ours wrong", "C wrong"]
    print(B.table(headers, rows))
    met = sum(counts[f.name][0] <= GOAL_RATIO * counts[f.name][1] for f in fs)
    print(f"\ninstruction goal met by {met} of {len(fs)} filters (slots, ld_imm64 = 2)")
    if checked:
        eth, _ = FC.captures()
        any_row = next(iter(checked.values()))
        print(
            f"verdicts: {len(eth)} Ethernet captures, {any_row['frames']} frames run per filter "
            f"({any_row['skipped']} not test-runnable: under 14 bytes or over 73152), "
            f"wrong: ours {sum(v['kernel'] + v['interp'] for v in checked.values())}, "
            f"C {sum(v['c'] for v in checked.values())}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps({"slots": counts, "verdicts": checked}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
