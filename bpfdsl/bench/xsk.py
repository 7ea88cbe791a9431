"""The ``xsk`` benchmark: AF_XDP receive-drop and l2fwd rates in copy mode, with the
program under test steering frames to its xskmap (as the kernel's xdpsock sample).

The program runs on ``dut0``; one AF_XDP socket (:class:`bpfdsl.runtime.xsk.XskSocket`,
copy mode, 4096 chunks of 2048 bytes) is bound to dut0's queue 0 and put into slot 0 of the
object's xskmap (key = rx queue index, the usual scheme).  A thread on CPU 1 (when there is
one; the generator has CPU 0) runs the socket loop:

- ``rxdrop``: receive, give the chunk straight back to the fill ring;
- ``l2fwd``: receive, swap the MAC addresses, send back out of dut0 (to gen0, whose drop
  program counts the arrivals), reap completions onto the fill ring.

Counted: frames the program ran on and redirected (veth), frames the socket received
(the loop), frames that came back to gen0 (l2fwd), and the socket's own drop counters
(``struct xdp_statistics``: ring full, fill ring empty).  The loop is Python, batch-wise
without copying frames; what it can take is part of what is measured, the same for
every program compared.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TypeVar

from bpfdsl.bench import net as N
from bpfdsl.bench.report import Metric, Progress, Report, Section, abba
from bpfdsl.bench.target import REDIRECT_MAPS, ObjectUnderTest, fill_user_maps, one_map
from bpfdsl.bench.xdp import (
    DRAIN,
    GEN_CPU,
    RATE,
    XdpOptions,
    _Bench,
    _no_frames,
    _order,
    _report,
)
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.xsk import XskSocket, xsk_map_set

XSK_MODES = ("rxdrop", "l2fwd")
FRAMES = 4096
LOOP_LIMIT = 3600.0  # seconds: the socket thread stops by itself after this at the latest


SETTLE_LIMIT = 2.0  # seconds: the longest wait for the socket loop to empty its ring


def _settle(count: Callable[..., int], step: float = 0.02, quiet: int = 3) -> None:
    """Wait :data:`DRAIN`, then until ``count()`` (frames the loop took) stays the same for
    ``quiet`` checks ``step`` seconds apart, at most :data:`SETTLE_LIMIT`: the frames
    already redirected are then out of the RX ring, so the counts taken next on the XDP
    side and on the socket side cover the same frames (a loop slowed by other load would
    otherwise count a backlog from before the window as received within it)."""
    time.sleep(DRAIN)
    end = time.monotonic() + SETTLE_LIMIT
    last, same = count(), 0
    while same < quiet and time.monotonic() < end:
        time.sleep(step)
        now = count()
        same = same + 1 if now == last else 0
        last = now


class _Loop(threading.Thread):
    """The socket loop (``rxdrop`` or ``l2fwd``) on its own CPU until :meth:`stop`."""

    def __init__(self, sock: XskSocket, mode: str, cpu: int | None, batch: int = 4096) -> None:
        super().__init__(name=f"xsk-{mode}", daemon=True)
        self.sock, self.mode, self.cpu, self.batch = sock, mode, cpu, batch
        self.frames = 0
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        try:
            if self.cpu is not None:
                os.sched_setaffinity(0, {self.cpu})  # this thread
            step = self.sock.rx_drop if self.mode == "rxdrop" else self.sock.l2fwd
            end = time.monotonic() + LOOP_LIMIT
            while not self._halt.is_set() and time.monotonic() < end:
                n = step(self.batch)
                self.frames += n
                if n == 0:
                    self.sock.wait(0.001)
        except BaseException as e:
            self.error = e

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def run_xsk(
    objs: list[ObjectUnderTest],
    opts: XdpOptions,
    modes: Sequence[str] = XSK_MODES,
    progress: Progress | None = None,
) -> Report:
    """``bpfdsl bench xsk``: ``objs[0]`` the program, ``objs[1]`` the baseline; ``modes``
    a subset of :data:`XSK_MODES`.  Returns the report (one rate section per mode)."""
    progress = progress or Progress()
    rep = _report("xsk", "", objs, opts)
    cpus = sorted(os.sched_getaffinity(0))
    loop_cpu = next((c for c in cpus if c != GEN_CPU), None)
    sections = []
    with ExitStack() as stack:
        b = _Bench(stack, objs, opts, egress=False)
        sink = stack.enter_context(N.drop_program())
        N.attach_xdp(b.net.gen_ns, N.GEN_DEV, int(sink), "native")  # counts l2fwd frames
        with netlink.in_netns(b.net.dut_ns):
            sock = XskSocket(netlink.ifindex(N.DUT_DEV), 0, frames=FRAMES, tx=True)
        stack.callback(sock.close)
        for t in b.targets.values():
            name = one_map(
                t,
                REDIRECT_MAPS["xskmap"],
                "xskmap",
                "the xsk benchmark puts its AF_XDP socket into the object's xskmap "
                "(declare one: `map xsks: xskmap(max_entries: 64)`)",
            )
            xsk_map_set(t.coll.maps[name].fd, 0, sock.fileno(), map_name=name)
        rep.title = (
            f"bpfdsl bench xsk: AF_XDP copy mode on dut0 queue 0, socket loop on CPU "
            f"{loop_cpu if loop_cpu is not None else 'any'}; {len(b.frame)}-byte frames "
            f"(+4 FCS) from a live-frame generator on CPU {GEN_CPU}; {opts.runs} run(s) of "
            f"{opts.duration:g} s per program and mode, ABBA order"
        )
        rep.setup = {
            "namespaces": list(b.net.namespaces),
            "socket": {"dev": N.DUT_DEV, "queue": 0, "frames": FRAMES, "mode": "copy"},
            "loop_cpu": loop_cpu,
            "generator_cpu": GEN_CPU,
        }
        progress.start(opts.runs * len(objs) * len(modes), "xsk")
        for mode in modes:
            metrics = [
                RATE,
                Metric("redirect_pps", "redirected", "Mpps", 1e6),
                Metric("xsk_pps", "socket rx", "Mpps", 1e6),
            ]
            if mode == "l2fwd":
                metrics.append(Metric("fwd_pps", "back at gen0", "Mpps", 1e6))
            rates = Section(f"AF_XDP {mode} rates", metrics)
            drops = Section(
                f"AF_XDP {mode}: frames per run",
                [
                    Metric("frames", "frames", "count", 1, 0),
                    Metric("XDP_REDIRECT", "XDP_REDIRECT", "count", 1, 0),
                    Metric("socket", "socket rx", "count", 1, 0),
                    Metric("ring_full", "rx ring full", "count", 1, 0),
                    Metric("fill_empty", "fill ring empty", "count", 1, 0),
                ],
            )
            loop = _Loop(sock, mode, loop_cpu)
            loop.start()
            try:
                for i, label in abba(rep.labels, opts.runs):
                    progress.step(f"{mode} run {i + 1}/{opts.runs} {label}")
                    t = b.targets[label]
                    b.attach(t)
                    fill_user_maps(t)
                    b.send(opts.warmup)
                    _settle(lambda lp=loop: lp.frames)
                    c0, g0 = b.counts(b.net.dut_ns, N.DUT_DEV), b.counts(b.net.gen_ns, N.GEN_DEV)
                    s0, f0 = sock.statistics(), loop.frames
                    _sent, secs = b.send(opts.duration)
                    _settle(lambda lp=loop: lp.frames)
                    c = b.counts(b.net.dut_ns, N.DUT_DEV) - c0
                    g = b.counts(b.net.gen_ns, N.GEN_DEV) - g0
                    s1, got = sock.statistics(), loop.frames - f0
                    if loop.error is not None:
                        raise loop.error
                    if got == 0:
                        raise _no_frames(
                            label,
                            f"the AF_XDP socket received no frame ({c.redirect} XDP_REDIRECT "
                            f"of {c.packets})",
                            "the program must redirect to the xskmap slot of the rx queue "
                            "(`redirect_map(xsks, ctx.rx_queue_index, XDP_PASS)`); slot 0 "
                            "holds the socket",
                        )
                    row = {
                        "rx_pps": c.packets / secs,
                        "redirect_pps": c.redirect / secs,
                        "xsk_pps": got / secs,
                    }
                    if mode == "l2fwd":
                        row["fwd_pps"] = g.packets / secs
                    rates.runs.setdefault(label, []).append(row)
                    drops.runs.setdefault(label, []).append(
                        {
                            "frames": c.packets,
                            "XDP_REDIRECT": c.redirect,
                            "socket": got,
                            "ring_full": s1["rx_ring_full"] - s0["rx_ring_full"],
                            "fill_empty": s1["rx_fill_ring_empty_descs"]
                            - s0["rx_fill_ring_empty_descs"],
                            "seconds": secs,
                        }
                    )
            finally:
                loop.stop()
            sections += [rates, drops]
        progress.finish()
    _order(rep, *sections)
    rep.sections = sections
    return rep


_T = TypeVar("_T")

BUSY_WAIT = 3.0  # seconds: a closed AF_XDP socket leaves its queue a moment later


def _retry_busy(make: Callable[..., _T]) -> _T:
    """``make()``, again while the queue is still bound by the socket closed just before
    (EBUSY: the kernel releases an AF_XDP socket's queue after the close returns)."""
    end = time.monotonic() + BUSY_WAIT
    while True:
        try:
            return make()
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > end:
                raise
            time.sleep(0.05)


class _ChildLoop:
    """A socket loop as a child process in the DUT namespace on ``cpu``: ``argv`` then
    ``MODE dut0 0 MAP_ID FRAMES BATCH`` (benchmarks/c/xsk_loop.c and benchmarks/xsk_loop.py take
    the same); it puts its own socket into slot 0 of the xskmap ``map_id``, prints
    ``ready``, and answers each stdin line with "rx tx ring_full fill_empty"."""

    def __init__(
        self, argv: list[str], ns: str, mode: str, map_id: int, cpu: int | None, batch: int
    ) -> None:
        argv = [*argv, mode, N.DUT_DEV, "0", str(map_id), str(FRAMES), str(batch)]
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", ns, *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdin is not None
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            err = self.proc.communicate(timeout=5)[1]
            busy = "Device or resource busy" in err
            raise OSError(errno.EBUSY if busy else errno.EIO, f"{argv[-7]}: {err.strip()}")

    def totals(self) -> tuple[int, int, int, int]:
        """(frames received, frames sent, rx ring full, fill ring empty) so far."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        rx, tx, full, empty = (int(x) for x in self.proc.stdout.readline().split())
        return rx, tx, full, empty

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_xsk_loops(
    obj: ObjectUnderTest,
    opts: XdpOptions,
    loops: dict[str, list[str]],
    modes: Sequence[str] = XSK_MODES,
    batch: int = 64,
) -> dict[str, dict[str, list[dict[str, float]]]]:
    """Socket loops side by side, each a process of its own (:class:`_ChildLoop`):
    ``loops`` maps a label to the command that starts one (benchmarks/c/xsk_loop.c, libxdp;
    benchmarks/xsk_loop.py, :class:`XskSocket`), each in ``modes``, the same program ``obj``
    redirecting to them, the same generator, ``batch`` descriptors per ring access, ABBA
    order over ``opts.runs``.  Returns {mode: {label: [run...]}} with per run ``rx_pps``
    (frames the program ran on per second), ``xsk_pps`` (frames the loop received per
    second), ``fwd_pps`` (l2fwd: frames back at gen0 per second), ``ring_full`` /
    ``fill_empty`` (the socket's drop counters over the run)."""
    cpus = sorted(os.sched_getaffinity(0))
    loop_cpu = next((c for c in cpus if c != GEN_CPU), None)
    out: dict[str, dict[str, list[dict[str, float]]]] = {}
    with ExitStack() as stack:
        b = _Bench(stack, [obj], opts, egress=False)
        sink = stack.enter_context(N.drop_program())
        N.attach_xdp(b.net.gen_ns, N.GEN_DEV, int(sink), "native")
        (t,) = b.targets.values()
        name = one_map(t, REDIRECT_MAPS["xskmap"], "xskmap", "the program needs an xskmap")
        map_id = S.map_info(t.coll.maps[name].fd).id
        b.attach(t)
        for mode in modes:
            runs: dict[str, list[dict[str, float]]] = {label: [] for label in loops}
            for _i, label in abba(list(loops), opts.runs):
                loop = _retry_busy(
                    lambda m=mode, a=loops[label]: _ChildLoop(
                        a, b.net.dut_ns, m, map_id, loop_cpu, batch
                    )
                )
                try:
                    b.send(opts.warmup)
                    _settle(lambda lp=loop: lp.totals()[0])
                    c0, g0 = b.counts(b.net.dut_ns, N.DUT_DEV), b.counts(b.net.gen_ns, N.GEN_DEV)
                    l0 = loop.totals()
                    _sent, secs = b.send(opts.duration)
                    _settle(lambda lp=loop: lp.totals()[0])
                    l1 = loop.totals()
                    c = b.counts(b.net.dut_ns, N.DUT_DEV) - c0
                    g = b.counts(b.net.gen_ns, N.GEN_DEV) - g0
                finally:
                    loop.close()
                row = {
                    "rx_pps": c.packets / secs,
                    "xsk_pps": (l1[0] - l0[0]) / secs,
                    "ring_full": l1[2] - l0[2],
                    "fill_empty": l1[3] - l0[3],
                }
                if mode == "l2fwd":
                    row["fwd_pps"] = g.packets / secs
                runs[label].append(row)
            out[mode] = runs
    return out
