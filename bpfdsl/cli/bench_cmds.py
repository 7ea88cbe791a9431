"""CLI: ``bpfdsl bench xdp|redirect|xsk|skmsg PROG [--baseline OTHER]``: the user's
program under load on a setup the command makes and removes (namespaces, veth pairs,
a cgroup), in the kernel list's table layout; ``--json``, ``--plot FILE.png``."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import OK, command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from types import ModuleType

    from bpfdsl.bench.target import ObjectUnderTest
    from bpfdsl.cli import Subcommands

MODES = {
    "xdp": "packets/s and per-verdict counts of an XDP program on a veth (as xdp-bench "
    "drop/pass/tx), traffic from a live-frame generator (BPF_PROG_TEST_RUN)",
    "redirect": "devmap or cpumap redirect rates with the object's entry program; for a "
    "cpumap also a TCP stream and request/response through the steered path",
    "xsk": "AF_XDP receive-drop and l2fwd rates in copy mode, with the program that "
    "steers frames to its xskmap",
    "skmsg": "sk_msg ingress redirection vs plain TCP over loopback by message size "
    "(64 B .. 256 KiB): throughput and latency, mean ± sd, change in percent",
}


def register(sub: Subcommands) -> None:
    from bpfdsl.cli import formatter

    p = sub.add_parser(
        "bench",
        help=command_help("bench"),
        description="Run a program (.bpfd, compiled first, or an object from any compiler) "
        "under load on a setup this command makes and removes -- veth pairs in network "
        "namespaces, a cgroup for sk_msg -- and print the kernel list's tables: one row per "
        "run, Average, ± sd and the Delta in percent against --baseline (runs in ABBA "
        "order).  Needs root.",
    )
    modes = p.add_subparsers(dest="bench_mode", metavar="MODE")
    for mode, text in MODES.items():
        m = modes.add_parser(mode, help=text, description=text, formatter_class=formatter())
        m.add_argument("file", metavar="PROG", help="the program: a .bpfd source or an object")
        m.add_argument("--baseline", metavar="OTHER", help="a second program to compare with")
        m.add_argument("--prog", metavar="NAME", help="the program of PROG to use (when several)")
        m.add_argument("--baseline-prog", metavar="NAME", help="the program of OTHER to use")
        m.add_argument(
            "--runs", type=int, default=3, metavar="N", help="runs per program (default 3)"
        )
        m.add_argument(
            "--duration",
            type=float,
            default=1.0 if mode == "skmsg" else 2.0,
            metavar="SECONDS",
            help="seconds of load per run (skmsg: per size and measurement)",
        )
        m.add_argument("--plot", metavar="FILE.png", help="also draw the results (matplotlib)")
        m.add_argument(
            "--set", action="append", metavar="NAME=VALUE", help="load-time config, repeatable"
        )
        m.add_argument(
            "--map",
            action="append",
            nargs=3,
            metavar=("NAME", "KEY", "VALUE"),
            help="a map entry written before each run, repeatable (as `bpfdsl map update`)",
        )
        if mode != "skmsg":
            m.add_argument(
                "--size", type=int, default=60, metavar="BYTES", help="frame bytes without FCS (60)"
            )
            m.add_argument("--hex", metavar="FRAME", help="the frame to send, as hex from L2 on")
            m.add_argument(
                "--xdp-mode", default="native", choices=("native", "generic"), help="XDP mode"
            )
        if mode == "redirect":
            m.add_argument("--cpu", metavar="LIST", help="cpumap CPUs to fill (default: all but 0)")
            m.add_argument("--qsize", type=int, default=2048, help="cpumap queue size (2048)")
            m.add_argument("--no-tcp", action="store_true", help="cpumap: no TCP stream / RR")
        if mode == "xsk":
            m.add_argument(
                "--xsk-mode",
                default="rxdrop,l2fwd",
                metavar="LIST",
                help="rxdrop, l2fwd or both (default)",
            )
        if mode == "skmsg":
            m.add_argument(
                "--sizes",
                metavar="LIST",
                help="message sizes, e.g. 64,1k,256k (default 64 B .. 256 KiB)",
            )
        m.set_defaults(func=cmd_bench)
    p.set_defaults(func=cmd_bench_help, bench_parser=p)


def cmd_bench_help(args: argparse.Namespace) -> int:
    args.bench_parser.print_help()
    return 2


def _check(args: argparse.Namespace) -> None:
    from bpfdsl.diagnostics import UsageError, error

    if not 1 <= args.runs <= 1000:
        raise UsageError(error("bad-args", f"--runs {args.runs}: give 1..1000"))
    if not 0.05 <= args.duration <= 3600:
        raise UsageError(
            error("bad-args", f"--duration {args.duration:g}: give 0.05..3600 seconds")
        )
    if args.plot is not None and not args.plot.lower().endswith(".png"):
        raise UsageError(error("bad-args", f"--plot {args.plot}: give a FILE.png"))
    if args.plot is not None:
        d = os.path.dirname(os.path.abspath(args.plot))
        if not os.path.isdir(d):
            raise UsageError(error("bad-args", f"--plot {args.plot}: no directory {d}"))


def _plotter() -> ModuleType:
    from bpfdsl.diagnostics import UsageError, error

    try:
        from bpfdsl.bench import plot
    except ImportError as e:
        raise UsageError(
            error(
                "bench-no-matplotlib",
                f"--plot needs matplotlib ({e.name or e} is not installed)",
                hint="pip install 'bpfdsl[bench]' (or pip install matplotlib)",
            )
        ) from None
    return plot


def _objects(args: argparse.Namespace) -> list[ObjectUnderTest]:
    from bpfdsl.bench.target import ObjectUnderTest
    from bpfdsl.cli import object_bytes

    maps = [tuple(m) for m in args.map or []]
    sets = list(args.set or [])
    objs = [ObjectUnderTest("program", args.file, object_bytes(args.file), sets, maps, args.prog)]
    if args.baseline:
        objs.append(
            ObjectUnderTest(
                "baseline",
                args.baseline,
                object_bytes(args.baseline),
                sets,
                maps,
                args.baseline_prog,
            )
        )
    return objs


def cmd_bench(args: argparse.Namespace) -> int:
    from bpfdsl.bench.report import RichProgress
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.kernel.syscall import NoPermission

    _check(args)
    plot = _plotter() if args.plot else None
    if os.geteuid() != 0:
        raise NoPermission(f"bpfdsl bench {args.bench_mode} (namespaces, veths, XDP)")
    objs = _objects(args)
    progress = RichProgress()
    mode = args.bench_mode
    if mode == "skmsg":
        from bpfdsl.bench import skmsg

        sizes = skmsg.parse_sizes(args.sizes) if args.sizes else skmsg.SIZES
        sk_opts = skmsg.SkmsgOptions(runs=args.runs, duration=args.duration, sizes=sizes)
        rep = skmsg.run_skmsg(objs, sk_opts, progress)
    else:
        from bpfdsl.bench import xdp
        from bpfdsl.runtime import packets

        opts = xdp.XdpOptions(runs=args.runs, duration=args.duration, size=args.size)
        opts.xdp_mode = args.xdp_mode
        if args.hex:
            opts.frame = packets.parse_hex(args.hex)
            if not 14 <= len(opts.frame) <= 3520:
                raise UsageError(
                    error("bad-args", f"--hex: {len(opts.frame)} bytes; give 14..3520")
                )
        if mode == "xdp":
            rep = xdp.run_xdp(objs, opts, progress)
        elif mode == "redirect":
            opts.qsize, opts.tcp = args.qsize, not args.no_tcp
            if args.cpu:
                try:
                    opts.cpus = [int(c) for c in args.cpu.split(",") if c.strip()]
                except ValueError:
                    raise UsageError(
                        error("bad-args", f"--cpu {args.cpu}: give CPU numbers, e.g. 1,2")
                    ) from None
            rep = xdp.run_redirect(objs, opts, progress)
        else:
            from bpfdsl.bench import xsk

            wanted = [m.strip() for m in args.xsk_mode.split(",") if m.strip()]
            bad = [m for m in wanted if m not in xsk.XSK_MODES]
            if bad or not wanted:
                raise UsageError(
                    error("bad-args", f"--xsk-mode {args.xsk_mode}: give rxdrop, l2fwd or both")
                )
            rep = xsk.run_xsk(objs, opts, wanted, progress)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2))
    else:
        print(rep.render(verbose=args.verbose))
    if plot is not None:
        plot.save(rep, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return OK
