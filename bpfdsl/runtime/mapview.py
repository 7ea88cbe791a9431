"""Kernel side: pinned maps read and written by their BTF types (for ``bpfdsl map``).

Takes a map reference (a pin path, ``DIR:NAME`` or ``id:N``), opens it, fetches the
map's BTF from the kernel (BPF_OBJ_GET_INFO_BY_FD on the BTF object) and turns keys and
values to/from Python values with :mod:`bpfdsl.abi.btf.values` (IPs as IPs, be16 in host order,
structs as dicts).  Per-CPU maps hold one value per possible CPU (kernel layout: each
value rounded up to 8 bytes).  Without BTF, keys/values are hex.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from bpfdsl.abi.btf import values as btf_values
from bpfdsl.abi.btf.core import Btf, Kind
from bpfdsl.abi.flags import BPF_ANY, BPF_EXIST, BPF_NOEXIST
from bpfdsl.abi.limits import ENOTSUPP
from bpfdsl.abi.map_types import (
    MapType,
    is_array,
    is_indexed,
    is_percpu,
)
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import syscall
from bpfdsl.runtime.mapfile import ENCODED, ENCODED_MANY, EntryFile, LineEncoder

_MAX_DUMP = 1_000_000  # entries; a dump is bounded even if the map changes under it


def _candidates(directory: str, name: str) -> list[str]:
    return [os.path.join(directory, name), os.path.join(directory, "maps", name)]


def resolve_ref(ref: str) -> str | int:
    """Path of the pinned map named by ``ref``, or its id for ``id:N``.

    ``ref`` := PIN_PATH | DIR:NAME (NAME in DIR or DIR/maps) | id:N.
    Raises UsageError when nothing is pinned there.
    """
    if ref.startswith("id:"):
        try:
            return int(ref[3:])
        except ValueError:
            raise UsageError(error("bad-map", f"{ref!r}: id:N needs a number")) from None
    if os.path.exists(ref) and not os.path.isdir(ref):
        return ref
    directory, colon, name = ref.rpartition(":")
    if colon and directory:
        if not os.path.isdir(directory):
            raise UsageError(
                error(
                    "bad-map",
                    f"no pin dir {directory} (for map {name!r})",
                    hint="`bpfdsl show` lists the pin dirs of attached and loaded objects",
                )
            )
        for path in _candidates(directory, name):
            if os.path.exists(path):
                return path
        have = sorted(list_maps(directory))
        raise UsageError(
            error(
                "bad-map",
                f"no map {name!r} pinned in {directory}",
                hint=f"maps there: {', '.join(have) or 'none'}",
            )
        )
    if os.path.isdir(ref):
        have = sorted(list_maps(ref))
        raise UsageError(
            error(
                "bad-map",
                f"{ref} is a directory; name a map in it as {ref}:NAME",
                hint=f"maps there: {', '.join(have) or 'none'}",
            )
        )
    raise UsageError(
        error(
            "bad-map",
            f"{ref}: no pinned map there",
            hint="give PIN_PATH, DIR:NAME (a `bpfdsl load --pin-dir` dir) or id:N",
        )
    )


def list_maps(directory: str) -> dict[str, str]:
    """Map name -> pin path for pinned maps directly in ``directory`` or ``directory/maps``."""
    out: dict[str, str] = {}
    for d in (directory, os.path.join(directory, "maps")):
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if os.path.isdir(p):
                continue
            try:
                with syscall.obj_get(p) as fd:
                    if syscall.fd_kind(int(fd)) == "map":
                        out.setdefault(n, p)
            except (syscall.BpfError, OSError):
                continue
    return out


# bpf() errnos of a map kind without BPF_MAP_*_BATCH (kernel/bpf/syscall.c BPF_DO_BATCH)
_NO_BATCH = (errno.EINVAL, errno.EOPNOTSUPP, ENOTSUPP)
# lookup errnos of map kinds whose values user space cannot read (xskmap, sockmap...)
_UNREADABLE = (errno.EOPNOTSUPP, errno.EINVAL, ENOTSUPP)


def _parse_untyped(text: str, size: int) -> bytes:
    """Bytes of a key/value without BTF type (cpumap, devmap, sockmap... refuse BTF):
    ``hex:BYTES`` raw, an integer (``5``, ``0x10``) as an unsigned ``size``-byte little
    endian number (the host order of bpfel maps), else hex digits.  Raises ValueError."""
    s = text.strip()
    if s.startswith("hex:"):
        return bytes.fromhex(s[4:].replace(" ", ""))
    try:
        v = int(s.replace("_", ""), 0)
    except ValueError:
        try:
            return bytes.fromhex(s.replace(" ", ""))
        except ValueError:
            raise ValueError(f"expected an integer or hex:BYTES, got {s!r}") from None
    lo, hi = btf_values.int_range(size, signed=False)
    if not lo <= v <= hi:
        raise ValueError(f"{v} does not fit in {size} bytes ({lo}..{hi})")
    return v.to_bytes(size, "little")


class MapCodec:
    """Keys and values of one map as text and Python values, by the map's BTF types: the
    one codec of ``bpfdsl map``, ``bpfdsl run`` (map changes) and the pytest plugin.

    ``btf``: the BTF holding ``key_tid``/``value_tid`` (None or tid 0: untyped, hex and
    little-endian integers).  Per-CPU values are ``ncpu`` values, each ``value_size``
    bytes rounded up to 8 (the kernel's BPF_MAP_LOOKUP_ELEM layout).
    """

    def __init__(
        self,
        name: str,
        map_type: int,
        key_size: int,
        value_size: int,
        btf: Btf | None = None,
        key_tid: int = 0,
        value_tid: int = 0,
        ncpu: int = 1,
    ) -> None:
        self.name = name
        self.type = int(map_type)
        self.key_size = key_size
        self.value_size = value_size
        self.btf = btf
        self.key_tid = key_tid if btf else 0
        self.value_tid = value_tid if btf else 0
        self.percpu = is_percpu(self.type)
        self.ncpu = ncpu if self.percpu else 1
        self.stride = (value_size + 7) & ~7 if self.percpu else value_size
        self._codecs: dict[int, tuple[Callable[[bytes], Any], Callable[[Any], bytes]]] = {}

    def _codec(self, tid: int) -> tuple[Callable[[bytes], Any], Callable[[Any], bytes]]:
        """(decoder, encoder) of type ``tid``, compiled once (btf_values.decoder/encoder:
        format_value's values and encode_value's bytes without the per-call type walk)."""
        got = self._codecs.get(tid)
        if got is None:
            assert self.btf is not None
            got = self._codecs[tid] = (
                btf_values.decoder(self.btf, tid),
                btf_values.encoder(self.btf, tid),
            )
        return got

    @classmethod
    def for_spec(cls, spec: Any, name: str, ncpu: int = 1) -> MapCodec:
        """Codec of map ``name`` of a CollectionSpec (its BTF and key/value type ids)."""
        m = spec.maps[name]
        btf = spec.btf
        return cls(
            name, m.map_type, m.key_size, m.value_size, btf, m.key_type_id, m.value_type_id, ncpu
        )

    @property
    def type_name(self) -> str:
        try:
            return MapType(self.type).name.lower()
        except ValueError:
            return str(self.type)

    # ---- bytes <-> values
    def key_value(self, data: bytes) -> Any:
        if not self.key_tid and is_indexed(self.type) and len(data) == 4:
            return int.from_bytes(data, "little")  # arrays (e.g. .rodata) have u32 indexes
        return self._fmt(self.key_tid, data)

    def value_value(self, data: bytes) -> Any:
        """Decoded value; per-CPU maps give a list (one value per CPU)."""
        if not self.percpu:
            return self._fmt(self.value_tid, data)
        vs = self.value_size
        return [
            self._fmt(self.value_tid, data[i * self.stride : i * self.stride + vs])
            for i in range(self.ncpu)
        ]

    def _fmt(self, tid: int, data: bytes) -> Any:
        if self.btf is None or not tid:
            return data.hex(" ")
        try:
            return self._codec(tid)[0](data)
        except (ValueError, KeyError, IndexError):
            return data.hex(" ")

    def parse_key(self, text: str) -> bytes:
        return self._parse(self.key_tid, text, self.key_size, "key")

    def parse_value(self, text: str) -> bytes:
        """Value bytes from text; for per-CPU maps the same value goes to every CPU."""
        return self.all_cpus(self._parse(self.value_tid, text, self.value_size, "value"))

    def all_cpus(self, one: bytes) -> bytes:
        """``one`` value as BPF_MAP_UPDATE_ELEM takes it: per-CPU maps the same value for
        every CPU (each padded to 8 bytes), other maps ``one`` itself."""
        if not self.percpu:
            return one
        return (one + bytes(self.stride - len(one))) * self.ncpu

    def encode_key(self, obj: Any) -> bytes:
        """Key bytes from a Python value: text as :meth:`parse_key` reads it, or a
        dict/list/int/bool encoded by the BTF type (``btf_values.encode_value``)."""
        return self._encode(self.key_tid, obj, self.key_size, "key")

    def encode_value(self, obj: Any) -> bytes:
        """One value's bytes (not replicated per CPU) from a Python value."""
        return self._encode(self.value_tid, obj, self.value_size, "value")

    def _encode(self, tid: int, obj: Any, size: int, what: str) -> bytes:
        if isinstance(obj, str):
            return self._parse(tid, obj, size, what)
        if self.btf is None or not tid:
            return self._parse(tid, str(obj), size, what)
        try:
            data = self._codec(tid)[1](obj)
        except ValueError as e:
            raise UsageError(
                error("bad-value", f"map {self.name!r}: bad {what} {obj!r}: {e}")
            ) from None
        return self._sized(data, obj, size, what)

    def _parse(self, tid: int, text: str, size: int, what: str) -> bytes:
        try:
            if self.btf is not None and tid:
                data = btf_values.parse_value(self.btf, tid, text)
            else:
                data = _parse_untyped(text, size)
        except ValueError as e:
            hint = (
                None
                if self.btf is not None and tid
                else f"this map has no BTF type for its {what} ({size} bytes): give an "
                "unsigned integer (little endian) or hex bytes, e.g. hex:0a000001"
            )
            raise UsageError(
                error("bad-value", f"map {self.name!r}: bad {what} {text!r}: {e}", hint=hint)
            ) from None
        return self._sized(data, text, size, what)

    def _sized(self, data: bytes, given: Any, size: int, what: str) -> bytes:
        if len(data) != size:
            raise UsageError(
                error(
                    "bad-value",
                    f"map {self.name!r}: {what} {given!r} is "
                    f"{len(data)} bytes, the map wants {size}",
                )
            )
        return data


class MapView(MapCodec):
    """An open map with typed access.  ``name``, ``info`` (syscall.MapInfo), ``btf``.

    Use as a context manager (closes the fd).  Values of per-CPU maps are lists, one per
    possible CPU.  Raises DiagnosticError/UsageError with what to do.
    """

    def __init__(self, ref: str) -> None:
        target = resolve_ref(ref)
        try:
            if isinstance(target, int):
                self.fd = syscall.get_fd_by_id("map", target)
            else:
                self.fd = syscall.obj_get(target)
        except syscall.BpfError as e:
            if isinstance(e, PermissionError):
                raise
            raise UsageError(
                error("bad-map", f"{ref}: cannot open map: {os.strerror(e.errno)}")
            ) from None
        if syscall.fd_kind(int(self.fd)) != "map":
            self.fd.close()
            raise UsageError(error("bad-map", f"{ref} is pinned but is not a map"))
        self.info = syscall.map_info(self.fd)
        self._no_batch = False  # set once the kernel says the kind has no batch operations
        btf = syscall.kernel_btf(int(self.info.btf_id))
        super().__init__(
            self.info.name.decode(errors="replace"),
            int(self.info.type),
            int(self.info.key_size),
            int(self.info.value_size),
            btf,
            int(self.info.btf_key_type_id),
            int(self.info.btf_value_type_id),
            syscall.possible_cpus() if is_percpu(int(self.info.type)) else 1,
        )

    def __enter__(self) -> MapView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.fd.close()

    # ---- kernel operations
    def entries(self, limit: int = _MAX_DUMP) -> Iterator[tuple[bytes, bytes | None]]:
        """(key bytes, value bytes) of each entry (value None for fd-holding map kinds)."""
        vsize = self.stride * self.ncpu
        key: bytes | None = None
        for _ in range(min(limit, _MAX_DUMP)):
            try:
                key = syscall.map_get_next_key(self.fd, key, self.info.key_size)
            except syscall.BpfError as e:
                raise self._err("walking", e) from None
            if key is None:
                return
            readable, val = self._read(key, vsize)
            if not readable:
                yield key, None  # xskmap, sockmap...: values user space cannot read
            elif val is not None:  # ENOENT: an empty cpumap/devmap slot is absent (as bpftool)
                yield key, val

    def _read(self, key: bytes, vsize: int) -> tuple[bool, bytes | None]:
        """(readable, value bytes or None when absent) of ``key``: not readable for the map
        kinds whose values user space cannot read (prog arrays, sockmaps, xskmaps)."""
        try:
            return True, syscall.map_lookup(self.fd, key, vsize)
        except syscall.BpfError as e:
            if e.errno in _UNREADABLE:
                return False, None
            raise self._err("reading", e) from None

    def _lookup_raw(self, key: bytes, vsize: int) -> bytes | None:
        return self._read(key, vsize)[1]

    def lookup(self, key: bytes) -> bytes | None:
        """Value bytes of ``key``, None when absent."""
        return self._lookup_raw(key, self.stride * self.ncpu)

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        try:
            syscall.map_update(self.fd, key, value, flags)
        except syscall.BpfError as e:
            raise self._err("updating", e, key) from None

    def delete(self, key: bytes) -> bool:
        """Delete ``key`` (bytes); False when the map held nothing there
        (:func:`bpfdsl.kernel.syscall.map_delete_slot`)."""
        try:
            return syscall.map_delete_slot(self.fd, key, self.type, self.value_size)
        except syscall.BpfError as e:
            raise self._err("deleting in", e) from None

    def _slot_hint(self, key: bytes | None) -> str:
        """The E2BIG hint of an array-like map: the key is beyond max_entries
        (kernel/bpf/arraymap.c array_map_update_elem), not a full map."""
        n = int(self.info.max_entries)
        where = f"slots 0..{n - 1}" if n else "no slots"
        index = f"key {int.from_bytes(key[:4], 'little')}" if key else "the key"
        return (
            f"{index} is outside the map's {where} (max_entries {n}); "
            f"use a key below {n}, or declare the map with more max_entries"
        )

    def _err(self, what: str, e: syscall.BpfError, key: bytes | None = None) -> Exception:
        if isinstance(e, PermissionError):
            return e
        hint = None
        if e.errno == errno.EINVAL and is_array(self.type):
            hint = "array maps cannot delete entries; set the value to 0 instead"
        elif e.errno == errno.E2BIG and is_indexed(self.type):
            hint = self._slot_hint(key)
        elif e.errno == errno.E2BIG:
            hint = f"the map is full (max_entries {self.info.max_entries})"
        elif e.errno == errno.EEXIST:
            hint = "the key exists (update with --flags any or exist)"
        elif e.errno == errno.ENOENT:
            hint = "the key does not exist"
        return DiagnosticError(
            error("map-failed", f"{what} map {self.name!r}: {os.strerror(e.errno)}", hint=hint)
        )

    # ---- typed access: the control-plane API (``bpfdsl.open_map``)
    def get(self, key: Any) -> Any:
        """The value at ``key`` (a Python value or text, as :meth:`encode_key` takes it),
        decoded by the map's BTF (per-CPU maps: a list, one per possible CPU); None when
        absent.  Raises UsageError for a key the type refuses, DiagnosticError from bpf()."""
        raw = self.lookup(self.encode_key(key))
        return None if raw is None else self.value_value(raw)

    def set(self, key: Any, value: Any, flags: int = BPF_ANY) -> None:
        """Write ``value`` at ``key`` (``flags``: BPF_ANY / BPF_NOEXIST / BPF_EXIST, bpf.h).
        Per-CPU maps take a list (one value per CPU) or one value for every CPU."""
        self.update(self.encode_key(key), self.encode_values(value), flags)

    def remove(self, key: Any) -> bool:
        """Delete the entry at ``key``; False when there was none."""
        return self.delete(self.encode_key(key))

    def encode_values(self, obj: Any) -> bytes:
        """The value bytes BPF_MAP_UPDATE_ELEM takes: per-CPU maps a list of ``ncpu``
        values, or one value replicated to every CPU (each padded to 8 bytes)."""
        if self.percpu and isinstance(obj, list) and len(obj) == self.ncpu and self.value_tid:
            t = self.btf.resolve(self.value_tid) if self.btf is not None else None
            if t is None or t.kind != Kind.ARRAY:  # a list per CPU, not an array value
                return b"".join(self.encode_value(v).ljust(self.stride, b"\0") for v in obj)
        return self.all_cpus(self.encode_value(obj))

    def items(self, *, batch: int = 4096) -> Iterator[tuple[Any, Any]]:
        """Every (key, value) as Python values, read ``batch`` entries per system call
        (BPF_MAP_LOOKUP_BATCH) where the map kind has it, else one by one
        (BPF_MAP_GET_NEXT_KEY + LOOKUP).  Values of fd-holding kinds are None."""
        for k, v in self.raw_items(batch=batch):
            yield self.key_value(k), None if v is None else self.value_value(v)

    def raw_items(self, *, batch: int = 4096) -> Iterator[tuple[bytes, bytes | None]]:
        """(key bytes, value bytes) of every entry, as :meth:`items` reads them."""
        ks, vs = int(self.info.key_size), self.stride * self.ncpu
        token: bytes | None = None
        count = batch
        while True:
            try:
                keys, vals, n, token = syscall.map_lookup_batch(self.fd, token, count, ks, vs)
            except syscall.BpfError as e:
                if e.errno == errno.ENOSPC and count < (1 << 20):
                    count *= 2  # a hash bucket holds more than `count` entries
                    continue
                if token is None and e.errno in _NO_BATCH:
                    yield from self.entries()
                    return
                raise self._err("reading", e) from None
            for i in range(n):
                yield keys[i * ks : (i + 1) * ks], vals[i * vs : (i + 1) * vs]
            if token is None:
                return

    def update_batch(
        self, entries: Iterable[tuple[Any, Any]], flags: int = BPF_ANY, *, batch: int = 4096
    ) -> int:
        """Write every (key, value) of ``entries`` (Python values, as :meth:`set`; an
        ``(mapfile.ENCODED, (key bytes, value bytes))`` entry is the map's bytes already),
        ``batch`` per system call (BPF_MAP_UPDATE_BATCH; one by one for map kinds without
        it).  Returns how many were written.  Every entry is encoded before the first is
        written, so a value the type refuses raises UsageError with nothing written (for
        entries of a file, ``mapfile.EntryFile``, located at the file's line); DiagnosticError from bpf()
        names the failing entry (the entries before it are written, as with ``bpftool
        batch``)."""
        enc_key = self._fast_encoder(self.key_tid, self.key_size, self.encode_key)
        enc_vals = (
            self.encode_values
            if self.percpu
            else self._fast_encoder(self.value_tid, self.value_size, self.encode_value)
        )
        keys: list[bytes] = []
        vals: list[bytes] = []
        try:
            for key, value in entries:
                if key is ENCODED:  # a file's line the map's line encoder took
                    keys.append(value[0])
                    vals.append(value[1])
                elif key is ENCODED_MANY:  # many such lines
                    keys.extend(value[0])
                    vals.extend(value[1])
                else:
                    keys.append(enc_key(key))
                    vals.append(enc_vals(value))
        except DiagnosticError as e:
            raise (entries.locate(e) if isinstance(entries, EntryFile) else e) from None
        done = 0
        for at in range(0, len(keys), batch):
            done += self._write(keys[at : at + batch], vals[at : at + batch], flags, done)
        return done

    def json_line_encoder(self) -> LineEncoder | None:
        """The encoder of JSON lines whose key and value are structs written member by
        member (``btf_values.json_line_encoder``) for ``mapfile.read_entries``; None for
        maps it does not apply to (per-CPU values, no BTF, other key/value types)."""
        if self.btf is None or not self.key_tid or not self.value_tid or self.percpu:
            return None
        return btf_values.json_line_encoder(
            self.btf, self.key_tid, self.value_tid, self.key_size, self.value_size
        )

    def _fast_encoder(
        self, tid: int, size: int, full: Callable[[Any], bytes]
    ) -> Callable[[Any], bytes]:
        """``full`` (:meth:`encode_key`/:meth:`encode_value`) with Python values of a
        typed map going straight to the compiled encoder; text, and anything it refuses,
        through ``full`` (which raises the UsageError)."""
        if self.btf is None or not tid:
            return full
        enc = self._codec(tid)[1]

        def fast(obj: Any) -> bytes:
            if type(obj) is not str:
                try:
                    data = enc(obj)
                except ValueError:
                    return full(obj)
                if len(data) == size:
                    return data
            return full(obj)

        return fast

    def _write(self, keys: list[bytes], vals: list[bytes], flags: int, before: int) -> int:
        # the batch command takes BPF_ANY only (syscall.map_update_batch): NOEXIST/EXIST
        # go element by element, leaving the batch path for later writes
        if not self._no_batch and not flags & (BPF_NOEXIST | BPF_EXIST):
            try:
                return syscall.map_update_batch(
                    self.fd, b"".join(keys), b"".join(vals), len(keys), flags
                )
            except syscall.BpfError as e:
                if e.errno not in _NO_BATCH or e.done:
                    at = min(e.done, len(keys) - 1)
                    raise self._entry_err("updating", e, before + at, keys[at]) from None
                self._no_batch = True
        for i, (k, v) in enumerate(zip(keys, vals, strict=True)):
            try:
                syscall.map_update(self.fd, k, v, flags)
            except syscall.BpfError as e:
                raise self._entry_err("updating", e, before + i, k) from None
        return len(keys)

    def delete_batch(self, keys: Iterable[Any], *, batch: int = 4096) -> int:
        """Delete the entries at ``keys`` (Python values), ``batch`` per system call
        (BPF_MAP_DELETE_BATCH where the kind has it); a key that is absent is skipped.
        Returns how many were deleted."""
        done = 0
        chunk: list[bytes] = []
        todo = iter(keys)
        while True:
            for key in todo:
                chunk.append(self.encode_key(key))
                if len(chunk) >= batch:
                    break
            if not chunk:
                return done
            done += self._delete(chunk)
            chunk = []

    def _delete(self, chunk: list[bytes]) -> int:
        if not self._no_batch:
            try:
                return syscall.map_delete_batch(self.fd, b"".join(chunk), len(chunk))
            except syscall.BpfError as e:
                if e.errno == errno.ENOENT:  # an absent key stops the batch: go on after it
                    return e.done + self._delete_each(chunk[e.done + 1 :])
                if e.errno not in _NO_BATCH:
                    raise self._err("deleting in", e) from None
                self._no_batch = True
        return self._delete_each(chunk)

    def _delete_each(self, chunk: list[bytes]) -> int:
        return sum(1 for k in chunk if self.delete(k))

    def _entry_err(self, what: str, e: syscall.BpfError, index: int, key: bytes) -> Exception:
        """:meth:`_err` naming the entry (1-based, in the order given) and its key."""
        err = self._err(what, e, key)
        if not isinstance(err, DiagnosticError):
            return err
        d = err.diagnostics[0]
        return DiagnosticError(
            error(
                d.code,
                f"{d.message} at entry {index + 1} (key {self.key_value(key)})",
                hint=d.hints[0] if d.hints else None,
            )
        )

    def describe(self) -> dict:
        """Map metadata as a dict (id, name, type, key/value size, max_entries, flags)."""
        return {
            "id": int(self.info.id),
            "name": self.name,
            "type": self.type_name,
            "key_size": int(self.info.key_size),
            "value_size": int(self.info.value_size),
            "max_entries": int(self.info.max_entries),
            "flags": int(self.info.map_flags),
            "btf": self.btf is not None,
            "percpu": self.percpu,
        }


def open_map(ref: str) -> MapView:
    """Open a live map for typed reads and writes: the Python control-plane API.

    ``ref`` := PIN_PATH | DIR:NAME (a ``bpfdsl load``/``attach`` pin dir) | id:N.  Keys and
    values are Python values decoded and encoded by the map's BTF as the kernel holds it --
    the same forms ``bpfdsl map dump --json`` prints and ``map update`` takes (ints; IPv4,
    IPv6 and MAC addresses and prefixes as text, ``be32`` as an IPv4 address ``a.b.c.d``,
    ``be16`` as a host-order number; structs as dicts; per-CPU values as lists)::

        with bpfdsl.open_map("/sys/fs/bpf/acl:rules") as m:
            m.set("10.0.0.0/8", {"action": 1})
            m.update_batch((f"10.{i}.0.0/16", {"action": 2}) for i in range(256))
            for key, value in m.items():      # BPF_MAP_LOOKUP_BATCH, 4096 per call
                ...

    Needs root (CAP_BPF).  Raises UsageError when nothing is pinned at ``ref``,
    PermissionError without the privileges, DiagnosticError from bpf() otherwise.
    """
    return MapView(ref)
