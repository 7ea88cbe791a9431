"""CLI: ``bpfdsl run`` (a program on packets) and ``bpfdsl demo`` (the main job end to end)."""

from __future__ import annotations

import itertools
import json
import signal
import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from bpfdsl.cli.commands import FAILED, OK, command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from types import FrameType

    from bpfdsl.abi.prog_types import ProgramKind
    from bpfdsl.cli import Subcommands
    from bpfdsl.runtime.pcapfile import RecordSpans
    from bpfdsl.runtime.testrun import BatchCounts, PacketResult

_R = TypeVar("_R")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "run",
        help=command_help("run"),
        description="Run a program on each packet of a capture (or one hex packet) and print "
        "its verdict and what it did: bytes changed, redirect target (or the empty slot and "
        "the fallback taken), map entries changed.  sk_msg programs run on one message "
        "(--msg or --hex) sent on the socket --ctx describes; sock_ops programs run one "
        "callback (--ctx op=...) and take no packet.  FILE := PROG.bpfd | PROG.o;  "
        "PROG := NAME | SECTION.  Exit code 1 when no packet could be run.",
    )
    p.add_argument("file", metavar="FILE", help="a .bpfd source (compiled first) or an object")
    p.add_argument("--prog", metavar="PROG", help="the program to run (needed when several)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--pcap", metavar="F", help="an Ethernet pcap/pcapng capture")
    src.add_argument("--hex", metavar="BYTES", help="one frame as hex, from the L2 header on")
    src.add_argument("--msg", metavar="TEXT", help="sk_msg: the message, as UTF-8 text")
    p.add_argument(
        "--ctx",
        action="append",
        metavar="FIELD=VALUE",
        help="a field of the program's context struct, repeatable: xdp_md ingress_ifindex, "
        "rx_queue_index; sk_msg_md/bpf_sock_ops family, remote_ip4, local_ip4, remote_ip6, "
        "local_ip6, remote_port, local_port (ports in host order); bpf_sock_ops op "
        "(BPF_SOCK_OPS_* name), args=A,B,..., state (BPF_TCP_* name), snd_cwnd, srtt_us, ...",
    )
    p.add_argument(
        "--map",
        action="append",
        nargs=3,
        metavar=("NAME", "KEY", "VALUE"),
        help="put an entry into map NAME before the runs, repeatable; KEY/VALUE parsed by "
        "the map's BTF types as `bpfdsl map update` takes them (10.0.0.1, 10.0.0.0/8, 53, "
        "JSON for structs, hex:BYTES); sockmap/sockhash VALUE: `peer` (the other end of "
        "the --ctx socket) or `self` (interpreter only)",
    )
    p.add_argument(
        "--maps",
        metavar="FILE",
        help='entries from a JSON file: {"NAME": [[KEY, VALUE], ...]} or {"NAME": {"KEY": '
        "VALUE}} (as --map takes them, or JSON values); --map entries come after its own",
    )
    p.add_argument(
        "--fib-route",
        action="append",
        metavar="ROUTE",
        help="interpreter: a route bpf_fib_lookup finds, repeatable: "
        "PREFIX=ifindex:N[,smac:MAC][,dmac:MAC|none] (dmac none: no neighbour entry, "
        "NO_NEIGH); longest prefix wins, no route is NOT_FWDED.  The kernel engine reads "
        "the kernel's own routes (ip route, ip neigh) instead",
    )
    p.add_argument(
        "--fib-routes",
        metavar="FILE",
        help='routes from a JSON file: ["PREFIX=ifindex:N,...", {"prefix": P, "ifindex": N, '
        '"smac": MAC, "dmac": MAC or null}, ...]; --fib-route routes come after its own',
    )
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
        "--dev",
        metavar="IFACE",
        help="kernel engine: the interface the object's device-bound programs (xdp(dev_bound)) "
        "are loaded for, so that its other programs can be test-run (the kernel refuses to "
        "test-run a device-bound program itself: it runs on the interpreter, where the "
        "metadata kfuncs return -EOPNOTSUPP unless --ctx rx_hash=... gives a hint)",
    )
    p.add_argument("--limit", type=int, metavar="N", help="only the first N packets of --pcap")
    p.add_argument("-q", "--quiet", action="store_true", help="only the per-verdict totals")
    p.set_defaults(func=cmd_run)

    d = sub.add_parser(
        "demo",
        help=command_help("demo"),
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


def _auto_engine(
    kind: ProgramKind, dev_bound: Sequence[str] = (), others_bound: Sequence[str] = ()
) -> tuple[str, str | None]:
    """``("kernel", None)`` when BPF_PROG_TEST_RUN can run ``kind`` here, else
    ``("interp", reason)``.  ``dev_bound``: the kfuncs that make the program device-bound
    (the kernel does not test-run it); ``others_bound``: device-bound programs of the
    object the kernel cannot load without --dev."""
    if not kind.test_run:
        return "interp", f"BPF_PROG_TEST_RUN refuses {kind.keyword or kind.section} programs"
    if dev_bound:
        return "interp", (
            f"BPF_PROG_TEST_RUN refuses device-bound programs (it calls {', '.join(dev_bound)}"
            "; the metadata kfuncs return -EOPNOTSUPP here unless --ctx rx_hash=... is given)"
        )
    if others_bound:
        return "interp", (
            f"program {others_bound[0]!r} of the object is device-bound: give --dev IFACE "
            "to load it for a kernel test run"
        )
    if sys.platform != "linux":
        return "interp", "not Linux: no bpf() syscall"
    from bpfdsl.kernel import syscall

    reason = syscall.probe_bpf()
    return ("interp", reason) if reason else ("kernel", None)


def cmd_run(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.obj import collection as objfile
    from bpfdsl.obj.config import parse_config
    from bpfdsl.obj.spec import choose_program
    from bpfdsl.runtime import (
        testrun,
    )

    if args.repeat < 1 or args.repeat > 100_000_000:
        raise UsageError(error("bad-repeat", f"--repeat {args.repeat}: give 1..100000000"))
    if args.limit is not None and args.limit < 1:
        raise UsageError(error("bad-limit", f"--limit {args.limit}: give 1 or more packets"))
    if args.limit is not None and not args.pcap:
        raise UsageError(error("bad-limit", "--limit applies to --pcap only"))
    from bpfdsl.runtime import fibroutes, runinfo

    warnings: list[str] = []
    spec = objfile.read_object(object_bytes(args.file), name=args.file)
    config = parse_config(args.set, spec.configs)
    name, kind = choose_program(spec, args.prog)
    ctx = runinfo.parse_ctx(args.ctx, kind)
    from bpfdsl.runtime.kfuncs import needs_dev_bound

    bound = needs_dev_bound(spec.programs[name])
    others = [] if args.dev else [n for n, p in spec.programs.items() if needs_dev_bound(p)]
    routes = fibroutes.fib_routes(args.fib_route, args.fib_routes)
    if routes and args.engine == "kernel":
        raise UsageError(
            error(
                "bad-fib-route",
                "--fib-route/--fib-routes: the kernel's bpf_fib_lookup reads the kernel's "
                "own routing and neighbour tables, not routes given here",
                hint="run with --engine interp (the interpreter answers from these routes), "
                "or add the routes to the kernel (ip route, ip neigh) and drop --fib-route",
            )
        )
    if routes and args.engine == "auto":
        args.engine = "interp"
        print("engine: interp (--fib-route routes are the interpreter's)", file=sys.stderr)
    if routes and not fibroutes.calls_fib_lookup(spec.programs[name]):
        warnings.append(f"program {name!r} calls no bpf_fib_lookup: the routes are not used")
    if args.engine == "auto":
        args.engine, why = _auto_engine(kind, bound, others)
        if why:
            print(f"engine: interp ({why})", file=sys.stderr)
    testrun.require_test_run(kind, name, args.engine, bound)
    # -q on a capture prints totals only: the frames run in batches, counted, no result
    # object per frame (testrun.count_verdicts; the kernel's batches in one call each)
    counted = bool(args.quiet and not args.json and args.pcap and not ctx)
    batches: Iterable[RecordSpans] | None = None
    frames: Iterable[tuple[int, bytes]] = ()
    if counted:
        batches = _input_batches(args, kind, warnings)
    else:
        frames = _inputs(args, kind, warnings)
    entries = runinfo.map_entries(args.map, args.maps)
    ifindex = 0
    if args.dev and args.engine == "kernel":
        from bpfdsl.kernel import netlink

        ifindex = netlink.ifindex(args.dev)
    engine = testrun.open_engine(args.engine, spec, config=config, ifindex=ifindex)
    warnings.extend(getattr(engine, "warnings", ()))
    out = _RunOutput(args, name)
    saw_tx = False
    try:
        if routes and isinstance(engine, testrun.InterpEngine):  # the kernel: refused above
            engine.collection.env.fib_routes[:] = routes
        runinfo.fill_maps(engine, spec, entries, ctx)
        if batches is not None:
            saw_tx = _drive(
                out,
                testrun.count_verdicts(engine, name, kind, batches, repeat=args.repeat),
                out.add_counts,
                warnings,
            )
        else:
            results = testrun.iter_packets(
                engine,
                name,
                kind,
                frames,
                repeat=args.repeat,
                describe=not args.quiet,
                ctx=ctx,
                events=not args.quiet or args.json,  # -q shows no record: none decoded
            )
            saw_tx = _drive(out, results, out.add, warnings)
    finally:
        engine.close()
        out.stop_progress()
    if saw_tx and args.dev:  # the verdict the kernel would drop on that device
        from bpfdsl.kernel import netlink

        found = netlink.xdp_tx_problem(netlink.ifindex(args.dev))
        if found is not None:
            warnings.append(
                f"a frame got XDP_TX: attached to {args.dev} in native mode, {found[0]}; {found[1]}"
            )
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    return out.finish()


def _drive(
    out: _RunOutput,
    results: Generator[_R, None, None],
    add: Callable[[_R], bool],
    warnings: list[str],
) -> bool:
    """Give each of ``results`` to ``add`` as soon as it is run (a frame's line, or a
    batch's count: ``add`` says whether a frame got XDP_TX) until they end or a signal
    stops them; True when a frame got XDP_TX.  Ctrl-C (or SIGTERM) stops between two
    frames, never inside one's output line.  The run's LinearOnlyWarning (frames a plain
    XDP program saw only 3520 bytes of) is put in ``warnings`` with the others."""
    from warnings import catch_warnings, simplefilter, warn_explicit

    from bpfdsl.runtime import testrun

    saw_tx = False
    stop = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, out.interrupt)
    signal.signal(signal.SIGTERM, out.interrupt)
    with catch_warnings(record=True) as caught:
        simplefilter("always", testrun.LinearOnlyWarning)
        try:
            for r in results:
                saw_tx = add(r) or saw_tx
                if out.interrupted:
                    break
        finally:
            results.close()  # its warning, also after an interrupt
            signal.signal(signal.SIGINT, stop[0])
            signal.signal(signal.SIGTERM, stop[1])
    for c in caught:
        if issubclass(c.category, testrun.LinearOnlyWarning):
            warnings.append(str(c.message))
        else:  # not ours to turn into a line: as if not caught
            warn_explicit(c.message, c.category, c.filename, c.lineno)
    return saw_tx


class _RunOutput:
    """What `run` prints, as the frames are run: a line per frame (text), or the JSON
    document written as it grows (its ``packets`` list one entry per frame), so a capture
    of any length streams in bounded memory; ``-q`` on a terminal shows a progress line
    on stderr instead.  After a Ctrl-C or SIGTERM (``interrupted``) the summary of the frames
    run so far is printed all the same, and the exit code is 128 + the signal (130, 143)."""

    def __init__(self, args: argparse.Namespace, name: str) -> None:
        self.args, self.name = args, name
        self.totals: Counter[str] = Counter()
        self.count = self.skipped = 0
        self.first_skip = ""
        self.interrupted = False
        self.signal = 0
        self.progress = None
        if args.json:
            head = {"program": name, "engine": args.engine, "repeat": args.repeat}
            print(json.dumps(head)[:-1] + ', "packets": [', flush=True)
        elif args.quiet and sys.stderr.isatty():
            from rich.progress import Progress, SpinnerColumn, TextColumn

            self.progress = Progress(
                SpinnerColumn(), TextColumn("{task.completed} frame(s) run"), transient=True
            )
            self.task = self.progress.add_task("run", total=None)
            self.progress.start()

    def interrupt(self, signum: int, _frame: FrameType | None) -> None:
        """The SIGINT/SIGTERM handler: the loop stops after the frame being run."""
        self.interrupted = True
        self.signal = signum

    def add_counts(self, batch: tuple[BatchCounts, dict[str, int]]) -> bool:
        """A batch of ``-q`` (testrun.count_verdicts: its counts and verdict totals); True
        when a frame of it got XDP_TX."""
        counts, verdicts = batch
        self.totals.update(verdicts)
        if counts.skipped:
            self.totals["skipped"] += counts.skipped
            self.skipped += counts.skipped
            self.first_skip = self.first_skip or counts.first_skip
        self.count += counts.frames
        if self.progress is not None:
            self.progress.update(self.task, completed=self.count)
        return "XDP_TX" in verdicts

    def add(self, r: PacketResult) -> bool:
        """One frame's result: its line (or JSON entry); True when it got XDP_TX."""
        self.totals[r.verdict or "skipped"] += 1
        if r.skipped:
            self.skipped += 1
            self.first_skip = self.first_skip or r.skipped
        if self.args.json:
            sep = "," if self.count else ""
            print(f"{sep}\n  {json.dumps(r.to_dict())}", end="", flush=True)
        elif not self.args.quiet:
            _print_result(r, self.args.repeat)
            sys.stdout.flush()
        elif self.progress is not None:
            self.progress.update(self.task, completed=self.count + 1)
        self.count += 1
        return r.verdict == "XDP_TX"

    def stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def finish(self) -> int:
        status = OK
        if self.count and self.skipped == self.count:
            from bpfdsl.diagnostics import error

            why = self.first_skip + (", ..." if self.count > 1 else "")
            d = error("nothing-run", f"no packet was run: all {self.count} skipped ({why})")
            print(d.render(), file=sys.stderr)
            status = FAILED
        if self.interrupted:
            print(f"interrupted after {self.count} packet(s)", file=sys.stderr)
            status = 128 + self.signal  # the shell's code for a death by that signal
        if self.args.json:
            tail: dict[str, object] = {"totals": dict(self.totals)}
            if self.interrupted:
                tail["interrupted"] = True
            print("\n], " + json.dumps(tail)[1:], flush=True)
            return status
        parts = ", ".join(f"{v} {n}" for v, n in sorted(self.totals.items()))
        print(
            f"{self.count} packet(s) through {self.name!r} ({self.args.engine}): "
            f"{parts or 'none'}" + (" (interrupted)" if self.interrupted else "")
        )
        return status


def _refuse_input(args: argparse.Namespace, kind: ProgramKind) -> None:
    """Raise UsageError for an input that programs of ``kind`` do not run on: a packet or
    message for sock_ops, a capture for sk_msg, a message (``--msg``) for the others."""
    from bpfdsl.diagnostics import UsageError, error

    what = kind.keyword or kind.section
    given = next((f"--{o}" for o in ("pcap", "hex", "msg") if getattr(args, o) is not None), None)
    if kind.ctx == "bpf_sock_ops" and given:
        raise UsageError(
            error(
                "bad-input",
                f"{given}: a sock_ops program runs on a socket event, not on a packet",
                hint="describe the event with --ctx, e.g. --ctx op=BPF_SOCK_OPS_"
                "PASSIVE_ESTABLISHED_CB --ctx local_ip4=10.0.0.1 --ctx local_port=80",
            )
        )
    if kind.ctx == "sk_msg_md" and args.pcap is not None:
        raise UsageError(
            error(
                "bad-input",
                "--pcap: an sk_msg program runs on a message sent on a socket, not on "
                "captured frames",
                hint="give the message with --msg TEXT or --hex BYTES",
            )
        )
    if kind.ctx not in ("bpf_sock_ops", "sk_msg_md") and args.msg is not None:
        raise UsageError(
            error(
                "bad-input",
                f"--msg is the message of an sk_msg program; {what} programs run on frames",
                hint="give a frame with --hex or a capture with --pcap",
            )
        )


def _inputs(
    args: argparse.Namespace, kind: ProgramKind, warnings: list[str]
) -> Iterable[tuple[int, bytes]]:
    """(index, bytes) to run on: frames for XDP (a capture read as it is run), one message
    for sk_msg, nothing for sock_ops (one run of the callback).  Raises UsageError for
    inputs of the wrong kind, or a capture that cannot be read or holds no packet."""
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime import packets

    _refuse_input(args, kind)
    if kind.ctx == "bpf_sock_ops":
        return [(1, b"")]
    if kind.ctx == "sk_msg_md":
        if args.msg is None and args.hex is None:
            raise UsageError(
                error("bad-input", "no message to run on", hint="add --msg TEXT or --hex BYTES")
            )
        return [(1, args.msg.encode() if args.msg is not None else packets.parse_hex(args.hex))]
    if args.pcap:
        stream = packets.iter_pcap(args.pcap, limit=args.limit, warnings=warnings)
        first = next(stream, None)  # an empty capture is refused before anything runs
        if first is None:
            raise UsageError(error("bad-capture", f"{args.pcap}: the capture holds no packet"))
        return itertools.chain([(first.index, first.data)], ((f.index, f.data) for f in stream))
    if args.hex is None:
        raise UsageError(
            error("bad-input", "no packet to run on", hint="add --hex FRAME or --pcap FILE")
        )
    return [(1, packets.parse_hex(args.hex))]


def _input_batches(
    args: argparse.Namespace, kind: ProgramKind, warnings: list[str]
) -> Iterable[RecordSpans]:
    """``--pcap``'s frames in batches (packets.iter_pcap_spans), for ``-q``.  Raises
    UsageError as :func:`_inputs` does."""
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime import packets

    _refuse_input(args, kind)
    spans = packets.iter_pcap_spans(args.pcap, limit=args.limit, warnings=warnings)
    head = next(spans, None)
    if head is None:
        raise UsageError(error("bad-capture", f"{args.pcap}: the capture holds no packet"))
    return itertools.chain([head], spans)


def _print_result(r: PacketResult, repeat: int) -> None:
    head = f"#{r.index:<5} {r.length:>5} B  "
    if r.skipped:
        print(f"{head}skipped: {r.skipped}")
        return
    ns = f"  {r.duration_ns} ns/run" if repeat > 1 else ""
    print(f"{head}{r.verdict:<12} {r.summary}{ns}")
    for line in r.changes + r.effects:
        print(f"        {line}")
    for ev in r.events:
        body = (
            " ".join(f"{k}={v}" for k, v in ev.value.items())
            if isinstance(ev.value, dict)
            else ev.data.hex(" ")
        )
        extra = f" [+{len(ev.packet)} packet bytes]" if ev.packet is not None else ""
        print(f"        event {ev.map}: {body}{extra}")


def cmd_demo(args: argparse.Namespace) -> int:
    from bpfdsl.runtime import demo

    return demo.main(packets=args.packets, port=args.port, mode=args.mode, as_json=args.json)
