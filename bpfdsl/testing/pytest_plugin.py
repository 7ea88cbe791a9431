"""pytest plugin of bpfdsl (entry point ``pytest11``): markers and fixtures for BPF tests.

``@pytest.mark.kernel`` marks a test that needs the bpf() syscall as root.  Where the kernel
is not usable the test skips with the reason; with ``BPFDSL_REQUIRE_KERNEL=1`` in the
environment (CI sets it) the skip becomes a failure, so a green run proves the kernel tests ran.

Fixtures ``bpf_engine`` ("interp", "kernel") and ``bpf_program`` (load a .bpfd/.o, fill
maps, run a packet, read verdict, output bytes, maps and the records sent to user space
through ringbuf / perf_event_array maps) run one test on both engines.

Program paths given to ``bpf_program`` that are relative resolve against the directory of
the test file that asks (as pytest's own habits for data next to tests), then against the
pytest rootdir; never against the current directory, so a test passes wherever pytest is
started.  A path found in neither fails the test naming both paths tried.

Under ``BPFDSL_REQUIRE_KERNEL=1`` the kernel half of a test never skips: what keeps it
from running (a program kind the kernel cannot test-run, a context it cannot set, no
socket map for an sk_msg run) fails it instead; mark such tests
``@pytest.mark.bpf_engines("interp")``.  The kernel half of an sk_msg test runs its TCP
connection in a fresh network namespace, so the ports it asks for are always free (no
TIME_WAIT from an earlier run, nothing else listening there).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
import warnings
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import pytest

from bpfdsl.abi.map_types import is_percpu, is_sockmap
from bpfdsl.compiler import compile_file
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.interp import InterpCollection, SlotMap
from bpfdsl.interp.ctx import SockInfo
from bpfdsl.interp.maps import Map
from bpfdsl.kernel import netlink, syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.spec import CollectionSpec, choose_program
from bpfdsl.runtime import events, loader, sockmap
from bpfdsl.runtime.mapview import MapCodec
from bpfdsl.runtime.testrun import (
    LinearOnlyWarning,
    linear_only,
    linear_only_message,
    verdict_name,
    xdp_md_ctx,
)

if TYPE_CHECKING:  # pragma: no cover
    from scapy.layers.l2 import Ether

REQUIRE_ENV = "BPFDSL_REQUIRE_KERNEL"


def kernel_unavailable_reason() -> str | None:
    """None when bpf() can create a map here; otherwise a one-line reason."""
    if not hasattr(os, "geteuid") or os.uname().sysname != "Linux":
        return "not Linux: the bpf() syscall is unavailable"
    if os.geteuid() != 0:
        return "not root: loading BPF programs needs CAP_BPF + CAP_NET_ADMIN (run as root)"
    return syscall.probe_bpf()


def require_kernel() -> None:
    """Skip (or fail under BPFDSL_REQUIRE_KERNEL=1) when the kernel cannot be used."""
    reason = kernel_unavailable_reason()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the kernel is not usable: {reason}", pytrace=False)
    pytest.skip(f"kernel not available: {reason}")


def cannot_run(reason: str) -> NoReturn:
    """The kernel half of a test cannot run here: skip with ``reason``, or fail under
    BPFDSL_REQUIRE_KERNEL=1 (where a skip would hide that the kernel test did not run)."""
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but the kernel half cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "kernel: needs the bpf() syscall as root (skips elsewhere; "
        f"{REQUIRE_ENV}=1 turns the skip into a failure)",
    )
    config.addinivalue_line(
        "markers",
        "bpf_engines(*names): run a test that uses bpf_engine/bpf_program only on these "
        "engines (others are deselected, e.g. programs BPF_PROG_TEST_RUN refuses)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the engines a ``bpf_engines`` marker excludes (not a skip: nothing to run)."""
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("bpf_engines")
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("bpf_engine") if callspec else None
        if marker is not None and engine is not None and engine not in marker.args:
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("kernel") is not None:
        require_kernel()


# ---------------------------------------------------------------------------------------
# Fixtures: run one program on the kernel (BPF_PROG_TEST_RUN) or the userspace interpreter
# with the same calls.  ``bpf_engine`` is parametrized over both engines (the kernel one
# carries the ``kernel`` mark, so it skips without root); ``bpf_program`` loads an object.
#
#     def test_drop(bpf_program):
#         prog = bpf_program("progs/xdp_udp_filter.bpfd", config={"port": 9999})
#         res = prog.run(Ether() / IP() / UDP(dport=9999))
#         assert res.verdict == "XDP_DROP"
#         assert prog.maps["drops"].total(0) == 1
# ---------------------------------------------------------------------------------------

ENGINES = ("interp", "kernel")


@dataclass
class BpfRun:
    """One run: ``retval``, ``verdict`` (``XDP_DROP``...), ``data_out`` (bytes after the
    program; sk_msg: the bytes delivered, b"" on SK_DROP in both engines), ``redirect`` (interpreter only: the redirect target, else None)."""

    retval: int
    verdict: str
    data_out: bytes
    redirect: tuple | None = None

    @property
    def packet(self) -> Ether:
        """``data_out`` parsed by scapy as an Ethernet frame."""
        from scapy.layers.l2 import Ether

        return Ether(self.data_out)


class BpfMap:
    """A map of a loaded program, same calls on both engines.

    Keys/values given as bytes are the raw bytes; ints are little endian, sized by the map
    (the raw form, as before); anything else is a typed value read by the map's BTF types
    exactly as ``bpfdsl map update`` reads it (:class:`bpfdsl.runtime.mapview.MapCodec`): text such
    as ``"10.0.0.1"``, ``"10.0.0.0/8"``, ``"fd00::1"``, a JSON object, or a dict / list
    for structs and arrays (``{"sip": "10.0.0.1", "sport": 80}``; be16 fields in host
    order).  :meth:`get`/:meth:`items` return raw bytes (per-CPU: lists);
    :meth:`lookup`/:meth:`dump` return typed values as ``bpfdsl map lookup/dump`` shows
    them (addresses as text, structs as dicts, per-CPU values as lists)."""

    def __init__(
        self,
        name: str,
        key_size: int,
        value_size: int,
        map_type: int,
        ncpus: int,
        codec: MapCodec | None = None,
    ) -> None:
        self.name, self.key_size, self.value_size = name, key_size, value_size
        self.map_type, self.ncpus = map_type, ncpus
        self.codec = codec

    @property
    def percpu(self) -> bool:
        return is_percpu(self.map_type)

    def _b(self, x: Any, size: int, what: str = "value") -> bytes:
        if isinstance(x, (bytes, bytearray, memoryview)):
            return bytes(x)
        if isinstance(x, int) and not isinstance(x, bool):
            return (x & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
        if self.codec is None:
            raise TypeError(f"map {self.name!r}: {what} {x!r}: give bytes or an int")
        return self.codec.encode_key(x) if what == "key" else self.codec.encode_value(x)

    def _key(self, key: Any) -> bytes:
        return self._b(key, self.key_size, "key")

    def _value(self, value: Any) -> Any:
        """Raw bytes of one value, or (per-CPU) a list of them, from raw or typed input."""
        if self.percpu and isinstance(value, list):
            return [self._b(v, self.value_size) for v in value]
        return self._b(value, self.value_size)

    def _raw(self, key: bytes) -> bytes | None:
        """The value as BPF_MAP_LOOKUP_ELEM gives it (per-CPU: concatenated, 8-aligned)."""
        v = self.get(key)
        if isinstance(v, list):
            pad = bytes((-self.value_size) % 8)
            return b"".join(bytes(x) + pad for x in v)
        return v if v is None or isinstance(v, bytes) else None

    def lookup(self, key: Any) -> Any:
        """The typed value of ``key`` (as ``bpfdsl map lookup`` shows it), None if absent."""
        raw = self._raw(self._key(key))
        if raw is None:
            return None
        return self.codec.value_value(raw) if self.codec else raw

    def dump(self) -> list[tuple[Any, Any]]:
        """Every entry as (typed key, typed value), as ``bpfdsl map dump`` lists them."""
        out = []
        for k in self.items():
            raw = self._raw(k)
            if raw is not None:
                kv = self.codec.key_value(k) if self.codec else k
                out.append((kv, self.codec.value_value(raw) if self.codec else raw))
        return out

    def set(self, key: Any, value: Any) -> None:
        """Create or replace ``key`` (per-CPU maps: one value for all CPUs, or a list)."""
        raise NotImplementedError

    def get(self, key: Any) -> bytes | list[bytes] | None:
        """The value (per-CPU: a list, one per CPU), or None when absent."""
        raise NotImplementedError

    def items(self) -> dict[bytes, bytes | list[bytes]]:
        """Every entry: key bytes -> value bytes (per-CPU: list)."""
        raise NotImplementedError

    def total(self, key: Any) -> int:
        """The value at ``key`` as a little-endian int, summed over CPUs; 0 when absent."""
        v = self.get(key)
        if v is None:
            return 0
        vals = v if isinstance(v, list) else [v]
        return sum(int.from_bytes(x[: self.value_size], "little") for x in vals)


class _InterpMap(BpfMap):
    def __init__(self, m: Map, codec: MapCodec | None = None) -> None:
        super().__init__(m.name, m.key_size, m.value_size, m.map_type, m.ncpus, codec)
        self.m = m

    def set(self, key: Any, value: Any) -> None:
        if isinstance(self.m, SlotMap) and not isinstance(value, (bytes, bytearray, int, str)):
            self.m.set(self._key(key), value)  # a socket object for sockmap/xskmap
            return
        self.m.set(self._key(key), self._value(value))

    def get(self, key: Any) -> bytes | list[bytes] | None:
        return self.m.get(self._key(key))

    def items(self) -> dict[bytes, bytes | list[bytes]]:
        return dict(self.m.items())


class _KernelMap(BpfMap):
    def __init__(self, lm: loader.LoadedMap, ncpus: int, codec: MapCodec | None = None) -> None:
        super().__init__(lm.name, lm.key_size, lm.value_size, lm.map_type, ncpus, codec)
        self.fd = lm.fd

    def _vsize(self) -> int:
        return ((self.value_size + 7) & ~7) * self.ncpus if self.percpu else self.value_size

    def set(self, key: Any, value: Any) -> None:
        value = self._value(value)
        if self.percpu:
            vals = value if isinstance(value, list) else [value] * self.ncpus
            pad = (-self.value_size) % 8
            raw = b"".join(v + bytes(pad) for v in vals)
        else:
            raw = value
        syscall.map_update(self.fd, self._key(key), raw)

    def _split(self, raw: bytes) -> bytes | list[bytes]:
        if not self.percpu:
            return raw
        step = (self.value_size + 7) & ~7
        return [raw[i * step : i * step + self.value_size] for i in range(self.ncpus)]

    def get(self, key: Any) -> bytes | list[bytes] | None:
        raw = syscall.map_lookup(self.fd, self._key(key), self._vsize())
        return None if raw is None else self._split(raw)

    def items(self) -> dict[bytes, bytes | list[bytes]]:
        out: dict[bytes, bytes | list[bytes]] = {}
        key: bytes | None = None
        seen = 0
        while seen <= 1_000_000:
            key = syscall.map_get_next_key(self.fd, key, self.key_size)
            if key is None:
                break
            seen += 1
            raw = syscall.map_lookup(self.fd, key, self._vsize())
            if raw is not None:
                out[key] = self._split(raw)
        return out


class BpfProgram:
    """One program of a loaded object on one engine: ``run(packet)``, ``maps[name]``,
    ``events(name)`` (the records sent through an event map since the last call);
    ``program(name)`` is another program of the same load (shared maps); ``interp`` is
    the :class:`bpfdsl.interp.InterpCollection` on the interpreter (``interp.env.cpu``
    sets the CPU, ``interp.env.clock_ns`` the clock), None on the kernel."""

    def __init__(
        self,
        engine: str,
        spec: CollectionSpec,
        name: str | None,
        config: dict | None,
        _of: BpfProgram | None = None,
    ) -> None:
        self.engine = engine
        self.spec = spec
        self.name, self.kind = choose_program(spec, name)
        self._coll: loader.Collection | None  # the kernel's load (None on the interpreter)
        self.interp: InterpCollection | None
        self.maps: dict[str, BpfMap]
        self._events: events.EventReaders
        if _of is not None:  # same load as another program
            self._coll, self.interp, self.maps = _of._coll, _of.interp, _of.maps
            self._events = _of._events
            self._owner = False
            return
        self._owner = True
        self._coll = None
        self.interp = None
        if engine == "interp":
            self.interp = InterpCollection(spec, config=config or {})
            self.maps = {
                n: _InterpMap(m, MapCodec.for_spec(spec, n, m.ncpus))
                for n, m in self.interp.maps.items()
            }
            self._events = events.EventReaders.of_interp(self.interp.maps, spec.btf)
        else:
            self._coll = loader.load_collection(spec, config=config or {}, pinning=False)
            n = syscall.possible_cpus()
            self.maps = {
                k: _KernelMap(lm, n, MapCodec.for_spec(spec, k, n))
                for k, lm in self._coll.maps.items()
                if lm.spec is not None
            }
            try:  # ring buffer mmaps and a perf ring per CPU, as `bpfdsl events` opens them
                self._events = events.EventReaders.of_kernel(self._coll.maps, spec.btf)
            except BaseException:
                self._coll.close()
                self._coll = None
                raise

    def events(self, name: str) -> list[events.Event]:
        """The records programs of this load sent through event map ``name`` (ringbuf or
        perf_event_array) since the last call, oldest first: ``.value`` the record
        decoded by its BTF type (a dict), ``.packet`` the packet bytes appended to it
        (perf_event_output with a byte count), ``.data`` the raw bytes (on the kernel, a
        perf record is padded to 8 bytes).  KeyError for a map that is none of those."""
        return self._events.read(name)

    def program(self, name: str) -> BpfProgram:
        """Program ``name`` of the same object, sharing this load's maps."""
        return BpfProgram(self.engine, self.spec, name, None, _of=self)

    def run(self, packet: Any, **ctx: Any) -> BpfRun:
        """Run on ``packet`` (bytes or a scapy packet).  Keywords: XDP ``ingress_ifindex``,
        ``rx_queue_index`` (both engines; the kernel takes them as the test run's struct
        xdp_md), ``egress_ifindex`` (interpreter); sk_msg ``sock``
        (:class:`bpfdsl.interp.SockInfo`).  A plain XDP program given a frame over 3520
        bytes sees only those (the test run's linear part): a LinearOnlyWarning says so
        (pytest lists it; ``-W error::bpfdsl.runtime.testrun.LinearOnlyWarning`` fails
        the test).  On the kernel, sk_msg programs run on a
        loopback TCP connection (see :func:`_kernel_sk_msg`); other kinds that
        BPF_PROG_TEST_RUN refuses (cpumap, devmap, sock_ops) skip the test, or fail it
        under BPFDSL_REQUIRE_KERNEL=1 (see :func:`cannot_run`)."""

        data = bytes(packet) if packet is not None else b""
        if linear_only(self.kind, len(data)):  # both engines lay the frame out alike
            what = f"this {len(data)}-byte frame is"
            warnings.warn(LinearOnlyWarning(linear_only_message(self.name, what)), stacklevel=2)
        if self.interp is not None:  # the engine is "interp"
            r = self.interp.programs[self.name].run(data, **ctx)
            verdict = verdict_name(self.kind, r.retval)
            out = r.data_out
            if self.kind.ctx == "sk_msg_md" and verdict == "SK_DROP":
                out = b""  # as on the kernel: a dropped message delivers nothing
            return BpfRun(r.retval, verdict, out, r.redirect)
        if self.kind.ctx == "sk_msg_md" and set(ctx) <= {"sock"}:
            return _kernel_sk_msg(self, data, ctx.get("sock"))
        if not self.kind.test_run:
            cannot_run(
                f"BPF_PROG_TEST_RUN refuses {self.kind.keyword or self.kind.section} programs "
                "(tested with the interpreter and real traffic; mark the test "
                '@pytest.mark.bpf_engines("interp"))'
            )
        xdp_ctx = {"ingress_ifindex", "rx_queue_index"}
        if ctx and (self.kind.ctx != "xdp_md" or not set(ctx) <= xdp_ctx):
            cannot_run(f"the kernel test run cannot set {', '.join(sorted(set(ctx) - xdp_ctx))}")

        md = xdp_md_ctx(len(data), ctx) if ctx else None
        t = syscall.prog_test_run(self._kernel_load().programs[self.name].fd, data, ctx=md)
        return BpfRun(t.retval, verdict_name(self.kind, t.retval), t.data_out)

    def _kernel_load(self) -> loader.Collection:
        """The kernel's load of this program's object (the kernel engine only).  Raises
        ValueError on the interpreter, or once the load is closed."""
        if self._coll is None:
            where = "closed" if self.engine == "kernel" else "on the interpreter"
            raise ValueError(f"program {self.name!r}: no kernel load ({where})")
        return self._coll

    def close(self) -> None:
        if self._owner:
            self._events.close()
        if self._owner and self._coll is not None:
            self._coll.close()
            self._coll = None


def _kernel_sk_msg(prog: BpfProgram, data: bytes, sock: SockInfo | None) -> BpfRun:
    """sk_msg on the kernel: attach the program to the object's first sockmap/sockhash,
    put the client end of a loopback TCP connection (ports as ``sock`` says) into it,
    send ``data`` and see what the server end gets.  ``SK_DROP`` when sendmsg fails with
    EACCES, else ``SK_PASS`` with ``data_out`` = the bytes that arrived (2 s at most).

    The connection lives in a network namespace made for this run (removed after it):
    the ports ``sock`` names are free there whatever the machine runs, and no TIME_WAIT of
    an earlier run of the same test can hold them."""

    coll = prog._kernel_load()
    socks = [m for m in coll.maps.values() if is_sockmap(m.map_type)]
    if not socks:
        cannot_run("the sk_msg program has no sockmap/sockhash to attach to")
    fam = getattr(sock, "family", socket.AF_INET)
    host = "::1" if fam == socket.AF_INET6 else "127.0.0.1"
    ns = f"bpfdsl-skmsg-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(netlink.netns(ns))  # loopback up; removed on exit
        except (OSError, DiagnosticError) as e:
            cannot_run(f"cannot make a network namespace for the sk_msg connection: {e}")
        srv = cli = conn = None
        try:
            with netlink.in_netns(ns):  # the sockets stay in it
                srv = socket.socket(fam, socket.SOCK_STREAM)
                cli = socket.socket(fam, socket.SOCK_STREAM)
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            cli.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                srv.bind((host, getattr(sock, "remote_port", 0)))
                cli.bind((host, getattr(sock, "local_port", 0)))
            except OSError as e:
                cannot_run(f"cannot bind the loopback ports the test asks for: {e}")
            srv.listen(1)
            cli.settimeout(2)
            cli.connect(srv.getsockname()[:2])
            conn, _ = srv.accept()
            conn.settimeout(0.5)
            m, fd = socks[0], coll.programs[prog.name].fd
            sockmap.sk_msg_attach(m.fd, int(fd), map_name=m.name, prog_name=prog.name)
            sockmap.sockmap_add(int(m.fd), 0, cli, map_name=m.name)
            try:
                cli.sendall(data)
            except PermissionError:
                return BpfRun(0, "SK_DROP", b"")
            got, deadline = b"", time.monotonic() + 2
            while len(got) < len(data) and time.monotonic() < deadline:
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                if not chunk:
                    break
                got += chunk
            return BpfRun(1, "SK_PASS", got)
        finally:
            for s in (cli, conn, srv):
                if s is not None:
                    s.close()


def resolve_program_path(obj: str | Path, test_path: Path | None, rootdir: Path | None) -> Path:
    """Where ``bpf_program`` finds a program path: absolute as given; relative against the
    requesting test file's directory, then the pytest rootdir (never the current
    directory).  Fails the test naming every path tried when none exists."""
    p = Path(obj)
    if p.is_absolute():
        tried = [p]
    else:
        bases = [b for b in (test_path.parent if test_path else None, rootdir) if b is not None]
        tried = list(dict.fromkeys(Path(b) / p for b in bases))
    for t in tried:
        if t.is_file():
            return t
    pytest.fail(
        f"bpf_program: no program file {str(obj)!r}; tried "
        + ", ".join(str(t) for t in tried)
        + " (relative paths resolve against the test file's directory, then the rootdir)",
        pytrace=False,
    )
    raise AssertionError  # pragma: no cover - pytest.fail raises


def load_spec(obj: str | Path | bytes) -> CollectionSpec:
    """CollectionSpec of ``obj``: ELF bytes, a ``.o`` path, or a ``.bpfd`` source path
    (compiled with bpfdsl.compiler)."""
    if isinstance(obj, (str, Path)) and str(obj).endswith(".bpfd"):
        key = (str(obj), Path(obj).stat().st_mtime_ns)
        if key not in _COMPILED:
            _COMPILED[key] = compile_file(str(obj)).obj
        return read_object(_COMPILED[key])
    return read_object(obj)


_COMPILED: dict[tuple[str, int], bytes] = {}  # (.bpfd path, mtime) -> ELF bytes, per session


@pytest.fixture(params=[ENGINES[0], pytest.param(ENGINES[1], marks=pytest.mark.kernel)])
def bpf_engine(request: pytest.FixtureRequest) -> str:
    """``"interp"`` or ``"kernel"``: every test using it runs once per engine."""
    return request.param


class LoadProgram(Protocol):
    """What the ``bpf_program`` fixture gives: ``bpf_program(obj, program=None, *,
    config=None) -> BpfProgram``."""

    def __call__(
        self, obj: str | Path | bytes, program: str | None = None, *, config: dict | None = None
    ) -> BpfProgram: ...


@pytest.fixture
def bpf_program(
    bpf_engine: str, request: pytest.FixtureRequest
) -> Generator[LoadProgram, None, None]:
    """Factory ``bpf_program(obj, program=None, *, config=None) -> BpfProgram`` on the
    engine of ``bpf_engine``; kernel objects are closed after the test.  ``obj``: ELF
    bytes or a ``.bpfd``/``.o`` path (relative: see :func:`resolve_program_path`)."""
    made: list[BpfProgram] = []

    def load(
        obj: str | Path | bytes, program: str | None = None, *, config: dict | None = None
    ) -> BpfProgram:
        if isinstance(obj, (str, Path)):
            obj = resolve_program_path(obj, Path(request.path), Path(request.config.rootpath))
        p = BpfProgram(bpf_engine, load_spec(obj), program, config)
        made.append(p)
        return p

    try:
        yield load
    finally:
        for p in made:
            p.close()
