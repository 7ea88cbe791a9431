"""Kernel side: run a program on packets (BPF_PROG_TEST_RUN, or the interpreter).

Takes an object (a CollectionSpec), a program name and frames; returns one
:class:`PacketResult` per frame (verdict, output bytes, what changed, ns per run).
An *engine* is anything with ``run(program, packet, repeat) -> RunResult`` plus
``close()`` (and, optionally, ``events()``: the records sent to user space since the last
call, shown per packet; ``set_map``: entries put in before the runs); the engines are
named in :data:`ENGINES`: ``kernel`` (:class:`KernelEngine`) and ``interp``
(:class:`InterpEngine`, the userspace interpreter; it also runs the program kinds
BPF_PROG_TEST_RUN refuses: xdp(cpumap), xdp(devmap), sk_msg, sock_ops).
"""

from __future__ import annotations

import errno
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from bpfdsl.abi.ctx import XDP_MD
from bpfdsl.abi.flags import BPF_F_XDP_HAS_FRAGS
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.limits import (
    XDP_FRAME_SIZE,
    XDP_MAX_LINEAR,
    XDP_PACKET_HEADROOM,
    XDP_SHINFO_TAILROOM,
    XDP_TEST_RUN_MAX,
)
from bpfdsl.abi.map_types import is_percpu
from bpfdsl.abi.net import ETH_HLEN
from bpfdsl.abi.prog_types import ProgramKind, SockOpsOp
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.interp import InterpCollection
from bpfdsl.interp.ctx import SockInfo
from bpfdsl.interp.maps import SlotMap
from bpfdsl.kernel import syscall
from bpfdsl.obj.spec import CollectionSpec
from bpfdsl.runtime import events, loader, runinfo
from bpfdsl.runtime.packets import describe_change, summary
from bpfdsl.runtime.pcapfile import RecordSpans
from bpfdsl.runtime.runinfo import MAP_DIFF_LIMIT, sock_ops_fields


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run: ``retval`` (program return value), ``data_out`` (packet bytes after the
    program, wire order), ``duration_ns`` (mean ns per run over ``repeat`` runs; 0 when the
    engine does not measure), ``outcome`` (what the engine saw the program do, raw, for
    :func:`bpfdsl.runtime.runinfo.describe_outcome`: ``redirect``, ``redirect_miss``,
    ``apply_bytes``, ``cork_bytes``, ``reply``, ``cb_flags``; empty when it cannot see)."""

    retval: int
    data_out: bytes
    duration_ns: int
    outcome: dict = field(default_factory=dict)


class Engine(Protocol):
    """What ``bpfdsl run`` needs from an engine (kernel test run, interpreter);
    ``warnings``: lines for the user about how the engine runs this object."""

    warnings: list[str]

    def run(
        self, program: str, packet: bytes, repeat: int = 1, ctx: dict | None = None
    ) -> RunResult: ...

    def close(self) -> None: ...


class PacketSkipped(Exception):
    """The engine cannot run this packet (too short/long); ``str()`` says why."""


class KernelEngine:
    """BPF_PROG_TEST_RUN of programs loaded by :func:`bpfdsl.runtime.loader.load_collection`.

    A test run leaves nothing behind: maps pinned by name (LIBBPF_PIN_BY_NAME) are private
    copies here, neither pinned nor taken from an existing pin (``warnings`` says so).
    Raises LoadError/VerifierError (from the loader) when the object does not load.
    """

    name = "kernel"

    def __init__(
        self, spec: CollectionSpec, *, config: dict | None = None, ifindex: int = 0
    ) -> None:
        # ifindex: the device the object's device-bound programs are loaded for (they
        # cannot be test-run, but the others of the object can)
        self._coll = loader.load_collection(
            spec, config=config or {}, pinning=False, ifindex=ifindex
        )
        self.warnings: list[str] = list(self._coll.warnings)
        self.spec = spec
        self.config = dict(config or {})
        self.ncpus = syscall.possible_cpus()
        try:  # the records its event maps get: ring buffer mmaps, a perf ring per CPU
            self._events = events.EventReaders.of_kernel(self._coll.maps, spec.btf)
        except BaseException:
            self._coll.close()
            raise

    def events(self) -> list[events.Event]:
        """The records the runs since the last call sent through event maps."""
        return self._events.read_all()

    def run(
        self, program: str, packet: bytes, repeat: int = 1, ctx: dict | None = None
    ) -> RunResult:
        """BPF_PROG_TEST_RUN; ``ctx`` (from :func:`bpfdsl.runtime.runinfo.parse_ctx`) fills the
        ``struct xdp_md`` given as ctx_in: ``ingress_ifindex`` (an interface of this
        network namespace) and ``rx_queue_index`` (one of its rx queues)."""
        fd = self._coll.programs[program].fd
        hints = sorted(k for k in ctx or {} if k in runinfo.RX_HINT_FIELDS)
        if hints:
            raise UsageError(
                error(
                    "bad-ctx",
                    f"--ctx {hints[0]}: an RX hint of the metadata kfuncs, which only the "
                    "interpreter takes (a kernel test run has no driver to give it)",
                    hint="run it with --engine interp, or on real traffic",
                )
            )
        if len(packet) < ETH_HLEN:
            raise PacketSkipped(
                f"{len(packet)} bytes: the kernel runs XDP only on frames of "
                f"at least {ETH_HLEN} bytes"
            )
        md = xdp_md_ctx(len(packet), ctx) if ctx else None
        try:
            r = syscall.prog_test_run(fd, packet, repeat=max(1, repeat), ctx=md)
        except syscall.BpfError as e:
            raise _test_run_error(e, len(packet), md is not None, ctx) from None
        return RunResult(r.retval, r.data_out, r.duration_ns)

    def runner(self, program: str, repeat: int = 1) -> Callable[[bytes], tuple[int, bytes, int]]:
        """A function running ``program`` on one frame (no ``ctx``) as :meth:`run` does,
        giving ``(retval, data_out, duration_ns)`` (no RunResult object per frame),
        with the system call's attr and buffers made once and reused for every frame
        (:class:`bpfdsl.kernel.syscall.TestRunner`): the loop over a capture pays the
        bpf(2) call and little else.  Raises as :meth:`run`."""
        tr = syscall.TestRunner(self._coll.programs[program].fd, repeat=max(1, repeat))
        run, out = tr.run, tr.data_out

        def one(packet: bytes) -> tuple[int, bytes, int]:
            n = len(packet)
            if n < ETH_HLEN:
                raise PacketSkipped(
                    f"{n} bytes: the kernel runs XDP only on frames of at least {ETH_HLEN} bytes"
                )
            try:
                retval, size, ns = run(packet)
            except syscall.BpfError as e:
                raise _test_run_error(e, n, False, None) from None
            return retval, out(size), ns

        return one

    def span_runner(self, program: str, repeat: int = 1) -> Callable[[RecordSpans], BatchCounts]:
        """A function running ``program`` (no ``ctx``) on every frame of a batch
        (:class:`~bpfdsl.runtime.pcapfile.RecordSpans`, frames where they lie in the mapped
        capture) with :meth:`bpfdsl.kernel.syscall.TestRunner.run_spans` -- the C loop of
        test runs when it is built -- giving the batch's :class:`BatchCounts` (retvals
        counted, no result per frame).  The records the runs send through event maps are
        dropped after each run, as :meth:`skip_events` does between frames (the program sees
        the same room in its rings).  A frame the kernel refuses is run again by
        :meth:`runner` to say why (skipped, or raised as there)."""
        tr = syscall.TestRunner(self._coll.programs[program].fd, repeat=max(1, repeat))
        skips = self._events.skip_positions() or ()
        one = self.runner(program, repeat)
        skip_events = self._events.skip_all

        def batch(sp: RecordSpans) -> BatchCounts:
            counts: dict[int, int] = {}
            res = BatchCounts(len(sp), counts)
            i, n = 0, len(sp)
            while i < n:
                nxt, _err, got = tr.run_spans(sp.data, sp.offsets, sp.lengths, i, n,
                                              min_len=ETH_HLEN, skips=skips)  # fmt: skip
                for r, c in got.items():
                    counts[r] = counts.get(r, 0) + c
                if nxt >= n:
                    break
                try:  # the frame the kernel refused: what that means, the runner's way
                    retval, _out, _ns = one(bytes(sp.frame(nxt)))
                except PacketSkipped as e:
                    res.skip(str(e))
                else:
                    counts[retval] = counts.get(retval, 0) + 1
                skip_events()
                i = nxt + 1
            short = counts.pop(-1, 0)
            if short:
                k = next(k for k, size in enumerate(sp.lengths) if size < ETH_HLEN)
                res.skip(
                    f"{sp.lengths[k]} bytes: the kernel runs XDP only on frames of at least "
                    f"{ETH_HLEN} bytes",
                    short,
                )
            return res

        return batch

    def has_events(self) -> bool:
        """True when the object has event maps (ringbuf, perf_event_array) to read."""
        return bool(self._events.names())

    def skip_events(self) -> None:
        """Drop the records the runs since the last call sent, undecoded."""
        self._events.skip_all()

    def snapshot_maps(self, limit: int = MAP_DIFF_LIMIT) -> dict[str, dict[bytes, bytes] | None]:
        """Contents of the object's maps as BPF_MAP_LOOKUP_ELEM returns them (key ->
        value bytes; per-CPU values concatenated); None for a map with more than
        ``limit`` entries or values user space cannot read (sockmap, prog array...)."""
        out: dict[str, dict[bytes, bytes] | None] = {}
        for name, lm in self._coll.maps.items():
            if lm.spec is None:
                continue
            vsize = lm.value_size
            if is_percpu(lm.map_type):  # each CPU's value 8-aligned, possible CPUs
                vsize = ((lm.value_size + 7) & ~7) * self.ncpus
            entries: dict[bytes, bytes] = {}
            key = None
            try:
                for _ in range(limit + 1):
                    key = syscall.map_get_next_key(lm.fd, key, lm.key_size)
                    if key is None:
                        break
                    v = syscall.map_lookup(lm.fd, key, vsize)
                    if v is not None:
                        entries[key] = v
                else:
                    out[name] = None
                    continue
            except syscall.BpfError:
                out[name] = None
                continue
            out[name] = entries
        return out

    def set_map(self, name: str, key: bytes, value: bytes) -> None:
        """BPF_MAP_UPDATE_ELEM on map ``name`` (``value``: per-CPU maps all CPUs' bytes)."""
        syscall.map_update(self._coll.maps[name].fd, key, value)

    def close(self) -> None:
        self._events.close()
        self._coll.close()


class InterpEngine:
    """Userspace engine over one object's :class:`~bpfdsl.obj.collection.CollectionSpec`.

    ``collection`` gives access to the in-memory maps (fill them before running).
    Frames shorter than 14 bytes or longer than 73152 are skipped, as on the kernel; frames
    over 3520 bytes keep the rest in XDP frags, as a test run does.
    """

    name = "interp"

    def __init__(self, spec: Any, *, config: dict | None = None, **kw: Any) -> None:
        self.collection = InterpCollection(spec, config=config or {}, **kw)
        self.warnings: list[str] = []  # nothing to report: no kernel state is touched
        self.spec = spec
        self.ncpus = self.collection.env.ncpus
        self._events = events.EventReaders.of_interp(self.collection.maps, spec.btf)

    def has_events(self) -> bool:
        """True when the object has event maps (ringbuf, perf_event_array) to read."""
        return bool(self._events.names())

    def skip_events(self) -> None:
        """Drop the records the runs since the last call sent, undecoded."""
        self._events.skip_all()

    def events(self) -> list[events.Event]:
        """The records the runs since the last call sent through event maps."""
        return self._events.read_all()

    def run(
        self, program: str, packet: bytes, repeat: int = 1, ctx: dict | None = None
    ) -> RunResult:
        """Run ``program`` on ``packet`` ``repeat`` times (maps keep their changes);
        the result of the last run, ``duration_ns`` = mean wall time per run.  ``ctx``:
        context fields -- XDP ``ingress_ifindex``/``rx_queue_index``/``egress_ifindex``;
        sk_msg the socket (``family``, ``*_ip4``/``*_ip6``, ``*_port``); sock_ops also
        ``op`` (default BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB), ``args`` and numeric fields."""
        prog = self.collection.programs[program]
        kind = prog.kind
        ctx = ctx or {}
        if len(packet) < ETH_HLEN and kind and kind.ctx == "xdp_md":
            raise PacketSkipped(  # the same frames the kernel engine refuses
                f"{len(packet)} bytes: XDP runs only on frames of at least {ETH_HLEN} bytes"
            )
        if len(packet) > XDP_TEST_RUN_MAX and kind and kind.ctx == "xdp_md":
            raise PacketSkipped(
                f"{len(packet)} bytes: longer than an XDP test run takes ({XDP_TEST_RUN_MAX} "
                "bytes: 3520 linear + 17 page frags)"
            )
        if kind is not None and kind.ctx == "sk_msg_md":
            sock = SockInfo.from_fields(ctx)
            call = lambda: prog.run_sk_msg(packet, sock)  # noqa: E731
        elif kind is not None and kind.ctx == "bpf_sock_ops":
            sock = SockInfo.from_fields(ctx)
            op = ctx.get("op", int(SockOpsOp.ACTIVE_ESTABLISHED_CB))
            args, fields = tuple(ctx.get("args", ())), sock_ops_fields(ctx)
            call = lambda: prog.run_sock_ops(op, sock, args, fields)  # noqa: E731
        else:
            xdp: dict[str, Any] = {
                k: ctx[k]
                for k in ("ingress_ifindex", "rx_queue_index", "egress_ifindex")
                if k in ctx
            }
            xdp["hints"] = {k: v for k, v in ctx.items() if k in runinfo.RX_HINT_FIELDS}
            call = lambda: prog.run(packet, **xdp)  # noqa: E731
        total = 0
        res = None
        for _ in range(max(1, repeat)):
            res = call()
            total += res.duration_ns
        assert res is not None
        outcome = {
            "redirect": res.redirect,
            "redirect_miss": res.redirect_miss,
            "apply_bytes": res.apply_bytes,
            "cork_bytes": res.cork_bytes,
            "reply": res.reply,
            "cb_flags": res.cb_flags,
            "trace": res.trace,
        }
        return RunResult(res.retval, res.data_out, total // max(1, repeat), outcome)

    def snapshot_maps(self, limit: int = MAP_DIFF_LIMIT) -> dict[str, dict[bytes, Any] | None]:
        """Contents of the ``.maps`` maps as BPF_MAP_LOOKUP_ELEM would return them (per-CPU
        values concatenated, 8-byte aligned); redirect/socket maps: their entries (bytes
        or socket objects).  None for a map of more than ``limit`` entries."""
        out: dict[str, dict[bytes, Any] | None] = {}
        for name, m in self.collection.maps.items():
            if isinstance(m, SlotMap):
                out[name] = dict(m.slots) if len(m.slots) <= limit else None
            elif m.max_entries <= limit or m.count() <= limit:
                out[name] = m.kernel_dump()
            else:
                out[name] = None
        return out

    def restore_maps(self, snapshot: dict[str, dict[bytes, Any] | None]) -> None:
        """Make the maps hold exactly ``snapshot`` (as :meth:`snapshot_maps` or the kernel
        engine's ``snapshot_maps`` give it: per-CPU values concatenated, 8-byte aligned);
        maps absent or None in it keep their contents."""
        for name, entries in snapshot.items():
            m = self.collection.maps.get(name)
            if m is None or entries is None:
                continue
            if isinstance(m, SlotMap):
                m.slots = dict(entries)
                continue
            for key in m.keys():
                if key not in entries and m.remove(key) is False:
                    m.set(
                        key,
                        bytes(m.value_size) if not m.percpu else [bytes(m.value_size)] * m.ncpus,
                    )
            for key, value in entries.items():
                self.set_map(name, key, value)

    def set_map(self, name: str, key: bytes, value: Any) -> None:
        """Userspace update of map ``name`` (``value``: bytes, per-CPU maps all CPUs'
        values concatenated as the kernel takes them, or a socket for socket maps)."""
        m = self.collection.maps[name]
        if m.percpu and isinstance(value, (bytes, bytearray)):
            step = (m.value_size + 7) & ~7
            value = [bytes(value[i * step : i * step + m.value_size]) for i in range(m.ncpus)]
        m.set(key, value)

    def close(self) -> None:
        pass


# engine name -> factory(spec, *, config) -> Engine
ENGINES: dict[str, Callable[..., Engine]] = {"kernel": KernelEngine, "interp": InterpEngine}


def xdp_md_ctx(packet_len: int, ctx: dict) -> bytes:
    """``struct xdp_md`` for BPF_PROG_TEST_RUN's ctx_in (include/uapi/linux/bpf.h; the
    kernel's xdp_convert_md_to_buff): data 0 (no metadata), data_end = ``packet_len``
    (bytes), ``ingress_ifindex`` and ``rx_queue_index`` from ``ctx``, egress_ifindex 0."""
    idx, q = ctx.get("ingress_ifindex", 0), ctx.get("rx_queue_index", 0)
    return XDP_MD.image(data_end=packet_len, ingress_ifindex=idx, rx_queue_index=q)


def _test_run_error(e: syscall.BpfError, length: int, has_md: bool, ctx: dict | None) -> Exception:
    """What a failed BPF_PROG_TEST_RUN of a ``length``-byte frame means for the user: a
    refused ``struct xdp_md`` (UsageError), a frame the test run cannot take
    (PacketSkipped), else the error itself."""
    if has_md and e.errno in (errno.ENODEV, errno.EINVAL):
        return _xdp_ctx_error(e.errno, ctx or {})
    # ENOMEM: more than 3520 linear bytes + MAX_SKB_FRAGS (17) pages, 73152 bytes
    # (net/bpf/test_run.c bpf_prog_test_run_xdp); a BIG TCP or jumbogram record
    big = e.errno == errno.ENOMEM and length > 3520
    if e.errno in (errno.E2BIG, errno.EINVAL, errno.ENOSPC) or big:
        why = {
            errno.E2BIG: "too large for a single-buffer XDP test run (use an "
            "xdp(frags) program for jumbo frames)",
            errno.ENOMEM: "longer than an XDP test run takes (73152 bytes: 3520 "
            "linear + 17 page frags)",
        }.get(e.errno, str(e))
        return PacketSkipped(f"{length} bytes: {why}")
    return e


def _xdp_ctx_error(err: int, ctx: dict) -> UsageError:
    """The kernel's refusal of a test run's ``struct xdp_md`` (xdp_convert_md_to_buff)."""
    idx, q = ctx.get("ingress_ifindex", 0), ctx.get("rx_queue_index", 0)
    if err == errno.ENODEV:
        why = f"no interface with ifindex {idx} in this network namespace"
    elif q and not idx:
        why = f"rx_queue_index {q} needs an ingress_ifindex"
    else:
        why = f"interface {idx} has no rx queue {q} (the kernel requires rx_queue_index < its rx queues)"
    return UsageError(
        error(
            "bad-ctx",
            f"the kernel refused the struct xdp_md of the test run: {why}",
            hint="see `ip -d link` for ifindexes and queues, or use --engine interp",
        )
    )


def open_engine(
    name: str, spec: CollectionSpec, *, config: dict | None = None, ifindex: int = 0
) -> Engine:
    """Create engine ``name`` (see :data:`ENGINES`) for ``spec``; ``ifindex``: the device
    the kernel engine loads the object's device-bound programs for.

    Raises UsageError for an unknown or unavailable engine.
    """
    factory = ENGINES.get(name)
    if factory is None:
        raise UsageError(
            error("bad-engine", f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINES)}")
        )
    if ifindex and name == "kernel":
        return factory(spec, config=config or {}, ifindex=ifindex)
    return factory(spec, config=config or {})


def _event_dict(e: events.Event) -> dict:
    """A record of a test run in JSON, as ``bpfdsl events --json`` writes it but without
    ``time`` (records of a test run are shown per packet)."""
    return {k: v for k, v in e.to_dict().items() if k != "time"}


@dataclass(slots=True)
class PacketResult:
    """The outcome for one frame: ``index`` (1-based), ``verdict`` name (``XDP_PASS``...),
    ``data_out``, ``changes`` (human lines: how the bytes changed), ``effects`` (human
    lines: redirect target or empty slot, map entries changed...), ``duration_ns``;
    ``skipped`` says why the frame was not run (then ``retval`` is None); ``outcome``
    (redirect target or miss, sk_msg/sock_ops results) and ``map_changes`` (``{map, key,
    old, new}``, decoded) as JSON-ready dicts; ``events``: the records the run sent to user
    space through ringbuf/perf_event_array maps (:class:`bpfdsl.runtime.events.Event`)."""

    index: int
    length: int
    summary: str
    retval: int | None = None
    verdict: str = ""
    data_out: bytes = b""
    changes: list[str] = field(default_factory=list)
    duration_ns: int = 0
    skipped: str = ""
    outcome: dict = field(default_factory=dict)
    map_changes: list[dict] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    events: list[events.Event] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "length": self.length,
            "summary": self.summary,
            "retval": self.retval,
            "verdict": self.verdict,
            "length_out": len(self.data_out) if self.retval is not None else None,
            # the frame (or message) as the program left it, lowercase hex, from the L2
            # header on (what `--hex` takes): None when the frame was not run
            "data_out": self.data_out.hex() if self.retval is not None else None,
            "changes": self.changes,
            "duration_ns": self.duration_ns,
            "skipped": self.skipped or None,
            **({"effects": self.effects} if self.effects else {}),
            **({"outcome": self.outcome} if self.outcome else {}),
            **({"map_changes": self.map_changes} if self.map_changes else {}),
            **({"events": [_event_dict(e) for e in self.events]} if self.events else {}),
        }


def verdict_name(kind: ProgramKind, retval: int) -> str:
    """``XDP_PASS`` etc. for ``retval`` per the program kind's return table (uapi)."""
    for name, value in kind.returns.items():
        if int(value) == retval:
            return name
    return f"unknown ({retval})"


def run_packets(
    engine: Engine,
    program: str,
    kind: ProgramKind,
    packets: Iterable[tuple[int, bytes]],
    *,
    repeat: int = 1,
    describe: bool = True,
    ctx: dict | None = None,
) -> list[PacketResult]:
    """The list of :func:`iter_packets` (which takes the same arguments)."""
    return list(
        iter_packets(engine, program, kind, packets, repeat=repeat, describe=describe, ctx=ctx)
    )


def iter_packets(
    engine: Engine,
    program: str,
    kind: ProgramKind,
    packets: Iterable[tuple[int, bytes]],
    *,
    repeat: int = 1,
    describe: bool = True,
    ctx: dict | None = None,
    events: bool = True,
) -> Generator[PacketResult, None, None]:
    """Run ``program`` on each ``(index, frame)`` as it comes (``packets`` may be a stream:
    :func:`bpfdsl.runtime.packets.iter_pcap`), yielding one :class:`PacketResult` each as
    soon as it is run; nothing is kept between frames.  For
    sk_msg the "frame" is the message, for sock_ops it is empty.  ``ctx``: context fields
    (:func:`bpfdsl.runtime.runinfo.parse_ctx`).  ``events=False``: the records the runs
    send are dropped undecoded (the rings still emptied after each run, so the program
    sees the same room in them), not put in the results.  With ``describe``, each result also says what the
    program did: bytes changed, redirect target or empty slot, map entries changed (by BTF
    type, as ``bpfdsl map dump`` shows them).

    A frame the engine cannot run is reported as skipped, not raised; kernel failures
    other than that propagate.  When a plain XDP program (not ``xdp(frags)``) ran on frames
    longer than the test run's 3520 linear bytes (:func:`linear_only`: it saw only those),
    one :class:`LinearOnlyWarning` naming them is issued when the iteration ends (or the
    generator is closed).
    """
    lin = _LinearOnly(program)
    if not describe:  # nothing to say but the verdict: the lean loop
        try:
            yield from _iter_quiet(engine, program, kind, packets, repeat, ctx, events, lin)
        finally:
            lin.warn()
        return
    try:
        yield from _iter_described(engine, program, kind, packets, repeat, ctx, lin)
    finally:
        lin.warn()


def _iter_described(
    engine: Engine,
    program: str,
    kind: ProgramKind,
    packets: Iterable[tuple[int, bytes]],
    repeat: int,
    ctx: dict | None,
    lin: _LinearOnly,
) -> Iterator[PacketResult]:
    """:func:`iter_packets` with ``describe``; truncated frames counted in ``lin``."""
    sock = kind.ctx in ("sk_msg_md", "bpf_sock_ops")
    spec = getattr(engine, "spec", None)
    snapshot = getattr(engine, "snapshot_maps", None) if spec is not None else None
    ncpu = getattr(engine, "ncpus", 1)
    replay = _Replay(engine)
    redirects = spec is not None and _redirects(spec, program)
    describe = True
    for index, data in packets:
        line = ""
        if describe:
            line = runinfo.summary(kind, ctx or {}, data) if sock else summary(data)
        res = PacketResult(index, len(data), line)
        before = snapshot() if snapshot is not None else None
        try:
            r = engine.run(program, data, repeat, ctx=ctx)
        except PacketSkipped as e:
            res.skipped = str(e)
            yield res
            continue
        res.retval, res.data_out, res.duration_ns = r.retval, r.data_out, r.duration_ns
        res.verdict = verdict_name(kind, r.retval)
        if linear_only(kind, len(data)):
            lin.add(index)
        if kind.ctx == "sk_msg_md":
            res.changes = _message_change(data, r.data_out) if res.verdict == "SK_PASS" else []
        elif not sock:
            res.changes = describe_change(data, r.data_out)
        outcome = r.outcome
        if describe and not outcome and before is not None and redirects:
            outcome, note = replay.explain(program, data, ctx, before, r.retval)
            res.effects += note
        if describe and spec is not None:
            lines, res.outcome = runinfo.describe_outcome(kind, spec, outcome, r.retval, ncpu)
            res.effects += lines
        if before is not None and snapshot is not None:
            diff = runinfo.diff_maps(before, snapshot())
            lines, res.map_changes = runinfo.map_change_lines(spec, diff, ncpu)
            res.effects += lines
        read_events = getattr(engine, "events", None)
        if read_events is not None:
            res.events = read_events()
        yield res


def _iter_quiet(
    engine: Engine,
    program: str,
    kind: ProgramKind,
    packets: Iterable[tuple[int, bytes]],
    repeat: int,
    ctx: dict | None,
    want_events: bool = True,
    lin: _LinearOnly | None = None,
) -> Iterator[PacketResult]:
    """:func:`iter_packets` without ``describe``: the same results (verdict, output bytes
    and how they changed, records sent), with the per-frame work cut to the run itself --
    the kernel engine's reusable test run (:meth:`KernelEngine.runner`) when no ``ctx`` is
    given, verdict names looked up once, event maps read only when the object has some."""
    sock = kind.ctx in ("sk_msg_md", "bpf_sock_ops")
    make = getattr(engine, "runner", None)
    run: Callable[[bytes], tuple[int, bytes, int]]
    if make is not None and not ctx:
        run = make(program, repeat)
    else:

        def run(data: bytes) -> tuple[int, bytes, int]:
            r = engine.run(program, data, repeat, ctx=ctx)
            return r.retval, r.data_out, r.duration_ns

    has_events = getattr(engine, "has_events", None)
    read_events = getattr(engine, "events", None)
    skip_events = getattr(engine, "skip_events", None)
    if has_events is not None and not has_events():
        read_events = skip_events = None
    elif want_events or skip_events is None:
        skip_events = None
    else:
        read_events = None
    names: dict[int, str] = {}
    for index, data in packets:
        res = PacketResult(index, len(data), "")
        try:
            retval, out, ns = run(data)
        except PacketSkipped as e:
            res.skipped = str(e)
            yield res
            continue
        res.retval, res.data_out, res.duration_ns = retval, out, ns
        verdict = names.get(retval)
        if verdict is None:
            verdict = names[retval] = verdict_name(kind, retval)
        res.verdict = verdict
        if lin is not None and len(data) > XDP_MAX_LINEAR and linear_only(kind, len(data)):
            lin.add(index)
        if kind.ctx == "sk_msg_md":
            res.changes = _message_change(data, out) if verdict == "SK_PASS" else []
        elif not sock and data != out:
            res.changes = describe_change(data, out)
        if read_events is not None:
            res.events = read_events()
        elif skip_events is not None:
            skip_events()
        yield res


@dataclass(slots=True)
class BatchCounts:
    """What the frames of one batch got: ``frames`` in the batch, ``retvals`` {program
    return value: frames run that returned it}, ``skipped`` frames not run and why the
    first of them was not (``first_skip``)."""

    frames: int
    retvals: dict[int, int]
    skipped: int = 0
    first_skip: str = ""

    def skip(self, why: str, n: int = 1) -> None:
        self.skipped += n
        self.first_skip = self.first_skip or why


def count_verdicts(
    engine: Engine,
    program: str,
    kind: ProgramKind,
    batches: Iterable[RecordSpans],
    *,
    repeat: int = 1,
) -> Generator[tuple[BatchCounts, dict[str, int]], None, None]:
    """Run ``program`` on every frame of each batch (:func:`bpfdsl.runtime.packets.
    iter_pcap_spans`) as it comes, yielding per batch its :class:`BatchCounts` and the
    verdict totals of the batch ({``XDP_PASS``...: frames}, skipped frames left out):
    what ``bpfdsl run --pcap -q`` prints, without a result object per frame.  The kernel
    engine runs a batch in one call (:meth:`KernelEngine.span_runner`: the C loop of test
    runs when built); other engines frame by frame (:meth:`Engine.run`).  Records sent
    through event maps are dropped after each run; frames a plain XDP program saw only the
    linear part of give one :class:`LinearOnlyWarning` at the end, as :func:`iter_packets`."""
    lin = _LinearOnly(program)
    make = getattr(engine, "span_runner", None)
    run = make(program, repeat) if make is not None else _frame_by_frame(engine, program, repeat)
    names: dict[int, str] = {}
    try:
        for sp in batches:
            res = run(sp)
            verdicts: dict[str, int] = {}
            for r, c in res.retvals.items():
                name = names.get(r)
                if name is None:
                    name = names[r] = verdict_name(kind, r)
                verdicts[name] = verdicts.get(name, 0) + c
            if len(sp) and max(sp.lengths) > XDP_MAX_LINEAR:
                for k, size in enumerate(sp.lengths):
                    if linear_only(kind, size):
                        lin.add(sp.first + k)
            yield res, verdicts
    finally:
        lin.warn()


def _frame_by_frame(
    engine: Engine, program: str, repeat: int
) -> Callable[[RecordSpans], BatchCounts]:
    """A batch run for engines without :meth:`KernelEngine.span_runner`: one
    :meth:`Engine.run` per frame, event records dropped after each."""
    skip_events = getattr(engine, "skip_events", None)

    def batch(sp: RecordSpans) -> BatchCounts:
        res = BatchCounts(len(sp), {})
        for k in range(len(sp)):
            try:
                r = engine.run(program, bytes(sp.frame(k)), repeat)
            except PacketSkipped as e:
                res.skip(str(e))
                continue
            finally:
                if skip_events is not None:
                    skip_events()
            res.retvals[r.retval] = res.retvals.get(r.retval, 0) + 1
        return res

    return batch


class LinearOnlyWarning(UserWarning):
    """A plain XDP program (not ``xdp(frags)``) was test-run on frames longer than the
    linear part of the test run's buffer: it saw only the first :data:`XDP_MAX_LINEAR`
    bytes (see :func:`linear_only`).  The verdicts stand, but are the program's answer on
    the truncated frame; ``str()`` names the frames."""


def linear_only(kind: ProgramKind, length: int) -> bool:
    """True when a test run of a ``kind`` program on a ``length``-byte frame hides bytes
    from it: bpf_prog_test_run_xdp (net/bpf/test_run.c) puts at most max_data_sz = 4096 -
    XDP_PACKET_HEADROOM - SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) = 3520 bytes in
    the linear buffer and the rest in page frags, whatever the program's flags; a program
    loaded without BPF_F_XDP_HAS_FRAGS cannot reach frags (no bpf_xdp_load_bytes past
    data_end), so ``ctx.len``, ``data_end`` and every length it computes come from the
    first 3520 bytes.  (The kernel refuses to attach such a program to a device whose
    MTU needs frags; the test run does not refuse.)  The interpreter lays frames out the
    same way (bpfdsl.interp.ctx)."""
    return (
        kind.ctx == "xdp_md"
        and not kind.prog_flags & BPF_F_XDP_HAS_FRAGS
        and XDP_MAX_LINEAR < length <= XDP_TEST_RUN_MAX
    )


def linear_only_message(program: str, frames: str) -> str:
    """The words of a :class:`LinearOnlyWarning`: ``frames`` says which ("frame #3",
    "3 frames (#3, #9, #12)", "a 9000-byte frame")."""
    return (
        f"program {program!r} is not xdp(frags), and {frames} longer than the "
        f"{XDP_MAX_LINEAR} linear bytes of an XDP test run ({XDP_FRAME_SIZE} - "
        f"{XDP_PACKET_HEADROOM} headroom - {XDP_SHINFO_TAILROOM} skb_shared_info, "
        "net/bpf/test_run.c): the rest of such a frame goes into page "
        f"frags the program cannot read, so it ran on the first {XDP_MAX_LINEAR} bytes "
        "only (ctx.len and the lengths it computed are theirs); declare it "
        "`xdp(frags) fn` to run it on the whole frame"
    )


class _LinearOnly:
    """The frames of one run a :func:`linear_only` test run truncated (their indexes,
    the first :data:`SHOWN` kept); :meth:`warn` issues the run's one LinearOnlyWarning."""

    SHOWN = 10
    __slots__ = ("program", "count", "first")

    def __init__(self, program: str) -> None:
        self.program, self.count = program, 0
        self.first: list[int] = []

    def add(self, index: int) -> None:
        self.count += 1
        if len(self.first) < self.SHOWN:
            self.first.append(index)

    def warn(self) -> None:
        if not self.count:
            return
        shown = ", ".join(f"#{i}" for i in self.first)
        more = f", +{self.count - len(self.first)} more" if self.count > len(self.first) else ""
        what = (
            f"frame {shown} is" if self.count == 1 else f"{self.count} frames ({shown}{more}) are"
        )
        warnings.warn(LinearOnlyWarning(linear_only_message(self.program, what)), stacklevel=3)


_REDIRECT_HELPERS = ("redirect", "redirect_map")


def _redirects(spec: CollectionSpec, program: str) -> bool:
    """True when ``program`` calls bpf_redirect / bpf_redirect_map."""
    ids = {HELPERS[n].id for n in _REDIRECT_HELPERS}
    return any(i.is_helper_call and i.imm in ids for i in spec.programs[program].insns)


@runtime_checkable
class _Replayable(Protocol):
    """An engine whose runs the interpreter can replay (:class:`KernelEngine`): the object,
    config and CPU count it runs with."""

    spec: CollectionSpec
    config: dict
    ncpus: int


class _Replay:
    """Why a kernel test run returned what it did: BPF_PROG_TEST_RUN reports only the
    verdict, so a redirect's target, or the empty slot whose fallback action came back,
    is found by replaying the run on the interpreter from the same map contents.  The
    replay's account is used only when its verdict equals the kernel's."""

    def __init__(self, engine: Engine) -> None:
        # the interpreter itself (it has ``collection``) is not replayed
        self.engine = (
            engine
            if isinstance(engine, _Replayable) and not hasattr(engine, "collection")
            else None
        )
        self.interp: InterpEngine | None = None
        self.broken = self.engine is None

    def explain(
        self,
        program: str,
        data: bytes,
        ctx: dict | None,
        before: dict[str, dict[bytes, Any] | None],
        retval: int,
    ) -> tuple[dict, list[str]]:
        """(outcome, note lines) for one kernel run that started from map state ``before``."""
        if self.broken or self.engine is None:
            return {}, []
        try:
            if self.interp is None:
                e = self.engine
                self.interp = InterpEngine(e.spec, config=e.config, ncpus=e.ncpus)
            self.interp.restore_maps(before)
            self.interp.events()  # drop the replay's records: a full ring would refuse more
            r = self.interp.run(program, data, 1, ctx=ctx)
        except (DiagnosticError, PacketSkipped, ValueError, OSError) as e:
            self.broken = True
            return {}, [f"(no account of the redirect: the interpreter cannot replay this: {e})"]
        if r.retval != retval:
            return {}, [
                f"(no account of the redirect: the interpreter's replay returned {r.retval}, "
                f"the kernel {retval})"
            ]
        return r.outcome, []


def _message_change(before: bytes, after: bytes) -> list[str]:
    """How an sk_msg program changed the message (msg_push_data / msg_pop_data)."""
    if before == after:
        return []
    d = len(after) - len(before)
    show = repr(after[:40])[1:] + ("..." if len(after) > 40 else "")
    return [f"message {len(before)} -> {len(after)} bytes ({d:+d}): {show}"]


def require_test_run(
    kind: ProgramKind, program: str, engine: str, dev_bound: Sequence[str] = ()
) -> None:
    """Raise DiagnosticError when the kernel's test run refuses programs of ``kind``, or
    this program: ``dev_bound`` names the kfuncs that make it device-bound
    (runtime.kfuncs.needs_dev_bound), and BPF_PROG_TEST_RUN refuses device-bound XDP
    programs with EINVAL (net/bpf/test_run.c: they may only run on their device)."""
    if engine == "kernel" and dev_bound:
        raise DiagnosticError(
            error(
                "no-test-run",
                f"the kernel cannot test-run program {program!r}: it calls "
                f"{', '.join(dev_bound)}, so it is device-bound, and BPF_PROG_TEST_RUN "
                "refuses device-bound programs",
                hint="use --engine interp (the metadata kfuncs return -EOPNOTSUPP there "
                "unless --ctx gives a hint, e.g. --ctx rx_hash=0x1234), or attach it to its "
                "device (`bpfdsl attach PROG --dev IFACE`) and send it traffic",
            )
        )
    if engine == "kernel" and not kind.test_run:
        raise DiagnosticError(
            error(
                "no-test-run",
                f"the kernel cannot test-run program {program!r} "
                f"({kind.keyword or kind.section}): BPF_PROG_TEST_RUN refuses this program kind",
                hint="use --engine interp, or test it with real traffic",
            )
        )
