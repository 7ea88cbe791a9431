"""Map kinds: ``enum bpf_map_type``, one set per map-type property with a predicate each,
and the kernel's rules at BPF_MAP_CREATE (:data:`MAP_LIMITS`, :func:`map_create_problems`).

Values from include/uapi/linux/bpf.h (checked against this machine's /sys/kernel/btf/vmlinux
by tests/abi/test_uapi.py); the rules cite the kernel source they come from.
"""

from __future__ import annotations

import errno
from dataclasses import KW_ONLY, dataclass
from enum import IntEnum
from typing import Final

from bpfdsl.abi.flags import (
    BPF_F_ACCESS_MASK,
    BPF_F_INNER_MAP,
    BPF_F_MMAPABLE,
    BPF_F_NO_COMMON_LRU,
    BPF_F_NO_PREALLOC,
    BPF_F_NUMA_NODE,
    BPF_F_PRESERVE_ELEMS,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_WRONLY,
    BPF_F_WRONLY_PROG,
    BPF_F_ZERO_SEED,
)
from bpfdsl.abi.limits import MAX_BPF_STACK


class MapType(IntEnum):
    """``enum bpf_map_type``."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33


# ---- map-type properties: one set per property (kernel source named), a predicate each ----
# Predicates take the kernel's number (an int or a MapType) and are False for unknown types.

PERCPU_MAP_TYPES = frozenset(
    {
        MapType.PERCPU_HASH,
        MapType.PERCPU_ARRAY,
        MapType.LRU_PERCPU_HASH,
        MapType.PERCPU_CGROUP_STORAGE,
    }
)
"""One value per possible CPU: user space reads and writes ``round_up(value_size, 8) *
possible CPUs`` bytes (kernel/bpf/syscall.c ``bpf_map_value_size``); programs see their CPU's."""

HASH_MAP_TYPES = frozenset(
    {MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH}
)
"""Hash tables of values (kernel/bpf/hashtab.c ``htab_map_ops`` & co.): an update creates
the entry (``BPF_NOEXIST`` inserts), delete removes it."""

LRU_MAP_TYPES = frozenset({MapType.LRU_HASH, MapType.LRU_PERCPU_HASH})
"""Hash tables that evict the least recently used entry when full (kernel/bpf/bpf_lru_list.c)."""

ARRAY_MAP_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
"""Arrays of values (kernel/bpf/arraymap.c ``array_map_ops``, ``percpu_array_map_ops``):
every index exists from creation, zero-filled; delete fails with EINVAL."""

INDEXED_MAP_TYPES = frozenset(
    {
        MapType.ARRAY,
        MapType.PERCPU_ARRAY,
        MapType.PROG_ARRAY,
        MapType.PERF_EVENT_ARRAY,
        MapType.CGROUP_ARRAY,
        MapType.ARRAY_OF_MAPS,
        MapType.DEVMAP,
        MapType.SOCKMAP,
        MapType.CPUMAP,
        MapType.XSKMAP,
        MapType.REUSEPORT_SOCKARRAY,
    }
)
"""Keys are u32 indexes below ``max_entries`` (the array-backed maps: kernel/bpf/arraymap.c,
devmap.c ``dev_map_ops``, cpumap.c, xskmap.c, net/core/sock_map.c ``sock_map_ops``,
net/core/sock_reuseport.c); their hash-keyed siblings (DEVMAP_HASH, SOCKHASH) are not."""

DEVMAP_TYPES = frozenset({MapType.DEVMAP, MapType.DEVMAP_HASH})
"""Maps of devices (kernel/bpf/devmap.c): ``struct bpf_devmap_val`` values, read-only for
programs (``dev_map_alloc`` sets BPF_F_RDONLY_PROG), broadcast redirect flags."""

SOCK_MAP_TYPES = frozenset({MapType.SOCKMAP, MapType.SOCKHASH})
"""Maps of sockets for sk_msg/sk_skb redirects (net/core/sock_map.c)."""

REDIRECT_MAP_TYPES = frozenset(
    {MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP}
)
"""Targets of ``bpf_redirect_map`` from XDP (kernel/bpf/verifier.c
``check_map_func_compatibility``, BPF_FUNC_redirect_map)."""

SOCKET_MAP_TYPES = frozenset({MapType.XSKMAP}) | SOCK_MAP_TYPES
"""Values are sockets: user space stores a socket fd, a program's lookup gives an opaque
socket reference (xskmap: ``struct bpf_xdp_sock``, only ``queue_id`` readable)."""

MAP_IN_MAP_TYPES = frozenset({MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS})
"""Values are inner maps (kernel/bpf/map_in_map.c); the definition names an inner map."""

SIZE_ONLY_MAP_TYPES: frozenset[int] = frozenset(
    MapType[n]
    for n in "PERF_EVENT_ARRAY CGROUP_ARRAY STACK_TRACE ARRAY_OF_MAPS HASH_OF_MAPS DEVMAP "
    "DEVMAP_HASH CPUMAP XSKMAP SOCKMAP SOCKHASH QUEUE STACK ARENA".split()
)
"""Map types the kernel creates only without BTF key/value types (``map_check_no_btf``, or
no ``map_check_btf`` for keyless maps; the list libbpf's ``bpf_object__create_map`` drops
the BTF ids for): libbpf-style C declares them with ``__uint(key_size, N)`` /
``__uint(value_size, N)``."""


def is_percpu(map_type: int) -> bool:
    """Values are per CPU (:data:`PERCPU_MAP_TYPES`)."""
    return map_type in PERCPU_MAP_TYPES


def is_hash(map_type: int) -> bool:
    """A hash table of values whose entries updates create (:data:`HASH_MAP_TYPES`)."""
    return map_type in HASH_MAP_TYPES


def is_lru(map_type: int) -> bool:
    """An LRU hash table (:data:`LRU_MAP_TYPES`)."""
    return map_type in LRU_MAP_TYPES


def is_array(map_type: int) -> bool:
    """A preallocated array of values (:data:`ARRAY_MAP_TYPES`)."""
    return map_type in ARRAY_MAP_TYPES


def is_indexed(map_type: int) -> bool:
    """Keys are u32 indexes below max_entries (:data:`INDEXED_MAP_TYPES`)."""
    return map_type in INDEXED_MAP_TYPES


def is_devmap(map_type: int) -> bool:
    """DEVMAP or DEVMAP_HASH (:data:`DEVMAP_TYPES`)."""
    return map_type in DEVMAP_TYPES


def is_sockmap(map_type: int) -> bool:
    """SOCKMAP or SOCKHASH (:data:`SOCK_MAP_TYPES`)."""
    return map_type in SOCK_MAP_TYPES


def holds_sockets(map_type: int) -> bool:
    """Values are sockets (:data:`SOCKET_MAP_TYPES`)."""
    return map_type in SOCKET_MAP_TYPES


def lookup_is_readonly(map_type: int) -> bool:
    """A program may not write through its ``bpf_map_lookup_elem`` result: devmap values
    (``dev_map_alloc`` sets BPF_F_RDONLY_PROG) and socket references (:data:`SOCKET_MAP_TYPES`)."""
    return map_type in DEVMAP_TYPES or map_type in SOCKET_MAP_TYPES


def takes_btf_key_value(map_type: int) -> bool:
    """The kernel accepts BTF key/value type ids for it (not in :data:`SIZE_ONLY_MAP_TYPES`)."""
    return map_type not in SIZE_ONLY_MAP_TYPES


def is_map_in_map(map_type: int) -> bool:
    """ARRAY_OF_MAPS or HASH_OF_MAPS (:data:`MAP_IN_MAP_TYPES`)."""
    return map_type in MAP_IN_MAP_TYPES


EMPTY_SLOT_DELETE_ERRNO: Final[dict[int, int]] = {
    MapType.DEVMAP: 0,  # kernel/bpf/devmap.c dev_map_delete_elem: xchg(NULL), return 0
    MapType.CPUMAP: 0,  # kernel/bpf/cpumap.c cpu_map_delete_elem: __cpu_map_entry_replace(NULL)
    MapType.XSKMAP: 0,  # kernel/bpf/xskmap.c xsk_map_delete_elem: xchg(NULL), return 0
    MapType.SOCKMAP: errno.EINVAL,  # net/core/sock_map.c __sock_map_delete: no socket there
}
"""What BPF_MAP_DELETE_ELEM of an empty slot (a key below max_entries) returns for the map
kinds where it is not ENOENT: 0 (success) or the errno.  For these, whether a slot was
filled shows only by looking it up first (:func:`empty_slot_delete_errno`)."""


def empty_slot_delete_errno(map_type: int) -> int | None:
    """:data:`EMPTY_SLOT_DELETE_ERRNO` of ``map_type``; None when its delete of an absent key
    says ENOENT (every other kind: arraymap.c refuses deletes with EINVAL anyway)."""
    return EMPTY_SLOT_DELETE_ERRNO.get(map_type)


# ---- map types: the kernel's rules at BPF_MAP_CREATE (one table) ----
# Sizes in bytes.  Constants of the x86-64 / arm64 (4 KiB pages) kernels bpfdsl targets:
PAGE_SIZE = 4096  # bytes (x86-64, arm64 with 4 KiB pages)
PCPU_MIN_UNIT_SIZE = 32 << 10  # include/linux/percpu.h: a per-CPU value, round_up(size, 8)
KMALLOC_MAX_SIZE: Final = 4 << 20  # include/linux/slab.h: 1 << (MAX_PAGE_ORDER 10 + PAGE_SHIFT 12)
HTAB_ELEM_SIZE = 48  # sizeof(struct htab_elem), kernel/bpf/hashtab.c (no lock debugging)
HTAB_BUCKET_SIZE = 16  # sizeof(struct bucket) / struct bpf_shtab_bucket (no lock debugging)
LPM_DATA_SIZE_MAX = 256  # kernel/bpf/lpm_trie.c: address bytes of an LPM key
LPM_NODE_SIZE = 24  # sizeof(struct lpm_trie_node)
# The largest max_entries a BTF-defined map can state: libbpf's ``__uint(max_entries, N)`` is
# ``int (*max_entries)[N]`` and the kernel refuses BTF whose array is 4 GiB or more
# (kernel/bpf/btf.c btf_array_resolve: "Array size overflows U32_MAX").
BTF_MAX_ENTRIES = (1 << 30) - 1
U32_MAX = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class MapLimits:
    """What BPF_MAP_CREATE accepts for one map type (the ``*_map_alloc_check`` / ``*_alloc``
    functions of ``source`` in the kernel tree).

    ``flags``: the map_flags the type accepts (its ``*_CREATE_FLAG_MASK``); ``required``: the
    ones it needs (lpm_trie: BPF_F_NO_PREALLOC).  ``key_size`` / ``value_size``: the accepted
    sizes in bytes (a ``range`` or a tuple of sizes); ``elem_max``: the largest key_size +
    value_size (None: no joint bound).  ``max_entries``: the largest the kernel's own rules
    allow (memory aside; None: no rule beyond u32, or a host-dependent one).  Per-CPU values
    (:func:`is_percpu`) are also bound by PCPU_MIN_UNIT_SIZE after rounding up to 8."""

    map_type: MapType
    source: str
    flags: int
    key_size: range | tuple[int, ...]
    value_size: range | tuple[int, ...]
    _: KW_ONLY
    required: int = 0
    elem_max: int | None = None
    max_entries: int | None = None
    ring_pages: bool = False
    max_entries_optional: bool = False


_ANY_SIZE = range(1, 1 << 31)  # value_size > INT_MAX: E2BIG (array_map_alloc_check)
_HTAB_FLAGS = BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK | BPF_F_ZERO_SEED
# key_size + value_size >= KMALLOC_MAX_SIZE - sizeof(struct htab_elem): E2BIG
_HTAB_ELEM_MAX = KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE - 1
# roundup_pow_of_two(max_entries) buckets must be <= U32_MAX / sizeof(bucket) (hashtab: E2BIG,
# sock_hash_alloc: EINVAL): the largest such power of two, 2**27
_HTAB_MAX_ENTRIES = 1 << ((U32_MAX // HTAB_BUCKET_SIZE).bit_length() - 1)
# array_map_alloc_check + fd_array_map_alloc_check: no *_PROG flags, no BPF_F_INNER_MAP
# (checked on the running kernel by tests/test_map_limits.py)
_FD_ARRAY_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY | BPF_F_PRESERVE_ELEMS
_DEV_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY  # DEV_CREATE_FLAG_MASK
_SOCK_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY  # SOCK_CREATE_FLAG_MASK


def _htab(map_type: MapType, flags: int) -> MapLimits:
    return MapLimits(map_type, "kernel/bpf/hashtab.c htab_map_alloc_check", flags, _ANY_SIZE,
                     _ANY_SIZE, elem_max=_HTAB_ELEM_MAX, max_entries=_HTAB_MAX_ENTRIES)  # fmt: skip


MAP_LIMITS: dict[int, MapLimits] = {  # keys: MapType
    MapType.HASH: _htab(MapType.HASH, _HTAB_FLAGS),
    MapType.PERCPU_HASH: _htab(MapType.PERCPU_HASH, _HTAB_FLAGS & ~BPF_F_NUMA_NODE),
    # LRU maps are always preallocated (BPF_F_NO_PREALLOC: ENOTSUPP)
    MapType.LRU_HASH: _htab(
        MapType.LRU_HASH, _HTAB_FLAGS & ~BPF_F_NO_PREALLOC | BPF_F_NO_COMMON_LRU
    ),
    MapType.LRU_PERCPU_HASH: _htab(
        MapType.LRU_PERCPU_HASH,
        _HTAB_FLAGS & ~(BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE) | BPF_F_NO_COMMON_LRU,
    ),  # fmt: skip
    MapType.ARRAY: MapLimits(
        MapType.ARRAY,
        "kernel/bpf/arraymap.c array_map_alloc_check",
        BPF_F_NUMA_NODE | BPF_F_MMAPABLE | BPF_F_ACCESS_MASK | BPF_F_INNER_MAP,
        (4,),
        _ANY_SIZE,
    ),  # fmt: skip
    MapType.PERCPU_ARRAY: MapLimits(
        MapType.PERCPU_ARRAY,
        "kernel/bpf/arraymap.c array_map_alloc_check",
        BPF_F_ACCESS_MASK,
        (4,),
        _ANY_SIZE,
    ),  # fmt: skip
    MapType.LPM_TRIE: MapLimits(
        MapType.LPM_TRIE,
        "kernel/bpf/lpm_trie.c trie_alloc",
        BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK,
        range(4 + 1, 4 + LPM_DATA_SIZE_MAX + 1),  # u32 prefixlen + 1..256 address bytes
        range(1, KMALLOC_MAX_SIZE - LPM_DATA_SIZE_MAX - LPM_NODE_SIZE + 1),
        required=BPF_F_NO_PREALLOC,
    ),  # fmt: skip
    MapType.DEVMAP: MapLimits(
        MapType.DEVMAP, "kernel/bpf/devmap.c dev_map_init_map", _DEV_FLAGS, (4,), (4, 8)
    ),
    # n_buckets = roundup_pow_of_two(max_entries) must not overflow u32 (EINVAL)
    MapType.DEVMAP_HASH: MapLimits(
        MapType.DEVMAP_HASH,
        "kernel/bpf/devmap.c dev_map_init_map",
        _DEV_FLAGS,
        (4,),
        (4, 8),
        max_entries=1 << 31,
    ),  # fmt: skip
    # max_entries > NR_CPUS: E2BIG; host-dependent, so the loader clamps it (FIELD-BUGS B09)
    MapType.CPUMAP: MapLimits(
        MapType.CPUMAP, "kernel/bpf/cpumap.c cpu_map_alloc", BPF_F_NUMA_NODE, (4,), (4, 8)
    ),
    MapType.XSKMAP: MapLimits(
        MapType.XSKMAP, "kernel/bpf/xskmap.c xsk_map_alloc", _DEV_FLAGS, (4,), (4,)
    ),
    MapType.SOCKMAP: MapLimits(
        MapType.SOCKMAP, "net/core/sock_map.c sock_map_alloc", _SOCK_FLAGS, (4,), (4, 8)
    ),
    MapType.SOCKHASH: MapLimits(
        MapType.SOCKHASH,
        "net/core/sock_map.c sock_hash_alloc",
        _SOCK_FLAGS,
        range(1, MAX_BPF_STACK + 1),
        (4, 8),
        max_entries=_HTAB_MAX_ENTRIES,
    ),  # fmt: skip
    # key and value size 0; max_entries = bytes of the ring (RINGBUF_CREATE_FLAG_MASK)
    MapType.RINGBUF: MapLimits(
        MapType.RINGBUF,
        "kernel/bpf/ringbuf.c ringbuf_map_alloc",
        BPF_F_NUMA_NODE,
        (0,),
        (0,),
        ring_pages=True,
    ),  # fmt: skip
    # values are perf event fds (4 bytes); BPF_F_PRESERVE_ELEMS only on this type
    MapType.PERF_EVENT_ARRAY: MapLimits(
        MapType.PERF_EVENT_ARRAY,
        "kernel/bpf/arraymap.c fd_array_map_alloc_check",
        _FD_ARRAY_FLAGS,
        (4,),
        (4,),
        max_entries_optional=True,
    ),  # fmt: skip
}

_FLAG_NAMES = {
    BPF_F_NO_PREALLOC: "BPF_F_NO_PREALLOC", BPF_F_NO_COMMON_LRU: "BPF_F_NO_COMMON_LRU",
    BPF_F_NUMA_NODE: "BPF_F_NUMA_NODE", BPF_F_RDONLY: "BPF_F_RDONLY",
    BPF_F_WRONLY: "BPF_F_WRONLY", BPF_F_ZERO_SEED: "BPF_F_ZERO_SEED",
    BPF_F_RDONLY_PROG: "BPF_F_RDONLY_PROG", BPF_F_WRONLY_PROG: "BPF_F_WRONLY_PROG",
    BPF_F_MMAPABLE: "BPF_F_MMAPABLE", BPF_F_PRESERVE_ELEMS: "BPF_F_PRESERVE_ELEMS",
    BPF_F_INNER_MAP: "BPF_F_INNER_MAP",
}  # fmt: skip


def _sizes(allowed: range | tuple[int, ...]) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start} to {allowed.stop - 1} bytes"
    return " or ".join(map(str, allowed)) + " bytes"


def map_create_problems(
    map_type: int, key_size: int, value_size: int, max_entries: int, map_flags: int
) -> list[tuple[str, str]]:
    """What BPF_MAP_CREATE would refuse in these attributes, by :data:`MAP_LIMITS`:
    ``[(attribute, message)]`` with attribute one of ``"flags"``, ``"key"``, ``"value"``,
    ``"max_entries"``; empty when the kernel's rules accept them (memory aside) or the map
    type is not in the table.  Sizes in bytes."""
    lim = MAP_LIMITS.get(map_type)
    if lim is None:
        return []
    name = MapType(map_type).name.lower()
    out = []
    for bit, flag in _FLAG_NAMES.items():
        if map_flags & bit and not lim.flags & bit:
            lru = map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH)
            if bit == BPF_F_NO_PREALLOC and lru:
                why = "LRU maps are always preallocated (BPF_MAP_CREATE fails with ENOTSUPP)"
            else:
                why = "BPF_MAP_CREATE fails with EINVAL"
            out.append(("flags", f"{name} maps do not take {flag}: {why}"))
        elif lim.required & bit and not map_flags & bit:
            out.append(("flags", f"{name} maps need {flag} (BPF_MAP_CREATE fails with EINVAL)"))
    if key_size not in lim.key_size:
        out.append(("key", f"{name} keys are {_sizes(lim.key_size)}, not {key_size}"))
    if value_size not in lim.value_size:
        out.append(("value", f"{name} values are {_sizes(lim.value_size)}, not {value_size}"))
    elif is_percpu(map_type) and (value_size + 7) // 8 * 8 > PCPU_MIN_UNIT_SIZE:
        out.append(("value", f"{name} values are at most {PCPU_MIN_UNIT_SIZE} bytes per CPU "
                             f"(PCPU_MIN_UNIT_SIZE), not {value_size}"))  # fmt: skip
    if lim.elem_max is not None and key_size + value_size > lim.elem_max:
        out.append(("value", f"{name} key and value together are at most {lim.elem_max} "
                             f"bytes, not {key_size + value_size}"))  # fmt: skip
    if max_entries == 0 and not lim.max_entries_optional:
        out.append(("max_entries", f"{name} maps need max_entries of at least 1"))
    elif lim.ring_pages and (max_entries & (max_entries - 1) or max_entries % PAGE_SIZE):
        out.append(("max_entries", f"{name} maps need max_entries (the ring's size in bytes) "
                                   f"to be a power of 2 and a multiple of the page size "
                                   f"({PAGE_SIZE}), not {max_entries}"))  # fmt: skip
    elif lim.max_entries is not None and max_entries > lim.max_entries:
        out.append(("max_entries", f"{name} maps hold at most {lim.max_entries} entries "
                                   f"(2**{lim.max_entries.bit_length() - 1}), not {max_entries}"))  # fmt: skip
    return out
