"""CLI: ``bpfdsl events MAP`` -- stream the records of a ring buffer or perf event array."""

from __future__ import annotations

import json
import signal
import sys
import time
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import OK, command_help
from bpfdsl.cli.objrefs import MAP_HELP

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from rich.table import Table

    from bpfdsl.cli import Subcommands
    from bpfdsl.runtime.events import Event, EventStream, RecordBatch, Stats
    from bpfdsl.runtime.packets import PcapWriter


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "events",
        help=command_help("events"),
        description="Read the records a loaded program sends to user space through a "
        f"ringbuf or perf_event_array map and print them decoded by their BTF type.  "
        f"{MAP_HELP}.  A live table on a terminal, one line per record otherwise, one JSON "
        "object per line with --json; --pcap writes the packet bytes records carry "
        "(perf_event_output(m, rec, n)) to a pcap file tcpdump and Wireshark read.  Stops "
        "after --count records or --duration seconds, or on Ctrl-C.  A ringbuf's records "
        "dropped when it was full are reported when the program counts them in a map "
        "RING_drops pinned next to it (docs/language.md).  Needs root.",
    )
    p.add_argument("map", metavar="MAP", help="the event map")
    p.add_argument(
        "--type",
        metavar="STRUCT",
        help="decode records as this struct of the program's BTF (objects of other "
        "compilers; bpfdsl's own describe their record type)",
    )
    p.add_argument("--pcap", metavar="FILE", help="write the packets of the records to FILE")
    p.add_argument("--count", type=int, metavar="N", help="stop after N records")
    p.add_argument("--duration", type=float, metavar="S", help="stop after S seconds")
    p.add_argument(
        "--pages",
        type=int,
        default=16,
        metavar="N",
        help="perf_event_array: data pages per CPU ring, a power of 2 (default 16)",
    )
    p.add_argument("--lines", action="store_true", help="one line per record, even on a tty")
    p.set_defaults(func=cmd_events)


def _type_name(t: int) -> str:
    from bpfdsl.abi.map_types import MapType

    return MapType(t).name.lower()


def _fmt(v: object) -> str:
    if isinstance(v, dict):
        return " ".join(f"{k}={_fmt(x)}" for k, x in v.items())
    return v if isinstance(v, str) else json.dumps(v)


def _line(ev: Event, offset: int) -> str:
    t = time.strftime("%H:%M:%S", time.localtime((ev.time_ns + offset) / 1e9))
    where = f" cpu {ev.cpu}" if ev.cpu is not None else ""
    if ev.lost:
        return f"{t}{where} lost {ev.lost} record(s): the ring was full"
    body = _fmt(ev.value) if ev.value is not None else ev.data.hex(" ")
    if ev.packet is not None:
        body += f" [+{len(ev.packet)} packet bytes of {ev.orig_len}]"
    return f"{t}{where} {body}"


def cmd_events(args: argparse.Namespace) -> int:
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime import events
    from bpfdsl.runtime.packets import PcapWriter

    if args.count is not None and args.count < 1:
        raise UsageError(error("bad-args", f"--count {args.count}: give 1 or more records"))
    if args.duration is not None and not args.duration > 0:
        raise UsageError(error("bad-args", f"--duration {args.duration}: give seconds > 0"))
    if args.pages < 1 or args.pages & (args.pages - 1):
        raise UsageError(error("bad-args", f"--pages {args.pages}: give a power of 2"))
    stream = events.open_events(args.map, type_name=args.type, pages=args.pages)
    pcap = None
    stats = events.Stats()
    table = None
    drops = None
    try:
        drops = events.open_drop_counter(args.map, stream.name)  # the program's RING_drops
        if drops is not None:
            stats.dropped = 0
        if args.pcap:
            pcap = PcapWriter(args.pcap)
        if not args.json and not args.lines and sys.stdout.isatty():
            table = _LiveTable(stream)
        kind = _type_name(stream.type)
        rings = f", {len(stream.rings)} CPU ring(s)" if kind == "perf_event_array" else ""
        record = f"records: struct {stream.record.name}" if stream.record else "records: hex"
        print(f"reading {stream.name} ({kind}{rings}; {record}); Ctrl-C stops", file=sys.stderr,
              flush=True)  # fmt: skip
        if stream.record is None and not args.json:
            print(
                f"note: no record type for map {stream.name!r} in the program's BTF: "
                "records shown as hex (--type STRUCT decodes them)",
                file=sys.stderr,
            )
        end = time.monotonic() + args.duration if args.duration else None
        # SIGINT and SIGTERM (a service manager's stop) end the loop at its next turn (at
        # most 0.2 s): a record taken from the ring is always shown and counted
        stopping: list[int] = []
        old_int = signal.signal(signal.SIGINT, lambda signo, _f: stopping.append(signo))
        signal.signal(signal.SIGTERM, lambda signo, _f: stopping.append(signo))
        try:
            while not stopping and (args.count is None or stats.records < args.count):
                left = 0.2 if end is None else min(0.2, end - time.monotonic())
                if left <= 0:
                    break
                if args.json and pcap is None:  # whole batches, one write each
                    _emit_json(args, stream.poll_batches(left), stream, stats)
                    continue
                for ev in stream.poll(left):
                    if args.count is not None and stats.records >= args.count:
                        break
                    _emit(args, ev, stream, stats, pcap, table)
                if drops is not None:
                    stats.dropped = drops.since_start()
                    if table is not None:
                        table.refresh(stats)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGINT, old_int)
        if drops is not None:
            for ev in stream.read():  # what the ring still holds now counts as received
                if args.count is not None and stats.records >= args.count:
                    break
                _emit(args, ev, stream, stats, pcap, table)
            stats.dropped = drops.since_start()
    finally:
        if table is not None:
            table.stop()
        if pcap is not None:
            pcap.close()
        if drops is not None:
            drops.close()
        stream.close()
    dropped = (
        f", {stats.dropped} dropped by the program (ring full; counted in "
        f"{stream.name}{events.DROPS_SUFFIX})"
        if stats.dropped is not None
        else ""
    )
    if args.json:
        if stats.dropped is not None:  # a last line: the summary (only with a drop counter)
            print(
                json.dumps(
                    {
                        "summary": {
                            "map": stream.name,
                            "records": stats.records,
                            "lost": stats.lost,
                            "dropped": stats.dropped,
                        }
                    }
                ),
                flush=True,
            )
    else:
        extra = f", {stats.frames} frame(s) written to {args.pcap}" if pcap is not None else ""
        lost = f", {stats.lost} lost" if stats.lost else ""
        print(
            f"{stats.records} record(s) from {stream.name}{lost}{dropped}{extra}",
            file=sys.stderr,
        )
    return OK


def _emit_json(
    args: argparse.Namespace, batches: list[RecordBatch], stream: EventStream, stats: Stats
) -> None:
    """The JSON lines of ``batches`` (at most --count records in all), written at once:
    formatting and one write per batch, not a print and a flush per record."""
    out = sys.stdout
    for b in batches:
        n = len(b)
        if args.count is not None and stats.records + n > args.count:
            k = args.count - stats.records
            b.starts, b.lengths, b.lost = b.starts[:k], b.lengths[:k], 0
            if b.times_ns is not None:
                b.times_ns = b.times_ns[:k]
            n = k
        stats.records += n
        stats.lost += b.lost
        if b.cpu is not None and n:
            stats.by_cpu[b.cpu] = stats.by_cpu.get(b.cpu, 0) + n
        lines = b.json_lines(stream.clock_offset_ns)
        if lines:
            out.write("\n".join(lines) + "\n")
        if args.count is not None and stats.records >= args.count:
            break
    out.flush()


def _emit(
    args: argparse.Namespace,
    ev: Event,
    stream: EventStream,
    stats: Stats,
    pcap: PcapWriter | None,
    table: _LiveTable | None,
) -> None:
    off = stream.clock_offset_ns
    if ev.lost:
        stats.lost += ev.lost
    else:
        stats.records += 1
        if ev.cpu is not None:
            stats.by_cpu[ev.cpu] = stats.by_cpu.get(ev.cpu, 0) + 1
        if pcap is not None and ev.packet is not None:
            pcap.write(ev.time_ns + off, ev.packet, ev.orig_len)
            stats.frames += 1
    if args.json:
        print(json.dumps(ev.to_dict(off)), flush=True)
    elif table is not None:
        table.add(ev, stats)
    else:
        print(_line(ev, off), flush=True)


class _LiveTable:
    """The last records as a rich table, redrawn in place (a terminal only)."""

    ROWS = 20

    def __init__(self, stream: EventStream) -> None:
        from rich.console import Console
        from rich.live import Live

        self.stream = stream
        self.rows: list[Event] = []
        self.live = Live(self._render(None), console=Console(), refresh_per_second=4)
        self.live.start()

    def _render(self, stats: Stats | None) -> Table:
        from rich.table import Table

        n = stats.records if stats else 0
        lost = f", {stats.lost} lost" if stats and stats.lost else ""
        if stats is not None and stats.dropped is not None:
            lost += f", {stats.dropped} dropped (ring full)"
        t = Table(title=f"{self.stream.name}: {n} record(s){lost}")
        fields = []
        if self.rows and isinstance(self.rows[-1].value, dict):
            fields = list(self.rows[-1].value)
        for c in ["time", "cpu", *fields] if fields else ["time", "cpu", "record"]:
            t.add_column(c)
        off = self.stream.clock_offset_ns
        for ev in self.rows:
            ts = time.strftime("%H:%M:%S", time.localtime((ev.time_ns + off) / 1e9))
            cpu = "" if ev.cpu is None else str(ev.cpu)
            if ev.lost:
                t.add_row(ts, cpu, f"lost {ev.lost}", *[""] * max(0, len(fields) - 1))
            elif fields and isinstance(ev.value, dict):
                t.add_row(ts, cpu, *(_fmt(ev.value.get(f, "")) for f in fields))
            else:
                t.add_row(ts, cpu, ev.data.hex(" ") if ev.value is None else _fmt(ev.value))
        return t

    def add(self, ev: Event, stats: Stats) -> None:
        self.rows = [*self.rows[-(self.ROWS - 1) :], ev]
        self.live.update(self._render(stats))

    def refresh(self, stats: Stats) -> None:
        """Redraw the title (the drop count changes without a record)."""
        self.live.update(self._render(stats))

    def stop(self) -> None:
        self.live.stop()
