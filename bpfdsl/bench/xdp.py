"""The ``xdp`` and ``redirect`` benchmarks: an XDP program on a veth under live-frame load.

``xdp`` (as ``xdp-bench drop/pass/tx``): the program under test runs on ``dut0`` (native
XDP), the generator (:mod:`.livegen`) sends one frame kind out of ``gen0`` on CPU 0 for
``duration`` seconds per run; ``gen0`` runs a drop program so XDP_TX frames have
somewhere to go.  Counted by veth itself (:func:`.counters.xdp_counts`): frames the program
ran on, per verdict, and frames the generator could not queue (``lost``).

``redirect`` (as ``xdp-bench redirect-map`` / ``redirect-cpu``): the object's devmap or
cpumap is filled by the benchmark -- every devmap slot (a devmap_hash: the ingress ifindex
and keys 0..63) sends to ``egr1``, whose peer ``snk1`` counts arrivals; the cpumap CPUs
``--cpu`` (default: every CPU but the generator's) get a queue of ``--qsize`` frames --
each entry with the object's ``xdp/devmap`` or ``xdp/cpumap`` program when it has one.
Counted: redirects (veth), what left ``egr1`` and reached ``snk1``, or what the cpumap
kthreads processed and the entry program's verdicts (:class:`.counters.CpumapCounter`).
For a cpumap also a TCP stream and a 1-byte request/response (:mod:`.tcp`) from the gen
namespace to the dut namespace, through the steered path: the program redirects the TCP
segments arriving on ``dut0`` to the cpumap, whose CPU hands them to the stack.

Programs alternate in ABBA order (:func:`.report.abba`); each run first re-attaches its
program (atomic replace) and re-fills the maps, then sends ``warmup`` seconds unmeasured.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.bench import net as N
from bpfdsl.bench.counters import CpumapCounter, CpumapCounts, XdpCounts, xdp_counts
from bpfdsl.bench.livegen import LiveFrameGenerator
from bpfdsl.bench.report import Metric, Progress, Report, Section, abba
from bpfdsl.bench.target import (
    REDIRECT_MAPS,
    LoadedTarget,
    ObjectUnderTest,
    fill_user_maps,
    load_target,
    one_map,
)
from bpfdsl.bench.tcp import TcpHelper
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import cpumap, devmap
from bpfdsl.runtime.packets import udp_frame

UDP_SPORT, UDP_DPORT = 4242, 9  # the default frame: UDP to the discard port
DRAIN = 0.05  # seconds after the generator stops: veth NAPI / cpumap kthreads finish
GEN_CPU = 0
DEVMAP_HASH_KEYS = 64


@dataclass(slots=True)
class XdpOptions:
    """Settings of an ``xdp``/``redirect`` benchmark.  ``duration``: seconds of traffic per
    run and program; ``size``: frame bytes without FCS (60 = 64 on the wire); ``frame``: the
    frame to send instead (bytes from the Ethernet header); ``cpus``/``qsize``: cpumap
    entries; ``tcp``: also the TCP stream and request/response through a cpumap."""

    runs: int = 3
    duration: float = 2.0
    size: int = 60
    frame: bytes | None = None
    xdp_mode: str = "native"
    cpus: list[int] | None = None
    qsize: int = 2048
    tcp: bool = True
    warmup: float = 0.2
    batch: int = 64
    notes: list[str] = field(default_factory=list)


RATE = Metric("rx_pps", "rx", "Mpps", 1e6)
VERDICT_METRICS = [
    Metric("frames", "frames", "count", 1, 0),
    Metric("XDP_PASS", "XDP_PASS", "count", 1, 0),
    Metric("XDP_DROP", "XDP_DROP", "count", 1, 0),
    Metric("XDP_TX", "XDP_TX", "count", 1, 0),
    Metric("XDP_REDIRECT", "XDP_REDIRECT", "count", 1, 0),
    Metric("undelivered", "veth drops", "count", 1, 0),
    Metric("lost", "not queued", "count", 1, 0),
]


def default_frame(bnet: N.BenchNet, size: int) -> bytes:
    """A ``size``-byte IPv4/UDP frame gen0 -> dut0 (198.18.0.1:4242 -> 198.18.0.2:9)."""
    if not 42 <= size <= 3520:
        raise UsageError(error("bad-args", f"--size {size}: give 42..3520 bytes"))
    return udp_frame(
        src_mac=bnet.gen_mac,
        dst_mac=bnet.dut_mac,
        src_ip=N.GEN_IP,
        dst_ip=N.DUT_IP,
        sport=UDP_SPORT,
        dport=UDP_DPORT,
        payload=bytes(size - 42),
    )


def _verdicts(c: XdpCounts) -> dict[str, float]:
    return {
        "frames": c.packets,
        "XDP_PASS": c.passed,
        "XDP_DROP": c.drop,
        "XDP_TX": c.tx + c.tx_errors,
        "XDP_REDIRECT": c.redirect,
        "undelivered": c.rx_drops,
    }


class _Bench:
    """One benchmark's objects, network and generator (closed together)."""

    def __init__(
        self, stack: ExitStack, objs: list[ObjectUnderTest], opts: XdpOptions, egress: bool
    ):
        self.opts = opts
        self.targets: dict[str, LoadedTarget] = {}
        for o in objs:
            self.targets[o.label] = t = load_target(o, want="xdp")
            stack.callback(t.close)
        self.net = stack.enter_context(N.bench_net(egress=egress))
        frame = opts.frame or default_frame(self.net, opts.size)
        self.gen = stack.enter_context(
            LiveFrameGenerator(
                self.net.ifindex(self.net.gen_ns, N.GEN_DEV), frame, batch=opts.batch
            )
        )
        self.frame = frame
        self.affinity = os.sched_getaffinity(0)
        if GEN_CPU in self.affinity:
            os.sched_setaffinity(0, {GEN_CPU})  # this thread only: the generator's CPU
            stack.callback(os.sched_setaffinity, 0, self.affinity)

    @contextmanager
    def unpinned(self) -> Iterator[None]:
        """The thread's CPUs as before the benchmark while the body runs (child processes
        such as the TCP helper inherit them), then the generator's CPU again."""
        now = os.sched_getaffinity(0)
        os.sched_setaffinity(0, self.affinity)
        try:
            yield
        finally:
            os.sched_setaffinity(0, now)

    def attach(self, t: LoadedTarget) -> None:
        assert t.main is not None  # load_target(want="xdp") picked the program or raised
        N.attach_xdp(self.net.dut_ns, N.DUT_DEV, t.fd(t.main), self.opts.xdp_mode)

    def counts(self, ns: str, dev: str) -> XdpCounts:
        with netlink.in_netns(ns):
            return xdp_counts(dev)

    def send(self, seconds: float) -> tuple[int, float]:
        with netlink.in_netns(self.net.gen_ns):
            return self.gen.send_for(seconds)


def _labels(objs: list[ObjectUnderTest]) -> list[str]:
    """Column order: the baseline (second object) first, as "before / after"."""
    return [o.label for o in reversed(objs)]


def _report(mode: str, title: str, objs: list[ObjectUnderTest], opts: XdpOptions) -> Report:
    return Report(
        mode=mode,
        title=title,
        labels=_labels(objs),
        baseline=objs[1].label if len(objs) > 1 else None,
        runs=opts.runs,
        duration=opts.duration,
        programs={o.label: {"file": o.path, "prog": o.prog} for o in objs},
        notes=list(opts.notes),
    )


def _no_frames(label: str, what: str, hint: str) -> DiagnosticError:
    return DiagnosticError(error("bench-no-traffic", f"{label}: {what}", hint=hint))


def run_xdp(
    objs: list[ObjectUnderTest], opts: XdpOptions, progress: Progress | None = None
) -> Report:
    """``bpfdsl bench xdp``: ``objs[0]`` is the program, ``objs[1]`` (optional) the
    baseline.  Returns the report (rate and per-verdict sections)."""
    progress = progress or Progress()
    rep = _report("xdp", "", objs, opts)
    rate = Section("XDP receive rate on dut0 (frames the program ran on per second)", [RATE])
    verd = Section(
        "Verdicts per run (frames; XDP_DROP includes XDP_ABORTED)", list(VERDICT_METRICS)
    )
    with ExitStack() as stack:
        b = _Bench(stack, objs, opts, egress=False)
        sink = stack.enter_context(N.drop_program())
        N.attach_xdp(b.net.gen_ns, N.GEN_DEV, int(sink), "native")  # XDP_TX lands here
        rep.title = (
            f"bpfdsl bench xdp: {len(b.frame)}-byte frames (+4 FCS) from a live-frame "
            f"generator on CPU {GEN_CPU}, {opts.runs} run(s) of {opts.duration:g} s per "
            f"program, ABBA order, {opts.xdp_mode} XDP on veth"
        )
        rep.setup = _setup(b, opts)
        progress.start(opts.runs * len(objs), "xdp")
        for i, label in abba(rep.labels, opts.runs):
            progress.step(f"run {i + 1}/{opts.runs} {label}")
            t = b.targets[label]
            b.attach(t)
            fill_user_maps(t)
            b.send(opts.warmup)
            time.sleep(DRAIN)
            c0, g0 = b.counts(b.net.dut_ns, N.DUT_DEV), b.counts(b.net.gen_ns, N.GEN_DEV)
            sent, secs = b.send(opts.duration)
            time.sleep(DRAIN)
            c = b.counts(b.net.dut_ns, N.DUT_DEV) - c0
            g = b.counts(b.net.gen_ns, N.GEN_DEV) - g0
            if c.packets == 0:
                raise _no_frames(label, "the program ran on no frame", "is dut0 up? see `dmesg`")
            rate.runs.setdefault(label, []).append({"rx_pps": c.packets / secs})
            row = _verdicts(c)
            row.update(lost=g.xmit_errors, sent=sent, seconds=secs)
            verd.runs.setdefault(label, []).append(row)
        progress.finish()
    _order(rep, rate, verd)
    _drop_unused(verd)
    rep.sections = [rate, verd]
    return rep


def _order(rep: Report, *sections: Section) -> None:
    for s in sections:
        s.runs = {label: s.runs[label] for label in rep.labels if label in s.runs}


def _drop_unused(s: Section) -> None:
    """Leave out verdict columns that are zero in every run (frames stays)."""
    keep = []
    for m in s.metrics:
        if m.key == "frames" or any(r.get(m.key) for rows in s.runs.values() for r in rows):
            keep.append(m)
    s.metrics = keep


def _setup(b: _Bench, opts: XdpOptions) -> dict:
    return {
        "namespaces": list(b.net.namespaces),
        "generator": {
            "dev": N.GEN_DEV,
            "cpu": GEN_CPU,
            "batch": b.gen.batch,
            "frame_bytes": len(b.frame),
        },
        "dut": {"dev": N.DUT_DEV, "xdp_mode": opts.xdp_mode},
        "possible_cpus": S.possible_cpus(),
        "programs": {lbl: {"main": t.main, "entry": t.entry} for lbl, t in b.targets.items()},
    }


# ---- redirect ------------------------------------------------------------------------


def _redirect_kind(t: LoadedTarget) -> tuple[str, str]:
    """("cpumap" | "devmap", map name) of the object's one redirect map."""
    name = one_map(
        t,
        REDIRECT_MAPS["cpumap"] + REDIRECT_MAPS["devmap"],
        "cpumap or devmap",
        "the redirect benchmark fills the object's cpumap or devmap (declare one: "
        "`map cpu_map: cpumap(max_entries: 64)`)",
    )
    kind = "cpumap" if t.coll.maps[name].map_type == MapType.CPUMAP else "devmap"
    return kind, name


def _cpus(opts: XdpOptions) -> list[int]:
    n = S.possible_cpus()
    cpus = opts.cpus if opts.cpus else [c for c in range(n) if c != GEN_CPU] or [0]
    bad = [c for c in cpus if not 0 <= c < n]
    if bad:
        raise UsageError(
            error("bad-args", f"--cpu {bad[0]}: not a possible CPU", hint=f"give 0..{n - 1}")
        )
    return cpus


def _fill_devmap(b: _Bench, t: LoadedTarget, name: str) -> None:
    m = t.coll.maps[name]
    if m.map_type == MapType.DEVMAP_HASH:
        keys = [
            b.net.ifindex(b.net.dut_ns, N.DUT_DEV),
            *range(min(m.max_entries, DEVMAP_HASH_KEYS) - 1),
        ]
    else:
        keys = list(range(min(m.max_entries, 64)))
    entry = (
        t.entry
        if t.entry and t.coll.programs[t.entry].spec.attach_type == AttachType.XDP_DEVMAP
        else None
    )
    with netlink.in_netns(b.net.dut_ns):  # the kernel resolves the ifindex in the caller's
        for k in keys:  # namespace (kernel/bpf/devmap.c __dev_map_alloc_node)
            devmap.devmap_set(
                m.fd, k, N.EGRESS_DEV, t.fd(entry), map_name=name, prog_name=entry or ""
            )


def _fill_cpumap(t: LoadedTarget, name: str, cpus: list[int], qsize: int) -> None:
    m = t.coll.maps[name]
    entry = (
        t.entry
        if t.entry and t.coll.programs[t.entry].spec.attach_type == AttachType.XDP_CPUMAP
        else None
    )
    for cpu in range(min(m.max_entries, S.possible_cpus())):
        if cpu in cpus:
            cpumap.cpumap_set(m.fd, cpu, qsize, t.fd(entry), map_name=name, prog_name=entry or "")
        else:
            cpumap.cpumap_delete(m.fd, cpu, map_name=name)


def run_redirect(
    objs: list[ObjectUnderTest], opts: XdpOptions, progress: Progress | None = None
) -> Report:
    """``bpfdsl bench redirect``: devmap or cpumap redirect rates (and, for a cpumap, TCP
    through the steered path).  ``objs[0]`` the program, ``objs[1]`` the baseline."""
    progress = progress or Progress()
    rep = _report("redirect", "", objs, opts)
    with ExitStack() as stack:
        kinds = {}
        b = _Bench(stack, objs, opts, egress=True)
        for label, t in b.targets.items():
            kinds[label] = _redirect_kind(t)
        found = {k for k, _n in kinds.values()}
        if len(found) != 1:
            raise UsageError(
                error(
                    "bench-map",
                    "the program and the baseline redirect through different map kinds "
                    f"({', '.join(f'{lbl}: {k}' for lbl, (k, _n) in kinds.items())})",
                    hint="compare programs that redirect through the same kind of map",
                )
            )
        (kind,) = found
        cpus = _cpus(opts) if kind == "cpumap" else []
        counters: dict[str, CpumapCounter] = {}
        if kind == "devmap":
            sink = stack.enter_context(N.drop_program())
            N.attach_xdp(b.net.dut_ns, N.SINK_DEV, int(sink), "native")
        else:
            for label, t in b.targets.items():
                counters[label] = stack.enter_context(
                    CpumapCounter(t.coll.maps[kinds[label][1]].fd)
                )
        tcp = None
        if kind == "cpumap" and opts.tcp:
            tcp = stack.enter_context(TcpHelper())
        rep.title = (
            f"bpfdsl bench redirect ({kind}): {len(b.frame)}-byte frames (+4 FCS) from a "
            f"live-frame generator on CPU {GEN_CPU}, {opts.runs} run(s) of "
            f"{opts.duration:g} s per program, ABBA order"
            + (f"; cpumap CPUs {','.join(map(str, cpus))}, qsize {opts.qsize}" if cpus else "")
        )
        rep.setup = _setup(b, opts) | {"map_kind": kind, "cpus": cpus, "qsize": opts.qsize}
        if kind == "devmap":
            metrics = [
                RATE,
                Metric("redirect_pps", "redirected", "Mpps", 1e6),
                Metric("xmit_pps", "sent by egr1", "Mpps", 1e6),
                Metric("egress_pps", "arrived at snk1", "Mpps", 1e6),
            ]
        else:
            metrics = [
                RATE,
                Metric("redirect_pps", "redirected", "Mpps", 1e6),
                Metric("cpu_pps", "processed on CPU", "Mpps", 1e6),
            ]
        rates = Section(f"{kind} redirect rates", metrics)
        verd = Section(
            "Verdicts per run (frames"
            + ("; on-CPU: the cpumap entry program's verdicts)" if kind == "cpumap" else ")"),
            list(VERDICT_METRICS)
            + (
                [
                    Metric("cpu_processed", "on-CPU frames", "count", 1, 0),
                    Metric("cpu_pass", "on-CPU PASS", "count", 1, 0),
                    Metric("cpu_drop", "on-CPU DROP", "count", 1, 0),
                    Metric("cpu_redirect", "on-CPU REDIRECT", "count", 1, 0),
                    Metric("cpu_queue_drops", "queue drops", "count", 1, 0),
                ]
                if kind == "cpumap"
                else [Metric("xmit_errors", "xmit errors", "count", 1, 0)]
            ),
        )
        tcp_sec = Section(
            "TCP through the cpumap (gen0 -> dut0, steered to the cpumap CPUs): stream and "
            "1-byte request/response",
            [
                Metric("stream_mbps", "stream", "Mbit/s", 1e6, 1),
                Metric("rr_tps", "RR", "trans/s", 1, 0),
                Metric("rr_p50_us", "P50", "µs", 1, 1),
                Metric("rr_p90_us", "P90", "µs", 1, 1),
                Metric("rr_p99_us", "P99", "µs", 1, 1),
            ],
        )
        steps = opts.runs * len(objs) * (2 if tcp else 1)
        progress.start(steps, f"redirect ({kind})")
        for i, label in abba(rep.labels, opts.runs):
            t = b.targets[label]
            mname = kinds[label][1]
            b.attach(t)
            if kind == "devmap":
                _fill_devmap(b, t, mname)
            else:
                _fill_cpumap(t, mname, cpus, opts.qsize)
            fill_user_maps(t)
            progress.step(f"run {i + 1}/{opts.runs} {label}: frames")
            b.send(opts.warmup)
            time.sleep(DRAIN)
            cnt = counters.get(label)
            c0 = b.counts(b.net.dut_ns, N.DUT_DEV)
            g0 = b.counts(b.net.gen_ns, N.GEN_DEV)
            e0 = b.counts(b.net.dut_ns, N.EGRESS_DEV) if kind == "devmap" else None
            s0 = b.counts(b.net.dut_ns, N.SINK_DEV) if kind == "devmap" else None
            k0 = cnt.read() if cnt else CpumapCounts()
            sent, secs = b.send(opts.duration)
            time.sleep(DRAIN)
            c = b.counts(b.net.dut_ns, N.DUT_DEV) - c0
            g = b.counts(b.net.gen_ns, N.GEN_DEV) - g0
            row = _verdicts(c)
            row.update(lost=g.xmit_errors, sent=sent, seconds=secs)
            rate = {"rx_pps": c.packets / secs, "redirect_pps": c.redirect / secs}
            if kind == "devmap":
                assert e0 is not None and s0 is not None  # counted above for a devmap
                e = b.counts(b.net.dut_ns, N.EGRESS_DEV) - e0
                s = b.counts(b.net.dut_ns, N.SINK_DEV) - s0
                rate.update(xmit_pps=e.xmit / secs, egress_pps=s.packets / secs)
                row["xmit_errors"] = e.xmit_errors
                arrived = s.packets
            else:
                assert cnt is not None  # a cpumap has a counter for every label
                k = cnt.read() - k0
                rate["cpu_pps"] = k.processed / secs
                row.update(
                    cpu_processed=k.processed,
                    cpu_pass=k.passed,
                    cpu_drop=k.dropped,
                    cpu_redirect=k.redirect,
                    cpu_queue_drops=max(0, c.redirect - k.processed - k.drops),
                )
                arrived = k.processed
            if c.redirect == 0 or arrived == 0:
                where = "cpumap CPUs " + ",".join(map(str, cpus)) if kind == "cpumap" else "egr1"
                raise _no_frames(
                    label,
                    f"no frame was redirected to the {where} ({c.redirect} XDP_REDIRECT, "
                    f"{row['XDP_PASS']} XDP_PASS, {c.drop} XDP_DROP of {c.packets})",
                    "the program picked a slot the benchmark did not fill: give the CPUs "
                    "with --cpu, or fill the program's own tables with --map NAME KEY VALUE",
                )
            rates.runs.setdefault(label, []).append(rate)
            verd.runs.setdefault(label, []).append(row)
            if tcp is not None:
                assert cnt is not None  # TCP runs only through a cpumap (counted per label)
                progress.step(f"run {i + 1}/{opts.runs} {label}: TCP")
                tcp_sec.runs.setdefault(label, []).append(_tcp_run(b, tcp, cnt, opts, label))
        progress.finish()
    sections = [rates, verd] + ([tcp_sec] if tcp is not None else [])
    _order(rep, *sections)
    _drop_unused(verd)
    rep.sections = sections
    return rep


def _tcp_run(b: _Bench, tcp: TcpHelper, cnt: CpumapCounter, opts: XdpOptions, label: str) -> dict:
    """A TCP stream and a 1-byte request/response gen -> dut, each ``duration`` seconds."""
    where = {
        "server_netns": b.net.netns_path(b.net.dut_ns),
        "client_netns": b.net.netns_path(b.net.gen_ns),
        "addr": N.DUT_IP,
    }
    k0 = cnt.read()
    with b.unpinned():
        st = tcp.run("stream", 65536, opts.duration, **where)
        rr = tcp.run("rr", 1, opts.duration, **where)
    through = (cnt.read() - k0).processed
    if through == 0:
        raise _no_frames(
            label,
            "the TCP segments did not go through the cpumap (its CPUs processed none)",
            "the program must redirect TCP to the cpumap, or run with --no-tcp",
        )
    return {
        "stream_mbps": st["bytes"] * 8 / st["secs"],
        "rr_tps": rr["transactions"] / rr["secs"],
        "rr_p50_us": rr["p50_us"],
        "rr_p90_us": rr["p90_us"],
        "rr_p99_us": rr["p99_us"],
        "cpumap_frames": through,
    }
