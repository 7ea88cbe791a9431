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

from bpfdsl.abi.uapi import (
    ARRAY_MAP_TYPES,
    BPF_EXIST,
    BPF_F_LOCK,
    BPF_NOEXIST,
    HASH_MAP_TYPES,
    REDIRECT_MAP_TYPES,
    SOCK_MAP_TYPES,
    MapType,
    holds_sockets,
    is_indexed,
    is_lru,
    is_percpu,
)
from bpfdsl.interp.memory import NotModelled, Region

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
    """BPF_MAP_TYPE_ARRAY / PERCPU_ARRAY: preallocated, zero-filled, no delete."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.percpu = is_percpu(self.map_type)
        n = self.ncpus if self.percpu else 1
        self.slots = [[self._region() for _ in range(n)] for _ in range(self.max_entries)]

    def _index(self, key: bytes) -> int:
        return int.from_bytes(key[:4], "little")

    def lookup(self, key: bytes, cpu: int = 0) -> Region | None:
        i = self._index(key)
        if i >= self.max_entries:
            return None
        return self.slots[i][cpu if self.percpu else 0]

    def update(self, key: bytes, value: bytes, flags: int = 0, cpu: int | None = None) -> int:
        if self._check_flags(flags):
            return -EINVAL
        i = self._index(key)
        if i >= self.max_entries:
            return -E2BIG
        if flags & ~BPF_F_LOCK == BPF_NOEXIST:
            return -EEXIST
        self.slots[i][cpu if (self.percpu and cpu is not None) else 0].buf[:] = value
        return 0

    def _set_percpu(self, key: bytes, vals: list[bytes], flags: int) -> int:
        i = self._index(key)
        if i >= self.max_entries:
            return -E2BIG
        for r, v in zip(self.slots[i], vals, strict=False):
            r.buf[:] = v
        return 0

    def _get(self, key: bytes) -> bytes | list[bytes] | None:
        i = self._index(key)
        if i >= self.max_entries:
            return None
        regs = self.slots[i]
        return [bytes(r.buf) for r in regs] if self.percpu else bytes(regs[0].buf)

    def keys(self) -> list[bytes]:
        return [i.to_bytes(4, "little") for i in range(self.max_entries)]


class HashMap(Map):
    """HASH / PERCPU_HASH / LRU_HASH / LRU_PERCPU_HASH (LRU: exact least-recently-used
    eviction; the kernel's per-CPU LRU lists are only approximately LRU)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        t = self.map_type
        self.percpu = is_percpu(t)
        self.lru = is_lru(t)
        self.elems: OrderedDict[bytes, list[Region]] = OrderedDict()

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
            regs = [self._region(value)]  # the kernel replaces the element (new memory)
        self.elems[key] = regs
        self.elems.move_to_end(key)
        return 0

    def _set_percpu(self, key: bytes, vals: list[bytes], flags: int) -> int:
        rc = self.update(key, vals[0], flags, None)
        if rc == 0:
            for r, v in zip(self.elems[key], vals, strict=False):
                r.buf[:] = v
        return rc

    def delete(self, key: bytes) -> int:
        return 0 if self.elems.pop(key, None) is not None else -ENOENT

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
        plen, addr = self._split(key)
        hit = self.by_len.get(plen, {}).get(self._masked(addr, plen))
        return bytes(hit[1].buf) if hit else None

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
    """A declared map of a kind the interpreter does not model (RINGBUF, ...):
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


_CLASSES: dict[int, type[Map]] = {
    **dict.fromkeys(ARRAY_MAP_TYPES, ArrayMap),
    **dict.fromkeys(HASH_MAP_TYPES, HashMap),
    MapType.LPM_TRIE: LpmTrieMap,
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
    """An empty in-memory map of ``map_type``; kinds not modelled (RINGBUF, ...) give an :class:`UnsupportedMap` placeholder that fails only when used; a type
    number the kernel headers do not know raises ValueError."""
    try:
        kind = MapType(map_type)
    except ValueError:
        raise ValueError(f"map '{name}': map type {map_type} is unknown") from None
    cls = SlotMap if kind in _SLOT_TYPES else _CLASSES.get(kind)
    if cls is None:
        cls = UnsupportedMap
    return cls(name, kind, key_size, value_size, max_entries, map_flags, ncpus)
