"""Kernel side: run a program on packets (BPF_PROG_TEST_RUN, or the interpreter).

Takes an object (a CollectionSpec), a program name and frames; returns one
:class:`PacketResult` per frame (verdict, output bytes, what changed, ns per run).
An *engine* is anything with ``run(program, packet, repeat) -> RunResult`` plus
``close()`` (and, optionally, ``events()``: the records sent to user space since the last
call, shown per packet); the engines are named in :data:`ENGINES`: ``kernel`` (:class:`KernelEngine`)
and ``interp`` (:class:`InterpEngine`, the userspace interpreter; it also runs the program
kinds BPF_PROG_TEST_RUN refuses: xdp(cpumap), xdp(devmap), sk_msg).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from bpfdsl.abi.uapi import MapType, ProgramKind, is_percpu
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.interp import InterpCollection
from bpfdsl.kernel import syscall
from bpfdsl.obj.entries import entry_bytes
from bpfdsl.runtime import events, loader
from bpfdsl.runtime.packets import ETH_HLEN, describe_change, summary


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run: ``retval`` (program return value), ``data_out`` (packet bytes after the
    program, wire order), ``duration_ns`` (mean ns per run over ``repeat`` runs; 0 when the
    engine does not measure)."""

    retval: int
    data_out: bytes
    duration_ns: int


class Engine(Protocol):
    """What ``bpfdsl run`` needs from an engine (kernel test run, interpreter)."""

    def run(self, program: str, packet: bytes, repeat: int = 1) -> RunResult: ...

    def close(self) -> None: ...


class PacketSkipped(Exception):
    """The engine cannot run this packet (too short/long); ``str()`` says why."""


class KernelEngine:
    """BPF_PROG_TEST_RUN of programs loaded by :func:`bpfdsl.runtime.loader.load_collection`.

    Raises LoadError/VerifierError (from the loader) when the object does not load.
    """

    name = "kernel"

    def __init__(self, spec, *, config: dict | None = None):
        self._coll = loader.load_collection(spec, config=config or {})
        self._streams: list[events.EventStream] = []
        try:  # the records its event maps get: ring buffer mmaps, a perf ring per CPU
            for name, lm in self._coll.maps.items():
                if lm.spec is not None and lm.map_type in events.EVENT_MAP_TYPES:
                    fd = syscall.Fd(os.dup(int(lm.fd)))  # the stream closes its own fd
                    rec = events.record_type_of(spec.btf, name)
                    self._streams.append(
                        events.EventStream(fd, syscall.map_info(fd), rec, name=name)
                    )
        except BaseException:
            self.close()
            raise

    def events(self) -> list[events.Event]:
        """The records the runs since the last call sent through event maps."""
        return [e for st in self._streams for e in st.read()]

    def run(self, program: str, packet: bytes, repeat: int = 1) -> RunResult:
        fd = self._coll.programs[program].fd
        if len(packet) < ETH_HLEN:
            raise PacketSkipped(
                f"{len(packet)} bytes: the kernel runs XDP only on frames of "
                f"at least {ETH_HLEN} bytes"
            )
        try:
            r = syscall.prog_test_run(fd, packet, repeat=max(1, repeat))
        except syscall.BpfError as e:
            if e.errno in (errno.E2BIG, errno.EINVAL, errno.ENOSPC):
                why = {
                    errno.E2BIG: "too large for a single-buffer XDP test run (use an "
                    "xdp(frags) program for jumbo frames)"
                }.get(e.errno, str(e))
                raise PacketSkipped(f"{len(packet)} bytes: {why}") from None
            raise
        return RunResult(r.retval, r.data_out, r.duration_ns)

    def update(self, map_name: str, key: bytes, value: bytes) -> None:
        """Set an entry of map ``map_name`` before the runs (per-CPU maps: on every CPU)."""
        lm = self._coll.maps[map_name]
        if is_percpu(lm.map_type):
            pad = bytes(-len(value) % 8)
            value = (value + pad) * syscall.possible_cpus()
        lm.update(key, value)

    def close(self) -> None:
        for st in self._streams:
            st.close()
        self._streams = []
        self._coll.close()


class InterpEngine:
    """The interpreter as an engine (:mod:`bpfdsl.interp`), over one object's :class:`~bpfdsl.obj.collection.CollectionSpec`.

    ``collection`` gives access to the in-memory maps (fill them before running).
    Frames shorter than 14 bytes are skipped, as on the kernel; frames over 3520 bytes
    keep the rest in XDP frags, as a test run does.
    """

    name = "interp"

    def __init__(self, spec: Any, *, config: dict | None = None, **kw: Any) -> None:
        self.collection = InterpCollection(spec, config=config or {}, **kw)
        self._records = {
            name: events.record_type_of(spec.btf, name)
            for name, m in self.collection.maps.items()
            if m.map_type in events.EVENT_MAP_TYPES
        }
        for name in self._records:
            if self.collection.maps[name].map_type == MapType.PERF_EVENT_ARRAY:
                self.collection.maps[name].open_readers()  # as the kernel engine's streams

    def events(self) -> list[events.Event]:
        """The records the runs since the last call sent through event maps."""
        out = []
        for name, rec in self._records.items():
            for cpu, data in self.collection.maps[name].drain():
                out.append(events.make_event(name, rec, data, cpu))
        return out

    def run(self, program: str, packet: bytes, repeat: int = 1) -> RunResult:
        """Run ``program`` on ``packet`` ``repeat`` times (maps keep their changes);
        the result of the last run, ``duration_ns`` = mean wall time per run."""
        prog = self.collection.programs[program]
        if len(packet) < ETH_HLEN and prog.kind and prog.kind.ctx == "xdp_md":
            raise PacketSkipped(  # the same frames the kernel engine refuses
                f"{len(packet)} bytes: XDP runs only on frames of at least {ETH_HLEN} bytes"
            )
        total = 0
        res = None
        for _ in range(max(1, repeat)):
            res = prog.run(packet)
            total += res.duration_ns
        assert res is not None
        return RunResult(res.retval, res.data_out, total // max(1, repeat))

    def update(self, map_name: str, key: bytes, value: bytes) -> None:
        """Set an entry of map ``map_name`` before the runs (per-CPU maps: on every CPU)."""
        self.collection.maps[map_name].set(key, value)

    def close(self) -> None:
        pass


# engine name -> factory(spec, *, config) -> Engine
ENGINES: dict[str, Callable[..., Engine]] = {"kernel": KernelEngine, "interp": InterpEngine}


def preload_maps(engine, spec, entries: Iterable[tuple[str, Any, Any]]) -> int:
    """Put ``entries`` ((map, key, value): text or JSON values parsed by the map's BTF
    types, :func:`bpfdsl.obj.entries.entry_bytes`) into the engine's maps before the runs;
    returns how many.  Raises UsageError naming the map for a bad entry or one the map
    refuses (full, a key outside an array)."""
    n = 0
    for name, key, value in entries:
        k, v = entry_bytes(spec, name, key, value)
        try:
            engine.update(name, k, v)
        except OSError as e:
            raise UsageError(
                error("bad-map-entry", f"map {name!r}: {key!r} -> {value!r}: {e.strerror or e}")
            ) from None
        n += 1
    return n


def open_engine(name: str, spec, *, config: dict | None = None) -> Engine:
    """Create engine ``name`` (see :data:`ENGINES`) for ``spec``.

    Raises UsageError for an unknown or unavailable engine.
    """
    factory = ENGINES.get(name)
    if factory is None:
        raise UsageError(
            error("bad-engine", f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINES)}")
        )
    return factory(spec, config=config or {})


@dataclass(slots=True)
class PacketResult:
    """The outcome for one frame: ``index`` (1-based), ``verdict`` name (``XDP_PASS``...),
    ``data_out``, ``changes`` (human lines), ``duration_ns``; ``skipped`` says why the
    frame was not run (then ``retval`` is None)."""

    index: int
    length: int
    summary: str
    retval: int | None = None
    verdict: str = ""
    data_out: bytes = b""
    changes: list[str] = field(default_factory=list)
    duration_ns: int = 0
    skipped: str = ""
    events: list = field(default_factory=list)  # records sent to user space (runtime.events)

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "length": self.length,
            "summary": self.summary,
            "retval": self.retval,
            "verdict": self.verdict,
            "length_out": len(self.data_out) if self.retval is not None else None,
            "changes": self.changes,
            "duration_ns": self.duration_ns,
            "skipped": self.skipped or None,
            "events": [{k: v for k, v in e.to_dict().items() if k != "time"} for e in self.events],
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
) -> list[PacketResult]:
    """Run ``program`` on each ``(index, frame)``; one :class:`PacketResult` each.

    A frame the engine cannot run is reported as skipped, not raised; kernel failures
    other than that propagate.
    """
    out: list[PacketResult] = []
    for index, data in packets:
        res = PacketResult(index, len(data), summary(data) if describe else "")
        try:
            r = engine.run(program, data, repeat)
        except PacketSkipped as e:
            res.skipped = str(e)
        else:
            res.retval, res.data_out, res.duration_ns = r.retval, r.data_out, r.duration_ns
            res.verdict = verdict_name(kind, r.retval)
            res.changes = describe_change(data, r.data_out)
        read_events = getattr(engine, "events", None)
        if read_events is not None:
            res.events = read_events()
        out.append(res)
    return out


def require_test_run(kind: ProgramKind, program: str, engine: str) -> None:
    """Raise DiagnosticError when the kernel's test run refuses programs of ``kind``."""
    if engine == "kernel" and not kind.test_run:
        raise DiagnosticError(
            error(
                "no-test-run",
                f"the kernel cannot test-run program {program!r} "
                f"({kind.keyword or kind.section}): BPF_PROG_TEST_RUN refuses this program kind",
                hint="use --engine interp, or test it with real traffic",
            )
        )
