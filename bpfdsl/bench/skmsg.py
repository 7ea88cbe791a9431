"""The ``skmsg`` benchmark: sk_msg ingress redirection against plain TCP over loopback, by
message size (as the throughput/latency tables of the sockmap patches on the kernel list).

For each message size and each of ``plain`` (no program), the program and the baseline:
a TCP stream of SIZE-byte messages (MB/s, 1 MB = 10^6 bytes) and a request/response of a
SIZE-byte request answered by 1 byte (round trip, mean, µs), each ``duration`` seconds,
through the C helper of :mod:`.tcp` (one send()/recv() per message).  The helper runs in a
network namespace of its own (its TCP ``OutSegs`` count only its traffic: a redirected
message sends no TCP segment) and joins a child cgroup v2 made for the benchmark, where the
object's sock_ops program is attached (it puts the sockets into the object's
sockmap/sockhash, to which the sk_msg program is attached).  Programs are attached for
their own runs only, modes alternate in ABBA order; namespace and cgroup are removed at
the end, also on failure.
"""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from bpfdsl.bench import net as N
from bpfdsl.bench.report import (
    Metric,
    Progress,
    Report,
    Section,
    abba,
    delta_pct,
    text_table,
)
from bpfdsl.bench.target import (
    REDIRECT_MAPS,
    LoadedTarget,
    ObjectUnderTest,
    fill_user_maps,
    load_target,
    one_map,
)
from bpfdsl.bench.tcp import TcpHelper
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import netlink
from bpfdsl.runtime import cgroup, sockmap
from bpfdsl.runtime.demo import sigterm_as_interrupt

PLAIN = "plain TCP"
SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144)  # bytes: 64 B .. 256 KiB
CGROUP_PREFIX = "bpfdsl-bench"
METRICS = [
    Metric("tput_mbs", "throughput", "MB/s", 1, 1),
    Metric("lat_us", "latency", "µs", 1, 1),
    Metric("segs_per_msg", "TCP segs/msg", "count", 1, 3),
    Metric("send_user_pct", "send user", "%", 1, 1),
]


@dataclass(slots=True)
class SkmsgOptions:
    """``runs``, ``duration`` (seconds per size, mode and measurement) and the message
    ``sizes`` (bytes)."""

    runs: int = 3
    duration: float = 1.0
    sizes: tuple[int, ...] = SIZES
    notes: list[str] = field(default_factory=list)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``64,1k,256k`` -> (64, 1024, 262144); UsageError for anything else or a size
    outside 1 byte .. 16 MiB."""
    out = []
    for part in text.split(","):
        p = part.strip().lower()
        if not p:
            continue
        mult = {"k": 1024, "m": 1 << 20}.get(p[-1:], 1)
        digits = p[:-1] if mult > 1 else p
        if not digits.isdigit() or not 1 <= int(digits) * mult <= 1 << 24:
            raise UsageError(
                error(
                    "bad-args",
                    f"--sizes: {part.strip()!r} is not a message size",
                    hint="bytes with an optional k/m suffix, 1 .. 16m, e.g. 64,1k,256k",
                )
            )
        out.append(int(digits) * mult)
    if not out:
        raise UsageError(error("bad-args", "--sizes: no size given", hint="e.g. 64,1k,256k"))
    return tuple(out)


def human(n: int) -> str:
    """64 -> '64 B', 4096 -> '4 KiB'."""
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


def tcp_out_segs(ns: str) -> int:
    """TCP ``OutSegs`` of network namespace ``ns`` (/proc/thread-self/net/snmp)."""
    with netlink.in_netns(ns):
        lines = Path("/proc/thread-self/net/snmp").read_text().splitlines()
    tcp = [ln.split() for ln in lines if ln.startswith("Tcp:")]
    return int(tcp[1][tcp[0].index("OutSegs")])


class _Redirector:
    """sock_ops on the cgroup + sk_msg on the sockmap of one object, while entered."""

    def __init__(self, t: LoadedTarget, cg: str) -> None:
        self.t, self.cg = t, cg
        self.map = one_map(
            t,
            REDIRECT_MAPS["sockmap"],
            "sockmap or sockhash",
            "the sk_msg program redirects into a sockmap/sockhash the sock_ops program "
            "fills (declare one: `map socks: sockhash<sock_key, u64>(max_entries: 65536)`)",
        )

    def __enter__(self) -> _Redirector:
        # load_target(want="sk_msg") picked both programs or raised
        assert self.t.main is not None and self.t.entry is not None
        fd = self.t.coll.maps[self.map].fd
        sockmap.sk_msg_attach(fd, self.t.fd(self.t.main), map_name=self.map, prog_name=self.t.main)
        try:
            cgroup.sock_ops_attach(
                self.cg, self.t.fd(self.t.entry), prog_name=self.t.entry or "", multi=False
            )
        except BaseException:
            sockmap.sk_msg_detach(fd, self.t.fd(self.t.main), map_name=self.map)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.t.main is not None and self.t.entry is not None  # as in __enter__
        cgroup.sock_ops_detach(self.cg, self.t.fd(self.t.entry), prog_name=self.t.entry or "")
        sockmap.sk_msg_detach(
            self.t.coll.maps[self.map].fd, self.t.fd(self.t.main), map_name=self.map
        )


def run_skmsg(
    objs: list[ObjectUnderTest], opts: SkmsgOptions, progress: Progress | None = None
) -> Report:
    """``bpfdsl bench skmsg``: ``objs[0]`` the program, ``objs[1]`` (optional) the
    baseline.  One section per message size (rows: runs; columns: plain TCP, the
    baseline, the program) and a summary by size (mean ± sd, change in percent)."""
    progress = progress or Progress()
    labels = [PLAIN] + [o.label for o in reversed(objs)]
    baseline = objs[1].label if len(objs) > 1 else PLAIN
    rep = Report(
        mode="skmsg",
        title=(
            f"bpfdsl bench skmsg: sk_msg ingress redirection vs plain TCP over loopback, "
            f"{opts.runs} run(s) of {opts.duration:g} s per size, mode and measurement; "
            "ABBA order; mean ± sd"
        ),
        labels=labels,
        baseline=baseline,
        runs=opts.runs,
        duration=opts.duration,
        programs={o.label: {"file": o.path, "prog": o.prog} for o in objs},
        notes=list(opts.notes),
    )
    sections = {
        s: Section(f"{human(s)} messages", list(METRICS), compare=[objs[0].label])
        for s in opts.sizes
    }
    with sigterm_as_interrupt(), ExitStack() as stack:
        targets = {}
        for o in objs:
            targets[o.label] = t = load_target(o, want="sk_msg")
            stack.callback(t.close)
            fill_user_maps(t)
        tcp = stack.enter_context(TcpHelper())
        ns = stack.enter_context(netlink.netns(netlink.unique_name(N.NS_PREFIX) + "-sk"))
        cg = cgroup.ChildCgroup(prefix=CGROUP_PREFIX)
        stack.callback(cg.remove)
        reds = {label: _Redirector(t, cg.path) for label, t in targets.items()}
        rep.setup = {"namespace": ns, "cgroup": cg.path, "sizes": list(opts.sizes)}
        rep.setup["programs"] = {
            lbl: {"sk_msg": t.main, "sock_ops": t.entry} for lbl, t in targets.items()
        }
        progress.start(opts.runs * len(labels) * len(opts.sizes), "skmsg")
        where = {"cgroup": cg.path, "netns": netlink.NETNS_RUN_DIR + "/" + ns}
        for i, label in abba(labels, opts.runs):
            with ExitStack() as run:
                if label in reds:
                    run.enter_context(reds[label])
                for size in opts.sizes:
                    progress.step(f"run {i + 1}/{opts.runs} {label} {human(size)}")
                    seg0 = tcp_out_segs(ns)
                    st = tcp.run("stream", size, opts.duration, **where)
                    segs = tcp_out_segs(ns) - seg0
                    rr = tcp.run("rr", size, opts.duration, **where)
                    cpu = st["send_user"] + st["send_sys"]
                    sections[size].runs.setdefault(label, []).append(
                        {
                            "tput_mbs": st["bytes"] / st["secs"] / 1e6,
                            "lat_us": rr["mean_us"],
                            "segs_per_msg": segs / max(st["msgs"], 1),
                            "send_user_pct": 100 * st["send_user"] / cpu if cpu else math.nan,
                            "msgs": st["msgs"],
                            "transactions": rr["transactions"],
                        }
                    )
        progress.finish()
    for s in sections.values():
        s.runs = {label: s.runs[label] for label in labels if label in s.runs}
    rep.sections = list(sections.values())
    rep.summary = _summary(rep, objs[0].label)
    return rep


def _ms(s: Section, label: str, key: str, digits: int = 1) -> str:
    m, sd = s.average(label, key)
    return "-" if math.isnan(m) else f"{m:,.{digits}f} ± {sd:,.{digits}f}"


def _summary(rep: Report, prog: str) -> Section:
    """The by-size table (its text in ``note``; the sections hold the numbers)."""
    labels = rep.labels
    others = [lbl for lbl in labels if lbl != PLAIN]
    head = ["size"]
    for what in ("MB/s", "µs"):
        head += [f"{lbl} {what}" for lbl in labels]
        head += [f"{lbl} vs plain" for lbl in others]
        if rep.baseline != PLAIN:
            head.append(f"vs {rep.baseline}")
    rows = [head]
    assert rep.baseline is not None  # run_skmsg always has one (plain TCP by default)
    for s in rep.sections:
        row = [s.title.split(" messages")[0]]
        for key in ("tput_mbs", "lat_us"):
            row += [_ms(s, lbl, key) for lbl in labels]
            for lbl in others:
                d = delta_pct(s.average(lbl, key)[0], s.average(PLAIN, key)[0])
                row.append("-" if math.isnan(d) else f"{d:+.1f}%")
            if rep.baseline != PLAIN:
                d = s.delta(prog, rep.baseline, key)
                row.append("-" if math.isnan(d) else f"{d:+.1f}%")
        rows.append(row)
    note = text_table(rows)
    return Section(
        "Throughput (MB/s, 1 MB = 10^6 B) and request/response latency (µs) by message size",
        [],
        note=note,
    )
