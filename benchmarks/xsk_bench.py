"""AF_XDP socket loops against libxdp's (issue #25): rxdrop and l2fwd, copy mode, on veth.

    sudo python3 benchmarks/xsk_bench.py [--runs R] [--duration S] [--batch N] [--json FILE]

Builds the C reference with the host's cc, libxdp and libbpf (benchmarks/c/xsk_loop.c: the
kernel's xdpsock loop written with libxdp's xsk API, ``xsk_ring_cons__peek`` /
``xsk_ring_prod__reserve`` ..., copy mode, 4096-chunk UMEM, ``--batch`` descriptors per
ring access) and runs it and bpfdsl's loop (``XskSocket.rx_drop`` / ``l2fwd``: the burst API,
``rx_burst`` / ``fill`` / ``tx_burst`` / ``complete``; l2fwd's step in C,
bpfdsl/runtime/_xsk.c, when built, else in Python) in the same run, ABBA
order, each alone on the socket's queue: the same program (``redirect_map(xsks,
ctx.rx_queue_index, XDP_PASS)``) on dut0, the same live-frame generator on CPU 0 pushing
64-byte frames into it, the loop on CPU 1.  Prints per mode the median over ``--runs`` of
the frames the program ran on, the frames the loop received (rxdrop) or that came back to
the generator's side (l2fwd), the socket's drops, and the ratio Python / C.  Exits 1 only
when it cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib as B

import bpfdsl
from bpfdsl.bench.target import ObjectUnderTest
from bpfdsl.bench.xdp import XdpOptions
from bpfdsl.bench.xsk import XSK_MODES, run_xsk_loops

HERE = Path(__file__).resolve().parent
PROG = """license "GPL"
map xsks: xskmap(max_entries: 64)
xdp fn to_xsk(ctx) {
    return redirect_map(xsks, ctx.rx_queue_index, XDP_PASS)
}
"""


def build_loop(tmp: Path) -> Path:
    cc = os.environ.get("CC", "cc")
    B.require_tool(cc, "install gcc or clang (CC=...)")
    exe = tmp / "xsk_loop"
    r = subprocess.run(
        [cc, "-O2", "-o", str(exe), str(HERE / "c" / "xsk_loop.c"), "-lxdp", "-lbpf", "-lpthread"],
        capture_output=True, text=True,
    )  # fmt: skip
    if r.returncode:
        raise B.BenchError(
            f"cannot build xsk_loop.c (libxdp-dev, libbpf-dev installed?):\n{r.stderr}"
        )
    return exe


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0, help="seconds of traffic per run")
    ap.add_argument("--batch", type=int, default=64, help="descriptors per ring access")
    ap.add_argument("--modes", default=",".join(XSK_MODES))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    try:
        B.require_root()
        B.ensure_bpffs()
        with tempfile.TemporaryDirectory(prefix="xskbench") as td:
            exe = build_loop(Path(td))
            data = bpfdsl.compile_source(PROG, "to_xsk.bpfd").obj
            obj = ObjectUnderTest("to_xsk", "to_xsk.bpfd", data)
            opts = XdpOptions(runs=args.runs, duration=args.duration, tcp=False)
            loops = {"python": [sys.executable, str(HERE / "xsk_loop.py")], "c": [str(exe)]}
            res = run_xsk_loops(obj, opts, loops, args.modes.split(","), args.batch)
    except B.BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    note = B.load_note()
    print(f"AF_XDP copy mode on veth, batch {args.batch}, {args.runs} run(s) of "
          f"{args.duration:g} s per loop and mode, median" + (f"; {note}" if note else ""))  # fmt: skip
    rows = []
    for mode, runs in res.items():
        key = "fwd_pps" if mode == "l2fwd" else "xsk_pps"
        med = {lab: {k: B.median([r[k] for r in rs]) for k in rs[0]} for lab, rs in runs.items()}
        py, c = med["python"], med["c"]
        what = "back at gen0" if mode == "l2fwd" else "socket rx"
        rows.append([mode, what, f"{py['rx_pps'] / 1e6:.3f}", f"{c['rx_pps'] / 1e6:.3f}",
                     f"{py[key] / 1e6:.3f}", f"{c[key] / 1e6:.3f}",
                     f"{py[key] / c[key]:.2f}" if c[key] else "-",
                     f"{py['ring_full']:.0f}/{py['fill_empty']:.0f}",
                     f"{c['ring_full']:.0f}/{c['fill_empty']:.0f}"])  # fmt: skip
    print(B.table(["mode", "counted", "dut rx Mpps (py)", "dut rx Mpps (C)", "Mpps (py)",
                   "Mpps (C)", "py / C", "ring full/fill empty (py)", "(C)"], rows))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
