"""Events from programs to user space (kernel side): stream the records of a ring buffer or
a perf event array of a loaded program, decoded by their BTF type.

:func:`open_events` takes a map reference (``PIN_PATH | DIR:NAME | id:N``, as ``bpfdsl
map``), finds the record type (the ``bpfdsl_records`` description bpfdsl compiles into the
BTF of the programs that use the map, :mod:`bpfdsl.abi.btf.records`; or a struct named
with ``type_name`` from that BTF, for objects of other compilers) and returns an
:class:`EventStream`: for a ring buffer the map's mmap, for a perf event array one perf
event (PERF_COUNT_SW_BPF_OUTPUT) per possible CPU, put into the array's slots as libbpf's
perf_buffer does (the slots empty again when the stream closes).  :meth:`EventStream.poll`
waits (epoll) and returns :class:`Event` s.

Records that carry packet bytes (``perf_event_output(m, rec, n)``: the bytes follow the
record) give :attr:`Event.packet`: ``cap_len`` bytes when the record has a ``cap_len``
field (the xdpdump convention: ``pkt_len`` is then the frame's length), else all bytes after
the record (a perf sample is padded to 8 bytes, so up to 7 more).
"""

from __future__ import annotations

import errno
import json
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Any, cast

from bpfdsl.abi.btf import values as btf_values
from bpfdsl.abi.btf.core import Btf
from bpfdsl.abi.btf.records import record_type, struct_named
from bpfdsl.abi.map_types import MapType
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import events as K
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import mapview

_MAX_PROGS = 100_000  # programs looked at for the one that uses a map (bounded walk)
EVENT_MAP_TYPES = (MapType.RINGBUF, MapType.PERF_EVENT_ARRAY)


@dataclass(slots=True)
class RecordType:
    """The struct of an event map's records: BTF ``type_id`` in ``btf``, ``size`` bytes."""

    btf: Btf
    type_id: int
    name: str
    size: int
    _decode: Any = field(default=None, repr=False, compare=False)
    _codec: Any = field(default=False, repr=False, compare=False)

    def codec(self) -> RowCodec | None:
        """The record's batch decoder (:class:`RowCodec`), compiled once; None when the
        struct has members only :meth:`decode` reads (bitfields, nested types)."""
        if self._codec is False:
            layout = btf_values.row_layout(self.btf, self.type_id)
            self._codec = RowCodec(layout, self.size) if layout else None
        return self._codec

    def decode(self, data: bytes) -> Any:
        """The record's fields as a dict (addresses as text, be16 in host order, ...:
        :mod:`bpfdsl.abi.btf.values`), from the first ``size`` bytes of ``data``."""
        if self._decode is None:
            self._decode = btf_values.decoder(self.btf, self.type_id)
        return self._decode(data[: self.size].ljust(self.size, b"\0"))


@dataclass(slots=True)
class Event:
    """One record: ``map`` name, ``data`` (the bytes the program wrote; perf: padded to 8
    bytes), ``cpu`` (perf: whose ring; ring buffer: None), ``time_ns`` (perf: when it was
    written, CLOCK_MONOTONIC; ring buffer: when it was read), ``value`` (decoded record,
    None without a record type), ``packet``/``orig_len`` (appended packet bytes and the
    frame's length, None when the record carries none), ``lost`` (a perf LOST record:
    how many records the kernel dropped; then ``data`` is empty)."""

    map: str
    data: bytes
    cpu: int | None = None
    time_ns: int = 0
    value: Any = None
    packet: bytes | None = None
    orig_len: int | None = None
    lost: int = 0

    def to_dict(self, clock_offset_ns: int = 0) -> dict:
        """JSON-ready: ``time`` (UTC seconds, from ``time_ns + clock_offset_ns``), ``cpu``,
        ``record`` (decoded, else hex), ``packet`` (hex) / ``lost`` when present."""
        d: dict[str, Any] = {"map": self.map, "time": (self.time_ns + clock_offset_ns) / 1e9}
        if self.cpu is not None:
            d["cpu"] = self.cpu
        if self.lost:
            d["lost"] = self.lost
            return d
        d["record"] = self.value if self.value is not None else self.data.hex()
        if self.packet is not None:
            d["packet"] = self.packet.hex()
            d["orig_len"] = self.orig_len
        return d


def packet_of(rec: RecordType | None, data: bytes, value: Any) -> tuple[bytes | None, int | None]:
    """(packet bytes, frame length) appended to record ``data`` (see the module doc)."""
    if rec is None or len(data) <= rec.size:
        return None, None
    rest = data[rec.size :]
    fields = value if isinstance(value, dict) else {}
    cap = fields.get("cap_len")
    if isinstance(cap, int) and 0 <= cap <= len(rest):
        rest = rest[:cap]
    orig = fields.get("pkt_len", fields.get("len"))
    return rest, orig if isinstance(orig, int) and orig >= len(rest) else len(rest)


def record_type_of(btf: Btf | None, map_name: str) -> RecordType | None:
    """The record type bpfdsl described for event map ``map_name`` in ``btf`` (an
    object's BTF, e.g. ``CollectionSpec.btf``), or None."""
    tid = record_type(btf, map_name) if btf is not None else None
    if btf is None or tid is None:
        return None
    t = btf.resolve(tid)
    return RecordType(btf, tid, t.name or "record", btf.size_of(tid))


def make_event(map_name: str, record: RecordType | None, data: bytes, cpu: int | None = None,
               time_ns: int = 0) -> Event:  # fmt: skip
    """An :class:`Event` of ``data`` decoded by ``record`` (packet bytes split off)."""
    value = record.decode(data) if record is not None else None
    pkt, orig = packet_of(record, data, value)
    return Event(map_name, data, cpu, time_ns, value, pkt, orig)


class RowCodec:
    """A record struct of plain members (:func:`bpfdsl.abi.btf.values.row_layout`)
    compiled once for whole batches: one ``struct.Struct`` read per record (addresses and
    network-order integers converted after), the JSON text of a record by one ``%``
    format, and the numpy dtype of :meth:`RecordBatch.array`.  The values are those of
    :meth:`RecordType.decode` (host-order integers, addresses as text)."""

    def __init__(self, layout: list[tuple[str, int, int, str]], size: int) -> None:
        self.names = [name for name, *_ in layout]
        self.size = size
        self.struct, self.convert = btf_values.row_struct(layout)
        parts: list[str] = []
        for name, _off, _n, form in layout:
            if form in ("int", "uint", "be"):
                parts.append(f"{json.dumps(name)}: %d")
            else:
                parts.append(f'{json.dumps(name)}: "%s"')  # text of [0-9a-f.:] only
        self._strided: dict[int, struct.Struct] = {}  # step -> the record and its gap
        self.layout = layout
        # the record as json.dumps writes the decoded dict (", " and ": " separators)
        self.json_template = "{" + ", ".join(parts) + "}"

    def rows(self, blob: bytes, starts: list[int]) -> list[tuple]:
        """The member values of the records at ``starts`` in ``blob``, one tuple each.
        Records evenly spaced (a ring buffer's records of one length are) are read by one
        ``struct.iter_unpack`` over the span, conversions are done column by column."""
        k = len(starts)
        if not k:
            return []
        first, last = starts[0], starts[-1]
        step = (last - first) // (k - 1) if k > 1 else 0
        raw: list[tuple]
        if k > 1 and step >= self.struct.size and _evenly(starts, step):
            st = self._strided.get(step)
            if st is None:
                st = self._strided[step] = struct.Struct(
                    self.struct.format + f"{step - self.struct.size}x"
                )
            # the last record read by itself: its gap may run past the end of the blob
            raw = list(st.iter_unpack(memoryview(blob)[first : first + step * (k - 1)]))
            raw.append(self.struct.unpack_from(blob, last))
        else:
            unpack = self.struct.unpack_from
            raw = [unpack(blob, s) for s in starts]
        if not self.convert:
            return raw
        cols: list[Any] = list(zip(*raw, strict=True))
        for i, fn in self.convert:
            cols[i] = map(fn, cols[i])
        return list(zip(*cols, strict=True))

    def dtype(self) -> Any:
        """The numpy structured dtype of one record (``itemsize`` = the struct's size;
        network-order integers as big-endian fields, addresses as byte arrays).  Raises
        ImportError without numpy."""
        import numpy as np

        formats: list[Any] = []
        for _name, _off, n, form in self.layout:
            if form == "int":
                formats.append(f"<i{n}")
            elif form == "uint":
                formats.append(f"<u{n}")
            elif form == "be":
                formats.append(f">u{n}")
            else:
                formats.append((np.uint8, (n,)))
        return np.dtype({"names": self.names, "formats": formats,
                         "offsets": [o for _n, o, *_ in self.layout], "itemsize": self.size})  # fmt: skip


def _evenly(starts: list[int], step: int) -> bool:
    """True when ``starts`` go up by ``step`` from the first (compared in C, not a loop)."""
    return step > 0 and starts == list(range(starts[0], starts[0] + step * len(starts), step))


@dataclass(slots=True)
class RecordBatch:
    """The records one ring gave in one read, undecoded: record ``i`` is
    ``blob[starts[i] : starts[i] + lengths[i]]``.  ``map`` name, ``cpu`` (perf: whose
    ring; ring buffer: None), ``times_ns`` (perf: each record's CLOCK_MONOTONIC time) or
    ``time_ns`` (ring buffer: when the batch was read), ``record`` type (None: records
    shown as hex), ``lost`` (perf LOST records in this read: how many records the kernel
    dropped).  Decoded only when asked: :meth:`rows` (tuples of the member values),
    :meth:`array` (a numpy structured array), :meth:`events` (:class:`Event` objects),
    :meth:`json_lines` (what ``bpfdsl events --json`` prints)."""

    map: str
    blob: bytes
    starts: list[int]
    lengths: list[int]
    record: RecordType | None = None
    cpu: int | None = None
    time_ns: int = 0
    times_ns: list[int] | None = None
    lost: int = 0
    stride: int = 0  # records evenly spaced this many bytes apart (0: not known)

    def __len__(self) -> int:
        return len(self.starts)

    def data(self, i: int) -> bytes:
        """The bytes of record ``i``."""
        s = self.starts[i]
        return self.blob[s : s + self.lengths[i]]

    def _plain(self) -> RowCodec | None:
        """The codec when every record is exactly one record struct (no packet bytes)."""
        rec = self.record
        codec = rec.codec() if rec is not None else None
        if codec is None or rec is None:
            return None
        n = rec.size
        # exactly the struct: longer records carry packet bytes (a perf sample's padding
        # too, as make_event reads it), which the Event objects show
        return codec if self.lengths.count(n) == len(self.lengths) else None

    def rows(self) -> list[tuple] | None:
        """Each record's member values (:attr:`RowCodec.names` order), or None when the
        records are not all plain record structs (then use :meth:`events`)."""
        codec = self._plain()
        return codec.rows(self.blob, self.starts) if codec is not None else None

    def array(self) -> Any:
        """The records as a numpy structured array of the record type (one copy of the
        ring's bytes, no per-record Python work); raises ImportError without numpy and
        ValueError when the records are not all plain record structs."""
        import numpy as np

        codec = self._plain()
        if codec is None:
            raise ValueError(f"records of {self.map!r} are not all one plain record struct")
        dt = codec.dtype()
        k = len(self.starts)
        if not k:
            return np.zeros(0, dt)
        raw = np.frombuffer(self.blob, np.uint8)
        first, last = self.starts[0], self.starts[-1]
        step = self.stride or ((last - first) // (k - 1) if k > 1 else codec.size)
        if k == 1 or self.stride or (step >= codec.size and _evenly(self.starts, step)):
            view = np.lib.stride_tricks.as_strided(
                raw[first:], shape=(k, codec.size), strides=(step, 1)
            )
        else:
            idx = np.asarray(self.starts)[:, None] + np.arange(codec.size)
            view = raw[idx]
        return np.ascontiguousarray(view).view(dt).reshape(k)

    def events(self) -> list[Event]:
        """The records as :class:`Event` objects (each decoded), oldest first; a perf LOST
        count as a last Event with ``lost`` set."""
        out: list[Event] = []
        times = self.times_ns
        for i in range(len(self.starts)):
            t = times[i] if times is not None else self.time_ns
            out.append(make_event(self.map, self.record, self.data(i), self.cpu, t))
        if self.lost:
            out.append(Event(self.map, b"", self.cpu, self.time_ns, lost=self.lost))
        return out

    def json_lines(self, clock_offset_ns: int = 0) -> list[str]:
        """One JSON object per record, each what ``json.dumps(event.to_dict(offset))`` writes
        for it (the ``bpfdsl events --json`` line), formatted by the codec's template
        when the records are plain structs."""
        codec = self._plain()
        if codec is None:
            return [json.dumps(e.to_dict(clock_offset_ns)) for e in self.events()]
        rows = codec.rows(self.blob, self.starts)
        tmpl = codec.json_template
        name = json.dumps(self.map)
        out: list[str] = []
        if self.times_ns is None:
            head = (
                f'{{"map": {name}, "time": {(self.time_ns + clock_offset_ns) / 1e9!r}, "record": '
            )
            out = [head + tmpl % r + "}" for r in rows]
        else:
            cpu = self.cpu
            for t, r in zip(self.times_ns, rows, strict=True):
                head = f'{{"map": {name}, "time": {(t + clock_offset_ns) / 1e9!r}, "cpu": {cpu}, "record": '
                out.append(head + tmpl % r + "}")
        if self.lost:
            out.append(
                json.dumps(
                    Event(self.map, b"", self.cpu, self.time_ns, lost=self.lost).to_dict(
                        clock_offset_ns
                    )
                )
            )
        return out


class EventStream:
    """Open readers on one event map (see the module doc); a context manager.

    ``fd``: the map (owned), ``info``: its syscall.MapInfo, ``record``: the record type
    or None (records shown as hex).  ``pages``: data pages of each perf ring (a power of
    2).  Raises UsageError for a map that is no ring buffer / perf event array."""

    def __init__(self, fd: S.Fd, info: S.MapInfo, record: RecordType | None, *, name: str = "",
                 pages: int = 16) -> None:  # fmt: skip
        self.fd, self.info, self.record = fd, info, record
        self.name = name or info.name.decode(errors="replace")
        self.type = int(info.type)
        self.rings: dict[int, K.RingbufRing | K.PerfRing] = {}  # fd -> its ring
        self.poller = K.Poller()
        self.clock_offset_ns = time.time_ns() - time.monotonic_ns()  # monotonic -> UTC
        self._slots: list[int] = []
        try:
            if self.type == MapType.RINGBUF:
                ring = K.RingbufRing(int(fd), int(info.max_entries))
                self.rings[ring.fileno()] = ring
            elif self.type == MapType.PERF_EVENT_ARRAY:
                self._open_perf(pages)
            else:
                raise UsageError(
                    error(
                        "not-event-map",
                        f"map {self.name!r} is of type {_type_name(self.type)}, not ringbuf "
                        "or perf_event_array",
                        hint="`bpfdsl map dump` shows the entries of other maps",
                    )
                )
            for rfd in self.rings:
                self.poller.add(rfd)
        except BaseException:
            self.close()
            raise

    def _open_perf(self, pages: int) -> None:
        n = min(int(self.info.max_entries), S.possible_cpus())
        for cpu in range(n):
            try:
                ring = K.PerfRing(cpu, pages)
            except OSError as e:
                if e.errno == errno.ENODEV:
                    continue  # a possible CPU that is offline: nothing runs there
                if e.errno in (errno.EACCES, errno.EPERM):
                    raise S.NoPermission("perf_event_open of the BPF output event") from None
                raise
            self.rings[ring.fileno()] = ring
            S.map_update(self.fd, struct.pack("<I", cpu), struct.pack("<I", ring.fd))
            self._slots.append(cpu)

    def _events(self, ring: K.RingbufRing | K.PerfRing, now: int) -> list[Event]:
        out: list[Event] = []
        if isinstance(ring, K.RingbufRing):  # one copy and one position store per read
            blob, starts, lengths, _stride = ring.read_raw()
            name, rec = self.name, self.record
            for s, n in zip(starts, lengths, strict=True):
                out.append(make_event(name, rec, blob[s : s + n], None, now))
            return out
        for kind, t, payload in ring.read():
            if kind == "lost":
                out.append(Event(self.name, b"", ring.cpu, now, lost=int(payload)))
            else:
                out.append(self._event(cast(bytes, payload), ring.cpu, t))  # a "sample"
        return out

    def _event(self, data: bytes, cpu: int | None, t: int) -> Event:
        return make_event(self.name, self.record, data, cpu, t)

    def read_batches(self) -> list[RecordBatch]:
        """Every record waiting now (no wait) as one :class:`RecordBatch` per ring with
        records (perf rings in CPU order), undecoded: the fast form of :meth:`read`."""
        now = time.monotonic_ns()
        out: list[RecordBatch] = []
        for ring in self.rings.values():
            if isinstance(ring, K.RingbufRing):
                blob, starts, lengths, stride = ring.read_raw()
                if starts:
                    out.append(RecordBatch(self.name, blob, starts, lengths, self.record,
                                           None, now, stride=stride))  # fmt: skip
                continue
            starts, lengths, times, parts, lost, pos = [], [], [], [], 0, 0
            for kind, t, payload in ring.read():
                if kind == "lost":
                    lost += int(payload)
                    continue
                assert isinstance(payload, bytes)
                parts.append(payload)
                starts.append(pos)
                lengths.append(len(payload))
                times.append(t)
                pos += len(payload)
            if starts or lost:
                out.append(RecordBatch(self.name, b"".join(parts), starts, lengths,
                                       self.record, ring.cpu, now, times, lost))  # fmt: skip
        return out

    def poll_batches(self, timeout: float) -> list[RecordBatch]:
        """Wait up to ``timeout`` seconds for records, then :meth:`read_batches`."""
        self.poller.wait(timeout)
        return self.read_batches()

    def read(self) -> list[Event]:
        """Every record waiting now (no wait), perf rings in CPU order."""
        now = time.monotonic_ns()
        out: list[Event] = []
        for ring in self.rings.values():
            out.extend(self._events(ring, now))
        return out

    def poll(self, timeout: float) -> list[Event]:
        """Wait up to ``timeout`` seconds for records, then return all that wait."""
        self.poller.wait(timeout)  # records may also wait without a wake-up (BPF_RB_NO_WAKEUP)
        return self.read()

    def close(self) -> None:
        for cpu in self._slots:
            try:
                S.map_delete(self.fd, struct.pack("<I", cpu))
            except S.BpfError:
                pass
        self._slots = []
        for ring in self.rings.values():
            ring.close()
        self.rings = {}
        self.poller.close()
        self.fd.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EventReaders:
    """Readers on every event map of one load, records decoded by the object's BTF record
    types (:func:`record_type_of`): the one way the test-run engines
    (:mod:`bpfdsl.runtime.testrun`) and the pytest plugin read what programs send to user
    space.  :meth:`of_kernel`: an :class:`EventStream` per ringbuf/perf_event_array of a
    loaded collection (on a dup of the map's fd, so the collection keeps its own);
    :meth:`of_interp`: the interpreter's in-memory maps, whose perf slots get a reader per
    CPU as the kernel streams fill them (without one, perf_event_output fails with
    -ENOENT on both).  :meth:`read` takes what waits now, never waiting."""

    def __init__(self) -> None:
        self.streams: dict[str, EventStream] = {}  # kernel: map name -> stream
        self.interp: dict[str, tuple[Any, RecordType | None]] = {}  # name -> (map, record)

    @classmethod
    def of_kernel(cls, maps: dict[str, Any], btf: Btf | None) -> EventReaders:
        """Streams on the event maps of ``maps`` (a loaded collection's LoadedMaps).  Raises
        what :class:`EventStream` raises; then nothing stays open."""
        self = cls()
        try:
            for name, lm in maps.items():
                if lm.spec is not None and lm.map_type in EVENT_MAP_TYPES:
                    fd = S.Fd(os.dup(int(lm.fd)))  # the stream owns (closes) its fd
                    self.streams[name] = EventStream(
                        fd, S.map_info(fd), record_type_of(btf, name), name=name
                    )
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def of_interp(cls, maps: dict[str, Any], btf: Btf | None) -> EventReaders:
        """Readers on the event maps of ``maps`` (an InterpCollection's maps)."""
        self = cls()
        for name, m in maps.items():
            if m.map_type in EVENT_MAP_TYPES:
                if m.map_type == MapType.PERF_EVENT_ARRAY:
                    m.open_readers()
                self.interp[name] = (m, record_type_of(btf, name))
        return self

    def names(self) -> list[str]:
        return [*self.streams, *self.interp]

    def read(self, name: str) -> list[Event]:
        """The records sent through event map ``name`` since the last read, oldest first.
        Raises KeyError when ``name`` is no ringbuf/perf_event_array of the load."""
        if name in self.streams:
            return self.streams[name].read()
        if name in self.interp:
            m, record = self.interp[name]
            ring = m.map_type == MapType.RINGBUF  # shared by the CPUs: no cpu, as the kernel's
            return [
                make_event(name, record, data, None if ring else cpu) for cpu, data in m.drain()
            ]
        raise KeyError(f"no ringbuf/perf_event_array map {name!r} in the object")

    def skip_all(self) -> None:
        """Drop the records of every event map sent so far, undecoded (a test run whose
        records nobody shows: the rings must not fill, or the program's reserve fails)."""
        for st in self.streams.values():
            for ring in st.rings.values():
                ring.skip_ready()
        for m, _record in self.interp.values():
            m.drain()

    def skip_positions(self) -> tuple[tuple[Any, int, Any, int, int], ...] | None:
        """The ``skip_position()`` of every kernel ring (:meth:`skip_all` as uint64 copies,
        for :meth:`bpfdsl.kernel.syscall.TestRunner.run_spans`); None when an event map
        is the interpreter's (its rings are not memory to copy)."""
        if self.interp:
            return None
        return tuple(r.skip_position() for st in self.streams.values() for r in st.rings.values())

    def read_all(self) -> list[Event]:
        """The records of every event map since the last read, map by map."""
        return [e for name in self.names() for e in self.read(name)]

    def close(self) -> None:
        for st in self.streams.values():
            st.close()
        self.streams = {}
        self.interp = {}


def _type_name(t: int) -> str:
    try:
        return MapType(t).name.lower()
    except ValueError:
        return str(t)


def _programs_using(map_id: int, path: str | None) -> list[int]:
    """Ids of the programs using map ``map_id``: those pinned next to ``path`` first
    (``DIR/maps/NAME`` -> ``DIR/progs/*``), then any loaded program (bounded walk)."""
    ids: list[int] = []
    if path is not None:
        d = os.path.dirname(path)
        owner = os.path.dirname(d) if os.path.basename(d) == "maps" else d
        progs = os.path.join(owner, "progs")
        for n in sorted(os.listdir(progs)) if os.path.isdir(progs) else ():
            try:
                with S.obj_get(os.path.join(progs, n)) as pfd:
                    if map_id in S.prog_map_ids(pfd):
                        ids.append(int(S.prog_info(pfd).id))
            except S.BpfError:
                continue
    pid: int | None = 0
    for _ in range(_MAX_PROGS):
        try:
            pid = S.get_next_id("prog", pid or 0)
        except S.BpfError:
            break
        if pid is None:
            break
        if pid in ids:
            continue
        try:
            with S.get_fd_by_id("prog", pid) as pfd:
                if map_id in S.prog_map_ids(pfd):
                    ids.append(pid)
        except S.BpfError:
            continue
    return ids


def find_record_type(
    map_id: int, name: str, path: str | None, type_name: str | None = None
) -> RecordType | None:
    """The record type of event map ``map_id`` (kernel name ``name``) from the BTF of a
    program that uses it; ``type_name`` picks a struct by name instead.  None when no
    program's BTF says; UsageError when ``type_name`` is in none of them."""
    seen: set[int] = set()
    for pid in _programs_using(map_id, path):
        try:
            with S.get_fd_by_id("prog", pid) as pfd:
                btf_id = int(S.prog_info(pfd).btf_id)
        except S.BpfError:
            continue
        if not btf_id or btf_id in seen:
            continue
        seen.add(btf_id)
        btf = S.kernel_btf(btf_id)
        if btf is None:
            continue
        tid = struct_named(btf, type_name) if type_name else record_type(btf, name)
        if tid is not None:
            t = btf.resolve(tid)
            return RecordType(btf, tid, t.name or type_name or "record", btf.size_of(tid))
    if type_name:
        raise UsageError(
            error(
                "unknown-type",
                f"no struct {type_name!r} in the BTF of the programs using map {name!r}",
                hint="name a struct of the object that writes the records "
                "(`bpftool btf dump` lists them)",
            )
        )
    return None


def open_events(ref: str, *, type_name: str | None = None, pages: int = 16) -> EventStream:
    """An :class:`EventStream` on the event map ``ref`` names (``PIN_PATH | DIR:NAME |
    id:N``).  Raises UsageError (no such map, not an event map, unknown ``type_name``),
    NoPermission (not root)."""
    target = mapview.resolve_ref(ref)
    try:
        fd = S.get_fd_by_id("map", target) if isinstance(target, int) else S.obj_get(target)
    except S.BpfError as e:
        if isinstance(e, PermissionError):
            raise
        raise UsageError(
            error("bad-map", f"{ref}: cannot open map: {os.strerror(e.errno)}")
        ) from None
    try:
        info = S.map_info(fd)
        name = info.name.decode(errors="replace")
        if int(info.type) not in EVENT_MAP_TYPES:
            raise UsageError(
                error(
                    "not-event-map",
                    f"map {name!r} ({ref}) is of type {_type_name(int(info.type))}, not "
                    "ringbuf or perf_event_array",
                    hint="`bpfdsl map dump` shows the entries of other maps",
                )
            )
        path = target if isinstance(target, str) else None
        record = find_record_type(int(info.id), name, path, type_name)
    except BaseException:
        fd.close()
        raise
    full = ref.rpartition(":")[2] if ":" in ref and not ref.startswith("id:") else name
    return EventStream(fd, info, record, name=full, pages=pages)


DROPS_SUFFIX = "_drops"  # map RING_drops: the records the program could not write to RING


class DropCounter:
    """The drop counter of a ring buffer: the map ``RING_drops`` pinned next to ring
    ``RING`` (an array or per-CPU array of u64, or of u32) that the program increments
    when ``ringbuf_reserve`` or ``ringbuf_output`` fails (the ring was full).  The kernel
    keeps no such count for BPF_MAP_TYPE_RINGBUF (a failed reserve only returns NULL,
    kernel/bpf/ringbuf.c ``__bpf_ringbuf_reserve``), so the program must.  :meth:`read`
    is the sum over its entries and CPUs; :attr:`start` the value when it was opened, so
    ``read() - start`` counts the drops while a reader ran."""

    def __init__(self, fd: S.Fd, path: str) -> None:
        self.fd, self.path = fd, path
        info = S.map_info(fd)
        self.percpu = int(info.type) == MapType.PERCPU_ARRAY
        self.value_size = int(info.value_size)
        self.max_entries = int(info.max_entries)
        self.start = self.read()

    def read(self) -> int:
        """Records dropped so far (all entries, all CPUs)."""
        size = S.percpu_value_size(self.value_size) if self.percpu else self.value_size
        stride = (self.value_size + 7) & ~7 if self.percpu else self.value_size
        fmt = "<Q" if self.value_size == 8 else "<I"
        total = 0
        for k in range(min(self.max_entries, 64)):
            raw = S.map_lookup(self.fd, struct.pack("<I", k), size)
            if raw is None:
                continue
            for off in range(0, len(raw) - self.value_size + 1, stride):
                total += struct.unpack_from(fmt, raw, off)[0]
        return total

    def since_start(self) -> int:
        """Records dropped since this counter was opened."""
        return self.read() - self.start

    def close(self) -> None:
        self.fd.close()


def open_drop_counter(ref: str, ring_name: str) -> DropCounter | None:
    """The :class:`DropCounter` of the ring ``ref`` names (the pinned map
    ``RING_drops`` in the same directory), or None when there is none (an ``id:N`` ref,
    or the program keeps no count) or it is not an array of u32/u64."""
    if ref.startswith("id:"):
        return None
    try:
        target = mapview.resolve_ref(ref)
    except UsageError:
        return None
    if not isinstance(target, str):
        return None
    base = os.path.basename(target)
    path = os.path.join(os.path.dirname(target), base + DROPS_SUFFIX)
    if not os.path.exists(path):
        return None
    try:
        fd = S.obj_get(path)
    except S.BpfError:
        return None
    try:
        info = S.map_info(fd)
        if int(info.type) not in (MapType.ARRAY, MapType.PERCPU_ARRAY) or int(
            info.value_size
        ) not in (4, 8):
            fd.close()
            return None
        return DropCounter(fd, path)
    except BaseException:
        fd.close()
        raise


@dataclass(slots=True)
class Stats:
    """What a stream delivered: records, lost records, frames written to a pcap;
    ``dropped``: records the program could not write (its ``RING_drops`` counter, since
    the stream was opened; None: the program keeps no such count)."""

    records: int = 0
    lost: int = 0
    frames: int = 0
    dropped: int | None = None
    by_cpu: dict[int, int] = field(default_factory=dict)
