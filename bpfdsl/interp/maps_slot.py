"""Redirect and socket maps of the userspace machine: DEVMAP, DEVMAP_HASH, CPUMAP,
XSKMAP, SOCKMAP, SOCKHASH (kernel/bpf/devmap.c, cpumap.c, net/xdp/xskmap.c,
net/core/sock_map.c): slots a redirect helper looks up, never a program's data."""

from __future__ import annotations

from typing import Any

from bpfdsl.abi.uapi import BPF_EXIST, BPF_NOEXIST, MapType, holds_sockets, is_indexed
from bpfdsl.interp.maps import E2BIG, EEXIST, EINVAL, ENOENT, Map, as_bytes
from bpfdsl.interp.memory import Region


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
