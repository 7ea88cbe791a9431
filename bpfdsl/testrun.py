"""Kernel side: run a program on packets (BPF_PROG_TEST_RUN, or another engine).

Takes an object (``.bpfd`` source or ``.o``), a program name and frames; returns one
:class:`PacketResult` per frame (verdict, output bytes, what changed, ns per run).
An *engine* is anything with ``run(program, packet, repeat) -> RunResult`` plus
``close()``; engines are named in :data:`ENGINES` (``kernel`` here; ``interp`` is the
userspace interpreter, ``bpfdsl.interp.InterpEngine``, resolved lazily).
"""

from __future__ import annotations

import errno
import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.uapi import ProgramKind

# engine name -> "module:factory"; factory(spec, *, config) -> Engine
ENGINES: dict[str, str] = {
    "kernel": "bpfdsl.testrun:KernelEngine",
    "interp": "bpfdsl.interp:InterpEngine",
}


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run: ``retval`` (program return value), ``data_out`` (packet bytes after the
    program, wire order), ``duration_ns`` (mean ns per run over ``repeat`` runs; 0 when the
    engine does not measure)."""

    retval: int
    data_out: bytes
    duration_ns: int


class Engine(Protocol):
    """What ``bpfdsl run`` needs from an engine (kernel test run, interpreter);
    ``warnings``: lines for the user about how the engine runs this object."""

    warnings: list[str]

    def run(self, program: str, packet: bytes, repeat: int = 1) -> RunResult: ...

    def close(self) -> None: ...


class PacketSkipped(Exception):
    """The engine cannot run this packet (too short/long); ``str()`` says why."""


class KernelEngine:
    """BPF_PROG_TEST_RUN of programs loaded by :func:`bpfdsl.loader.load_collection`.

    A test run leaves nothing behind: maps pinned by name (LIBBPF_PIN_BY_NAME) are private
    copies here, neither pinned nor taken from an existing pin (``warnings`` says so).
    Raises LoadError/VerifierError (from the loader) when the object does not load.
    """

    def __init__(self, spec, *, config: dict | None = None):
        from bpfdsl import loader  # noqa: PLC0415 (kernel only when this engine is used)

        self._coll = loader.load_collection(spec, config=config or {}, pinning=False)
        self.warnings: list[str] = list(self._coll.warnings)

    def run(self, program: str, packet: bytes, repeat: int = 1) -> RunResult:
        from bpfdsl import syscall  # noqa: PLC0415
        from bpfdsl.packets import ETH_HLEN  # noqa: PLC0415

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

    def close(self) -> None:
        self._coll.close()


def open_engine(name: str, spec, *, config: dict | None = None) -> Engine:
    """Create engine ``name`` (see :data:`ENGINES`) for ``spec``.

    Raises UsageError for an unknown or unavailable engine.
    """
    target = ENGINES.get(name)
    if target is None:
        raise UsageError(
            error("bad-engine", f"unknown engine {name!r}", hint=f"engines: {', '.join(ENGINES)}")
        )
    modname, _, attr = target.partition(":")
    try:
        factory = getattr(importlib.import_module(modname), attr)
    except (ImportError, AttributeError):
        raise UsageError(
            error(
                "bad-engine",
                f"engine {name!r} is not available in this version",
                hint="use --engine kernel",
            )
        ) from None
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
        }


def verdict_name(kind: ProgramKind, retval: int) -> str:
    """``XDP_PASS`` etc. for ``retval`` per the program kind's return table (uapi)."""
    for name, value in kind.returns.items():
        if int(value) == retval:
            return name
    return f"unknown ({retval})"


def choose_program(spec, name: str | None) -> tuple[str, ProgramKind]:
    """The program to run: ``name`` or the only one in ``spec``; with its kind.

    Raises UsageError when the name is unknown or the choice is ambiguous.
    """
    progs = spec.programs
    if not progs:
        raise UsageError(error("unknown-program", "the object holds no program"))
    if name is None:
        if len(progs) > 1:
            raise UsageError(
                error(
                    "unknown-program",
                    f"the object holds {len(progs)} programs",
                    hint=f"pick one with --prog: {', '.join(sorted(progs))}",
                )
            )
        name = next(iter(progs))
    if name not in progs:
        by_section = [p for p in progs.values() if p.section == name]
        if len(by_section) != 1:
            raise UsageError(
                error(
                    "unknown-program",
                    f"no program named {name!r}",
                    hint=f"programs: {', '.join(sorted(progs))}",
                )
            )
        name = by_section[0].name
    kind = progs[name].kind
    if kind is None:
        raise UsageError(
            error(
                "unknown-program",
                f"program {name!r} is in section "
                f"{progs[name].section!r}, which is no known program kind",
            )
        )
    return name, kind


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
    from bpfdsl.packets import describe_change, summary  # noqa: PLC0415 (not on load paths)

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
        out.append(res)
    return out


def object_bytes(path: str | Path) -> bytes:
    """ELF bytes of ``path``: compiled first when it is ``.bpfd`` source.

    Raises UsageError when the file is missing, DiagnosticError on compile errors.
    """
    p = Path(path)
    if not p.is_file():
        raise UsageError(error("no-such-file", f"{p}: no such file"))
    if p.suffix == ".bpfd":
        from bpfdsl.compiler import compile_file  # noqa: PLC0415

        return compile_file(str(p)).obj
    try:
        return p.read_bytes()
    except PermissionError:
        from bpfdsl.syscall import NoPermission  # noqa: PLC0415

        raise NoPermission(f"reading {p}") from None


def parse_config(items: list[str] | None, known: Iterable[str] | None = None) -> dict[str, str]:
    """``["name=value", ...]`` from ``--set`` -> {name: text}; the loader parses each text
    by the config's BTF type (``53``, ``0x35``, ``10.0.0.1``...).  ``known``: the object's
    config names (``CollectionSpec.configs``), listed in the hints and checked.

    Raises UsageError (exit 2) on an item without ``=`` or, given ``known``, an unknown name.
    """
    names = sorted(known) if known is not None else None
    hint = None if names is None else "configs of this object: " + (", ".join(names) or "none")
    out: dict[str, str] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(error("bad-config", f"--set {item!r}: expected NAME=VALUE", hint=hint))
        if names is not None and name.strip() not in names:
            raise UsageError(error("unknown-config", f"unknown config {name.strip()!r}", hint=hint))
        out[name.strip()] = value.strip()
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
