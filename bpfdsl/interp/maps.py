"""In-memory BPF maps for the userspace machine, one class per kernel map behaviour.

Program side (helpers): ``lookup(key, cpu) -> Region | None`` (the element's storage,
shared, so writes through the pointer persist), ``update(key, value, flags, cpu) -> 0 |
-errno`` and ``delete(key) -> 0 | -errno`` with the kernel's flag and error rules
(kernel/bpf/arraymap.c, hashtab.c, lpm_trie.c, devmap.c, cpumap.c, xskmap.c,
net/core/sock_map.c).  User side: ``set``/``get``/``remove``/``items`` with keys and
values as bytes (little endian ints are accepted too); per-CPU values are lists, one per
CPU.  Redirect and socket maps (DEVMAP, DEVMAP_HASH, CPUMAP, XSKMAP, SOCKMAP, SOCKHASH) are
:class:`SlotMap` s: slots a redirect helper looks up, never a program's data.
:func:`make_map` picks the class from ``map_type``.
"""

from __future__ import annotations

import errno
from collections import OrderedDict
from typing import Any

from bpfdsl.abi.flags import (
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_F_NO_PREALLOC,
    BPF_NOEXIST,
    BPF_RINGBUF_HDR_SZ,
)
from bpfdsl.abi.map_types import (
    ARRAY_MAP_TYPES,
    HASH_MAP_TYPES,
    KMALLOC_MAX_SIZE,
    REDIRECT_MAP_TYPES,
    SOCK_MAP_TYPES,
    MapType,
    holds_sockets,
    is_indexed,
    is_lru,
    is_percpu,
)
from bpfdsl.interp.memory import Fault, NotModelled, Ptr, Region

EINVAL, ENOENT, EEXIST, E2BIG, ENOSPC = (
    errno.EINVAL,
    errno.ENOENT,
    errno.EEXIST,
    errno.E2BIG,
    errno.ENOSPC,
)


def as_bytes(x: Any, size: int, what: str = "value") -> bytes:
    """``x`` (bytes, or an int encoded little endian) as exactly ``size`` bytes."""
    if isinstance(x, int):
        return (x & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
    b = bytes(x)
    if len(b) != size:
        raise ValueError(f"{what} has {len(b)} bytes, the map wants {size}")
    return b


class Map:
    """Base: a map's definition (as in ``struct bpf_map_def`` / BTF map) plus storage."""

    percpu = False
    readonly_values = False  # program may not write through a lookup result

    def __init__(
        self,
        name: str,
        map_type: MapType,
        key_size: int,
        value_size: int,
        max_entries: int,
        map_flags: int = 0,
        ncpus: int = 1,
    ) -> None:
        self.name = name
        self.map_type = MapType(map_type)
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries
        self.map_flags = map_flags
        self.ncpus = ncpus
        self.frozen_for_prog = False  # .rodata: BPF_F_RDONLY_PROG

    # ---- helpers of subclasses ----
    def _region(self, data: bytes | None = None) -> Region:
        buf = bytearray(data) if data is not None else bytearray(self.value_size)
        return Region(
            "map_value",
            buf,
            name=f"value of map '{self.name}'",
            writable=not (self.readonly_values or self.frozen_for_prog),
        )

    def _check_flags(self, flags: int) -> int:
        # BPF_F_LOCK needs a bpf_spin_lock in the value, which no modelled map has
        return -EINVAL if flags & BPF_F_LOCK or flags > BPF_EXIST else 0

    # ---- program side ----
    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        """The value storage for ``key`` (on ``cpu`` for per-CPU maps), or None."""
        raise NotImplementedError

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        """BPF_MAP_UPDATE_ELEM: 0 or -errno.  ``cpu``: the program's CPU (per-CPU maps);
        None = user space."""
        return -EINVAL

    def delete(self, key: bytes) -> int:
        """BPF_MAP_DELETE_ELEM: 0 or -errno."""
        return -EINVAL

    # ---- user side ----
    def set(self, key: Any, value: Any, flags: int = 0) -> None:
        """Userspace update; per-CPU maps take one value for all CPUs or a list per CPU."""
        k = as_bytes(key, self.key_size, "key")
        if self.percpu:
            vals = value if isinstance(value, list) else [value] * self.ncpus
            rc = self._set_percpu(k, [as_bytes(v, self.value_size) for v in vals], flags)
        else:
            rc = self.update(k, as_bytes(value, self.value_size), flags, None)
        if rc:
            raise OSError(-rc, f"map '{self.name}': update failed: {errno.errorcode[-rc]}")

    def _set_percpu(self, key: bytes, vals: list[bytes], flags: int) -> int:
        raise NotImplementedError

    def get(self, key: Any) -> bytes | list[bytes] | None:
        """The value (per-CPU: list of values), or None."""
        k = as_bytes(key, self.key_size, "key")
        return self._get(k)

    def _get(self, key: bytes) -> bytes | list[bytes] | None:
        r = self.lookup(key)
        return bytes(r.buf) if r is not None else None

    def remove(self, key: Any) -> bool:
        """Userspace delete; False when the key was absent."""
        return self.delete(as_bytes(key, self.key_size, "key")) == 0

    def keys(self) -> list[bytes]:
        """Every key present (arrays: every index)."""
        raise NotImplementedError

    def count(self) -> int:
        """How many keys :meth:`keys` would list, without listing them."""
        return len(self.keys())

    def items(self) -> list[tuple[bytes, bytes | list[bytes]]]:
        """(key, value) pairs; per-CPU values are lists, one per CPU."""
        out = []
        for k in self.keys():
            v = self._get(k)
            if v is not None:
                out.append((k, v))
        return out

    def kernel_dump(self) -> dict[bytes, bytes]:
        """Contents as ``BPF_MAP_LOOKUP_ELEM`` returns them: per-CPU values concatenated,
        each padded to a multiple of 8 bytes (kernel ``bpf_map_value_size``)."""
        out = {}
        for k, v in self.items():
            if isinstance(v, list):
                pad = (-self.value_size) % 8
                v = b"".join(x + bytes(pad) for x in v)
            out[k] = v
        return out


class ArrayMap(Map):
    """BPF_MAP_TYPE_ARRAY / PERCPU_ARRAY: every index exists, zero-filled, no delete.  An
    index's memory is made on first use, so a large ``max_entries`` costs nothing until
    touched (made eagerly, an object's 2^31-entry array took minutes and gigabytes)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.percpu = is_percpu(self.map_type)
        self.slots: dict[int, list[Region]] = {}

    def _slot(self, i: int) -> list[Region]:
        """The region(s) of index ``i`` (one per CPU when per-CPU), zero-filled when new."""
        regs = self.slots.get(i)
        if regs is None:
            n = self.ncpus if self.percpu else 1
            regs = self.slots[i] = [self._region() for _ in range(n)]
        return regs

    def _index(self, key: bytes) -> int:
        return int.from_bytes(key[:4], "little")

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        i = self._index(key)
        if i >= self.max_entries:
            return None
        return self._slot(i)[cpu if self.percpu else 0]

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if self._check_flags(flags):
            return -EINVAL
        i = self._index(key)
        if i >= self.max_entries:
            return -E2BIG
        if flags & ~BPF_F_LOCK == BPF_NOEXIST:
            return -EEXIST
        self._slot(i)[cpu if (self.percpu and cpu is not None) else 0].buf[:] = value
        return 0

    def _set_percpu(self, key: bytes, vals: list[bytes], flags: int) -> int:
        i = self._index(key)
        if i >= self.max_entries:
            return -E2BIG
        for r, v in zip(self._slot(i), vals, strict=False):
            r.buf[:] = v
        return 0

    def _get(self, key: bytes) -> bytes | list[bytes] | None:
        i = self._index(key)
        if i >= self.max_entries:
            return None
        regs = self.slots.get(i)
        if regs is None:  # never touched: zeros, without making the memory
            zero = bytes(self.value_size)
            return [zero] * self.ncpus if self.percpu else zero
        return [bytes(r.buf) for r in regs] if self.percpu else bytes(regs[0].buf)

    def keys(self) -> list[bytes]:
        return [i.to_bytes(4, "little") for i in range(self.max_entries)]

    def count(self) -> int:
        return self.max_entries  # every index is a key: an array of 2^32 - 1 is not listed


class HashMap(Map):
    """HASH / PERCPU_HASH / LRU_HASH / LRU_PERCPU_HASH (LRU: exact least-recently-used
    eviction; the kernel's per-CPU LRU lists are only approximately LRU)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        t = self.map_type
        self.percpu = is_percpu(t)
        self.lru = is_lru(t)
        self.elems: OrderedDict[bytes, list[Region]] = OrderedDict()
        self.spare: list[Region] | None = None  # the kernel's htab->extra_elems (one CPU's)
        self.free: list[list[Region]] = []  # deleted/freed elements, reused last in first out

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        e = self.elems.get(key)
        if e is None:
            return None
        if self.lru:
            self.elems.move_to_end(key)
        return e[cpu if self.percpu else 0]

    def _make_room(self, key: bytes) -> int:
        if key in self.elems or len(self.elems) < self.max_entries:
            return 0
        if self.lru:
            self.elems.popitem(last=False)
            return 0
        return -E2BIG

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if self._check_flags(flags):
            return -EINVAL
        f = flags & ~BPF_F_LOCK
        old = self.elems.get(key)
        if old is not None and f == BPF_NOEXIST:
            return -EEXIST
        if old is None and f == BPF_EXIST:
            return -ENOENT
        rc = self._make_room(key)
        if rc:
            return rc
        if self.percpu:
            regs = [self._region() for _ in range(self.ncpus)] if old is None else old
            if cpu is None:  # userspace with one value: every CPU
                for r in regs:
                    r.buf[:] = value
            else:
                regs[cpu].buf[:] = value
        else:
            regs = self._replacement(old, value)
        self.elems[key] = regs
        self.elems.move_to_end(key)
        return 0

    def _replacement(self, old: list[Region] | None, value: bytes) -> list[Region]:
        """The element that gets ``value``, as the kernel picks it on one CPU (it never
        writes an element in place, and it reuses memory, so a lookup result held across
        updates or deletes reads what the kernel's would; kernel/bpf/hashtab.c
        alloc_htab_elem): an existing key of a preallocated HASH takes the spare element
        (``htab->extra_elems``) and its old element becomes the spare; otherwise the
        element deleted (or, with BPF_F_NO_PREALLOC, freed) last (the pcpu_freelist and
        bpf_mem_alloc free lists are last in first out), else new memory.  LRU maps: new
        memory (their free lists are not modelled)."""
        if self.lru:
            return [self._region(value)]
        if old is not None and not self.map_flags & BPF_F_NO_PREALLOC:
            new = self.spare or [self._region()]
            self.spare = old
        else:
            new = self.free.pop() if self.free else [self._region()]
            if old is not None:  # BPF_F_NO_PREALLOC: the old element is freed
                self.free.append(old)
        new[0].buf[:] = value
        return new

    def _set_percpu(self, key: bytes, vals: list[bytes], flags: int) -> int:
        rc = self.update(key, vals[0], flags, None)
        if rc == 0:
            for r, v in zip(self.elems[key], vals, strict=False):
                r.buf[:] = v
        return rc

    def delete(self, key: bytes) -> int:
        e = self.elems.pop(key, None)
        if e is None:
            return -ENOENT
        if not (self.lru or self.percpu):
            self.free.append(e)  # reused by the next new element (see _replacement)
        return 0

    def _get(self, key: bytes) -> bytes | list[bytes] | None:
        e = self.elems.get(key)
        if e is None:
            return None
        return [bytes(r.buf) for r in e] if self.percpu else bytes(e[0].buf)

    def keys(self) -> list[bytes]:
        return list(self.elems)


class LpmTrieMap(Map):
    """LPM_TRIE: key = u32 prefixlen (host order) + address bytes (network order);
    lookup gives the entry with the longest prefix <= the key's prefixlen that matches."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.max_prefixlen = (self.key_size - 4) * 8
        self.by_len: dict[int, dict[int, tuple[bytes, Region]]] = {}
        self.lens: list[int] = []  # prefix lengths present, longest first

    def _split(self, key: bytes) -> tuple[int, int]:
        plen = int.from_bytes(key[:4], "little")
        return plen, int.from_bytes(key[4:], "big")

    def _masked(self, addr: int, plen: int) -> int:
        shift = self.max_prefixlen - plen
        return (addr >> shift) << shift

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        plen, addr = self._split(key)
        for n in self.lens:
            if n <= plen:
                hit = self.by_len[n].get(self._masked(addr, n))
                if hit is not None:
                    return hit[1]
        return None

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if self._check_flags(flags):
            return -EINVAL
        plen, addr = self._split(key)
        if plen > self.max_prefixlen:
            return -EINVAL
        m = self._masked(addr, plen)
        cur = self.by_len.get(plen, {}).get(m)
        f = flags & ~BPF_F_LOCK
        if cur is not None and f == BPF_NOEXIST:
            return -EEXIST
        if cur is None and f == BPF_EXIST:
            return -ENOENT
        if cur is None and sum(len(d) for d in self.by_len.values()) >= self.max_entries:
            return -ENOSPC
        # the kernel keeps the key bytes as given (unmasked) and matches on the prefix
        self.by_len.setdefault(plen, {})[m] = (bytes(key), self._region(value))
        self.lens = sorted((n for n, d in self.by_len.items() if d), reverse=True)
        return 0

    def delete(self, key: bytes) -> int:
        plen, addr = self._split(key)
        d = self.by_len.get(plen, {})
        if d.pop(self._masked(addr, plen), None) is None:
            return -ENOENT
        self.lens = sorted((n for n, d in self.by_len.items() if d), reverse=True)
        return 0

    def _get(self, key: bytes) -> bytes | None:
        # a user-space lookup matches like the program's: the kernel's BPF_MAP_LOOKUP_ELEM
        # calls the same trie_lookup_elem (kernel/bpf/lpm_trie.c), longest prefix wins
        hit = self.lookup(key)
        return bytes(hit.buf) if hit is not None else None

    def keys(self) -> list[bytes]:
        return [norm for n in self.lens for norm, _ in self.by_len[n].values()]


class ProgArrayMap(Map):
    """BPF_MAP_TYPE_PROG_ARRAY: slot index -> a program (any object the tail call helper
    can run: the collection puts its programs there, from the object's ``.maps`` slots
    or :meth:`set_program`).  Programs never read it; ``bpf_tail_call`` jumps through it
    (kernel/bpf/arraymap.c prog_array_map_ops)."""

    readonly_values = True

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.slots: dict[int, Any] = {}

    def program(self, index: int) -> Any:
        """The program in slot ``index`` (u32), or None (an empty or out-of-range slot)."""
        return self.slots.get(index) if 0 <= index < self.max_entries else None

    def set_program(self, index: int, prog: Any) -> None:
        """Userspace: put ``prog`` into slot ``index`` (raises OSError E2BIG past the end)."""
        if not 0 <= index < self.max_entries:
            raise OSError(E2BIG, f"map '{self.name}': slot {index} is past max_entries")
        self.slots[index] = prog

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        raise NotModelled(f"map '{self.name}' (PROG_ARRAY) holds programs, not values")

    def delete(self, key: bytes) -> int:
        return 0 if self.slots.pop(int.from_bytes(key[:4], "little"), None) is not None else -ENOENT

    def _get(self, key: bytes) -> Any:
        return self.slots.get(int.from_bytes(key[:4], "little"))

    def keys(self) -> list[bytes]:
        return [k.to_bytes(4, "little") for k in sorted(self.slots)]


class UnsupportedMap(Map):
    """A declared map of a kind the interpreter does not model (QUEUE, STACK_TRACE, ...):
    the object still loads; only a program that passes it to a helper, or a user-side
    access, fails, with a message naming the map and its kind."""

    def what(self, use: str) -> str:
        return (
            f"map '{self.name}' ({self.map_type.name}) is not modelled by the interpreter"
            f" ({use}); run this program on the kernel (--engine kernel)"
        )

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        raise NotModelled(self.what("map lookup"))

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if cpu is None:
            raise ValueError(self.what("map update"))
        raise NotModelled(self.what("map update"))

    def delete(self, key: bytes) -> int:
        raise NotModelled(self.what("map delete"))

    def get(self, key: Any) -> bytes | list[bytes] | None:
        raise ValueError(self.what("map get"))

    def remove(self, key: Any) -> bool:
        raise ValueError(self.what("map remove"))

    def keys(self) -> list[bytes]:
        return []


class Reservation(Region):
    """A ring buffer reservation: the record's bytes until submit/discard (``owner``: its
    :class:`EventMap`); pointers into it go stale when it ends (the verifier releases
    the reference)."""

    __slots__ = ("owner",)
    owner: Any  # the EventMap the record belongs to (set by the reserving helper)

    def _check(self, p: Ptr, off: int, size: int) -> int:
        if p.gen != self.gen:
            raise Fault(
                f"use of {self.name} after bpf_ringbuf_submit/discard: the record belongs "
                "to user space now"
            )
        return super()._check(p, off, size)


class EventMap(Map):
    """Events to user space: a ring buffer (RINGBUF) or a perf event array
    (PERF_EVENT_ARRAY).  Programs write records (helpers of
    :mod:`bpfdsl.interp.helpers_events`); user space takes them with :meth:`drain`, each
    ``(cpu, bytes)``, in the ring's order: a reservation takes its place in the ring when
    it is reserved, not when it is submitted (a record output while it is open comes
    after it), and the reader stops at one still open (its header's BUSY bit, as
    libbpf's ringbuf_process_ring); a discarded one is skipped.

    Ring buffer (kernel/bpf/ringbuf.c): records of ``round_up(len + 8, 8)`` bytes (8-byte
    header) stay until drained, and the producer may run at most ``max_entries - 1`` bytes
    ahead of the consumer (``__bpf_ringbuf_reserve``); a record past that fails (reserve:
    NULL, output: -EAGAIN), as when user space reads too slowly.
    Perf event array: a slot per CPU (``max_entries`` 0: every CPU, as the loader sizes
    it) that holds a reader's perf event or nothing: a write to an empty slot fails with
    -ENOENT, past ``max_entries`` with -E2BIG (``__bpf_perf_event_output``), as on the
    kernel before user space opens its rings; :meth:`open_readers` fills the slots."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.readers: set[int] = set()  # perf event array: CPUs whose slot has a reader
        # in ring order: [cpu, bytes (None: open or discarded), open?, size in bytes]
        self.records: list[list[Any]] = []
        self.used = 0  # ring buffer: bytes taken by undrained records and reservations
        # id(region) -> (reservation, its entry of ``records``)
        self.open: dict[int, tuple[Region, list[Any]]] = {}

    @staticmethod
    def slot_size(n: int) -> int:
        return (n + BPF_RINGBUF_HDR_SZ + 7) // 8 * 8

    # ---- program side ----
    def reserve(self, size: int, cpu: int) -> Region | None:
        """bpf_ringbuf_reserve: a fresh writable region of ``size`` bytes, or None when
        the ring has no room for it."""
        need = self.slot_size(size)
        if self.used + need > self.max_entries - 1:
            return None
        self.used += need
        r = Reservation("ringbuf", bytearray(size), name=f"reservation in ringbuf '{self.name}'")
        r.owner = self
        entry = [cpu, None, True, size]
        self.records.append(entry)
        self.open[id(r)] = (r, entry)
        return r

    def end(self, region: Region, submit: bool) -> bool:
        """bpf_ringbuf_submit/discard of a reservation; False when ``region`` is none
        (or was ended already).  The region's pointers go stale (its ``gen`` moves)."""
        entry = self.open.pop(id(region), None)
        if entry is None:
            return False
        r, rec = entry
        r.gen += 1  # like the verifier's release: older pointers fault
        rec[2] = False
        if submit:
            rec[1] = bytes(r.buf)
        return True

    def output(self, data: bytes, cpu: int) -> int:
        """bpf_ringbuf_output / bpf_perf_event_output of ``data``: 0 or -errno."""
        if self.map_type == MapType.RINGBUF:
            need = self.slot_size(len(data))
            if self.used + need > self.max_entries - 1:
                return -errno.EAGAIN
            self.used += need
        elif self.max_entries and cpu >= self.max_entries:
            return -E2BIG
        elif cpu not in self.readers:
            return -ENOENT
        self.records.append([cpu, bytes(data), False, len(data)])
        return 0

    def open_readers(self, cpus: list[int] | None = None) -> None:
        """Perf event array: put a reader in the slots of ``cpus`` (default: every CPU),
        as ``bpfdsl events`` / libbpf's perf_buffer do with one perf event per CPU."""
        n = self.max_entries or self.ncpus
        self.readers.update(range(min(n, self.ncpus)) if cpus is None else cpus)

    # ---- user side ----
    def drain(self) -> list[tuple[int, bytes]]:
        """The records written since the last drain, ``(cpu, bytes)`` each, oldest first
        (a perf event array record carries the packet bytes appended to it)."""
        n = next((i for i, e in enumerate(self.records) if e[2]), len(self.records))
        done, self.records = self.records[:n], self.records[n:]
        if self.map_type == MapType.RINGBUF:  # the consumer moved past what it read
            self.used = sum(self.slot_size(e[3]) for e in self.records)
        return [(e[0], e[1]) for e in done if e[1] is not None]

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        raise NotModelled(f"map '{self.name}' ({self.map_type.name}) has no elements to look up")

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if cpu is None:
            raise ValueError(
                f"map '{self.name}' ({self.map_type.name}) holds events, not entries: "
                "read them with drain()"
            )
        return -EINVAL

    def get(self, key: Any) -> bytes | list[bytes] | None:
        raise ValueError(f"map '{self.name}' holds events, not entries: read them with drain()")

    def keys(self) -> list[bytes]:
        return []


_CLASSES: dict[int, type[Map]] = {
    **dict.fromkeys(ARRAY_MAP_TYPES, ArrayMap),
    **dict.fromkeys(HASH_MAP_TYPES, HashMap),
    MapType.LPM_TRIE: LpmTrieMap,
    MapType.RINGBUF: EventMap,
    MapType.PERF_EVENT_ARRAY: EventMap,
    MapType.PROG_ARRAY: ProgArrayMap,
}


class SlotMap(Map):
    """Redirect/socket maps: DEVMAP, DEVMAP_HASH, CPUMAP, XSKMAP, SOCKMAP, SOCKHASH.

    Entries hold bytes (devmap: ``struct bpf_devmap_val`` = ifindex[, prog]; cpumap:
    ``struct bpf_cpumap_val`` = qsize[, prog]) or, for xskmap/sockmap/sockhash, any
    Python object naming the socket (set with :meth:`set_socket`).  An entry counts as
    empty where the kernel would have none: devmap ifindex 0, cpumap qsize 0.
    """

    readonly_values = True

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        t = self.map_type
        self.indexed = is_indexed(t)
        self.slots: dict[bytes, Any] = {}

    def _key_ok(self, key: bytes) -> bool:
        return not self.indexed or int.from_bytes(key[:4], "little") < self.max_entries

    def target(self, key: bytes) -> Any:
        """The entry for ``key`` if it is usable as a redirect target, else None."""
        if not self._key_ok(key):
            return None
        v = self.slots.get(key)
        if isinstance(v, (bytes, bytearray)) and int.from_bytes(v[:4], "little") == 0:
            return None  # devmap ifindex 0 / cpumap qsize 0: no entry
        return v

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        v = self.target(key)
        if v is None:
            return None
        if isinstance(v, (bytes, bytearray)):
            return self._region(bytes(v))
        if self.map_type == MapType.XSKMAP:  # struct bpf_xdp_sock { __u32 queue_id; }
            q = getattr(v, "queue_id", 0)
            return Region("xsk", bytearray(q.to_bytes(4, "little")), writable=False)
        return Region("sock", bytearray(80), name="socket", writable=False)

    def update(self, key: bytes, value: Any, flags: int = 0, cpu: int | None = None) -> int:
        if self._check_flags(flags):
            return -EINVAL
        if not self._key_ok(key):
            return -E2BIG
        present = self.slots.get(key) is not None
        # devmap/cpumap are arrays of always-present slots: BPF_NOEXIST is EEXIST and
        # BPF_EXIST always fine (dev_map_update_elem, cpu_map_update_elem); sockmap and
        # xskmap slots are empty until a socket goes in (sock_map_update_common,
        # xsk_map_update_elem), like the hash kinds
        arrays = self.map_type in (MapType.DEVMAP, MapType.CPUMAP)
        if flags == BPF_NOEXIST and (present or arrays):
            return -EEXIST
        if flags == BPF_EXIST and not present and not arrays:
            return -ENOENT
        self.slots[key] = value
        return 0

    def set_socket(self, key: Any, sock: Any) -> None:
        """Userspace: put a socket (any object; ``.queue_id`` for xskmap) at ``key``."""
        rc = self.update(as_bytes(key, self.key_size, "key"), sock)
        if rc:
            raise OSError(-rc, f"map '{self.name}': update failed")

    def set(self, key: Any, value: Any, flags: int = 0) -> None:
        if isinstance(value, int) and not holds_sockets(self.map_type):
            value = as_bytes(value, self.value_size)
        elif isinstance(value, (bytes, bytearray)):
            value = as_bytes(value, self.value_size)
        rc = self.update(as_bytes(key, self.key_size, "key"), value, flags)
        if rc:
            raise OSError(-rc, f"map '{self.name}': update failed")

    def delete(self, key: bytes) -> int:
        return 0 if self.slots.pop(key, None) is not None else -ENOENT

    def _get(self, key: bytes) -> Any:
        return self.slots.get(key)

    def keys(self) -> list[bytes]:
        return list(self.slots)


_SLOT_TYPES = REDIRECT_MAP_TYPES | SOCK_MAP_TYPES  # entries are devices, CPUs or sockets


def make_map(
    name: str,
    map_type: int,
    key_size: int,
    value_size: int,
    max_entries: int,
    map_flags: int = 0,
    ncpus: int = 1,
) -> Map:
    """An empty in-memory map of ``map_type``; kinds not modelled (QUEUE, STACK_TRACE,
    ...) give an :class:`UnsupportedMap` placeholder that fails only when used; a type
    number the kernel headers do not know raises ValueError."""
    try:
        kind = MapType(map_type)
    except ValueError:
        raise ValueError(f"map '{name}': map type {map_type} is unknown") from None
    for what, size in (("key", key_size), ("value", value_size)):
        if size > KMALLOC_MAX_SIZE:  # the kernel refuses it at BPF_MAP_CREATE (E2BIG)
            raise ValueError(
                f"map '{name}': {what} size {size} bytes is more than the kernel allows "
                f"({KMALLOC_MAX_SIZE} bytes, KMALLOC_MAX_SIZE)"
            )
    cls = SlotMap if kind in _SLOT_TYPES else _CLASSES.get(kind)
    if cls is None:
        cls = UnsupportedMap
    return cls(name, kind, key_size, value_size, max_entries, map_flags, ncpus)
