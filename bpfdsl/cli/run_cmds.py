"""CLI: ``bpfdsl run`` (a program on packets) and ``bpfdsl demo`` (the main job end to end)."""

from __future__ import annotations

import json
import sys
from collections import Counter

OK, FAILED = 0, 1


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a program on packets (BPF_PROG_TEST_RUN or the interpreter)",
        description="Run a program on each packet of a capture (or one hex packet) and print "
        "its verdict and what it changed.  FILE := PROG.bpfd | PROG.o;  "
        "PROG := NAME | SECTION.  Exit code 1 when no packet could be run.",
    )
    p.add_argument("file", metavar="FILE", help="a .bpfd source (compiled first) or an object")
    p.add_argument("--prog", metavar="PROG", help="the program to run (needed when several)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--pcap", metavar="F", help="an Ethernet pcap/pcapng capture")
    src.add_argument("--hex", metavar="BYTES", help="one frame as hex, from the L2 header on")
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run each packet N times and print ns per run (kernel-measured)",
    )
    p.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="load-time config value (.rodata), repeatable",
    )
    p.add_argument(
        "--engine",
        default="auto",
        choices=("auto", "kernel", "interp"),
        help="kernel (BPF_PROG_TEST_RUN), interp (userspace interpreter), or auto (default: "
        "the kernel where bpf() works and the program kind can be test-run, else interp)",
    )
    p.add_argument(
        "--map",
        nargs=3,
        action="append",
        metavar=("NAME", "KEY", "VALUE"),
        help="put an entry into map NAME before the runs, parsed by its BTF types as "
        "`bpfdsl map update` does (10.0.0.0/8, 53, JSON for structs, hex:BYTES); repeatable",
    )
    p.add_argument(
        "--maps",
        metavar="FILE",
        help='entries from a JSON file: {"NAME": [[KEY, VALUE], ...]} or {"NAME": {"KEY": VALUE}}',
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N packets of --pcap")
    p.add_argument("-q", "--quiet", action="store_true", help="only the per-verdict totals")
    p.set_defaults(func=cmd_run)

    d = sub.add_parser(
        "demo",
        help="the main job end to end on a veth pair in a temporary namespace",
        description="Compile progs/xdp_udp_filter.bpfd, attach it (native XDP) to one end of a "
        "fresh veth pair in a temporary network namespace, send UDP packets from the other "
        "end, print what was dropped and passed, and remove everything.  Needs root.",
    )
    d.add_argument(
        "--packets",
        type=int,
        default=20,
        metavar="N",
        help="UDP packets to send to each port (default 20, at most 10000)",
    )
    d.add_argument("--port", type=int, default=9999, help="the blocked UDP port (default 9999)")
    d.add_argument("--mode", default="native", choices=("native", "generic"), help="XDP mode")
    d.set_defaults(func=cmd_demo)


def _auto_engine(kind) -> tuple[str, str | None]:
    """``("kernel", None)`` when BPF_PROG_TEST_RUN can run ``kind`` here, else
    ``("interp", reason)``."""
    if not kind.test_run:
        return "interp", f"BPF_PROG_TEST_RUN refuses {kind.keyword or kind.section} programs"
    if sys.platform != "linux":
        return "interp", "not Linux: no bpf() syscall"
    from bpfdsl.kernel import syscall  # noqa: PLC0415

    reason = syscall.probe_bpf()
    return ("interp", reason) if reason else ("kernel", None)


def cmd_run(args) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.diagnostics import UsageError, error  # noqa: PLC0415
    from bpfdsl.obj import collection as objfile
    from bpfdsl.obj.config import parse_config
    from bpfdsl.obj.entries import read_entries
    from bpfdsl.obj.spec import choose_program
    from bpfdsl.runtime import packets, testrun  # noqa: PLC0415

    if args.repeat < 1 or args.repeat > 100_000_000:
        raise UsageError(error("bad-repeat", f"--repeat {args.repeat}: give 1..100000000"))
    if args.limit is not None and args.limit < 1:
        raise UsageError(error("bad-limit", f"--limit {args.limit}: give 1 or more packets"))
    if args.limit is not None and not args.pcap:
        raise UsageError(error("bad-limit", "--limit applies to --pcap only"))
    warnings: list[str] = []
    if args.pcap:
        frames = [
            (f.index, f.data)
            for f in packets.read_pcap(args.pcap, limit=args.limit, warnings=warnings)
        ]
        if not frames:
            raise UsageError(error("bad-capture", f"{args.pcap}: the capture holds no packet"))
    else:
        frames = [(1, packets.parse_hex(args.hex))]
    spec = objfile.read_object(object_bytes(args.file), name=args.file)
    config = parse_config(args.set, spec.configs)
    name, kind = choose_program(spec, args.prog)
    if args.engine == "auto":
        args.engine, why = _auto_engine(kind)
        if why:
            print(f"engine: interp ({why})", file=sys.stderr)
    testrun.require_test_run(kind, name, args.engine)
    entries = read_entries(args.maps) if args.maps else []
    entries += [tuple(e) for e in args.map or []]
    engine = testrun.open_engine(args.engine, spec, config=config)
    try:
        testrun.preload_maps(engine, spec, entries)
        results = testrun.run_packets(
            engine,
            name,
            kind,
            frames,
            repeat=args.repeat,
            describe=not args.quiet and not args.json,
        )
    finally:
        engine.close()
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    totals = Counter(r.verdict or "skipped" for r in results)
    status = OK
    if all(r.skipped for r in results):
        print(
            f"error: no packet was run: all {len(results)} skipped "
            f"({results[0].skipped})" + (", ..." if len(results) > 1 else ""),
            file=sys.stderr,
        )
        status = FAILED
    if args.json:
        print(
            json.dumps(
                {
                    "program": name,
                    "engine": args.engine,
                    "repeat": args.repeat,
                    "packets": [r.to_dict() for r in results],
                    "totals": dict(totals),
                },
                indent=2,
            )
        )
        return status
    if not args.quiet:
        for r in results:
            _print_result(r, args.repeat)
    parts = ", ".join(f"{v} {n}" for v, n in sorted(totals.items()))
    print(f"{len(results)} packet(s) through {name!r} ({args.engine}): {parts or 'none'}")
    return status


def _print_result(r, repeat: int) -> None:
    head = f"#{r.index:<5} {r.length:>5} B  "
    if r.skipped:
        print(f"{head}skipped: {r.skipped}")
        return
    ns = f"  {r.duration_ns} ns/run" if repeat > 1 else ""
    print(f"{head}{r.verdict:<12} {r.summary}{ns}")
    for line in r.changes:
        print(f"        {line}")
    for ev in r.events:
        body = (
            " ".join(f"{k}={v}" for k, v in ev.value.items())
            if isinstance(ev.value, dict)
            else ev.data.hex(" ")
        )
        extra = f" [+{len(ev.packet)} packet bytes]" if ev.packet is not None else ""
        print(f"        event {ev.map}: {body}{extra}")


def cmd_demo(args) -> int:
    from bpfdsl.runtime import demo  # noqa: PLC0415

    return demo.main(packets=args.packets, port=args.port, mode=args.mode, as_json=args.json)
