"""An in-memory stand-in for bpf(2), for tests without root (issue #26; aya tests its
loader against a fake ``sys`` the same way).

``with installed() as k:`` routes every command of :func:`bpfdsl.kernel.syscall.sys_bpf`
(the one bpf() choke point), and :func:`~bpfdsl.kernel.syscall.fd_kind`, to a
:class:`FakeKernel` until the block ends; nothing reaches the real kernel.  It models what user space sees of value maps and object bookkeeping, as
kernel/bpf/syscall.c, hashtab.c and arraymap.c define it (6.x):

- BPF_MAP_CREATE (sizes checked as ``map_create``/``array_map_alloc_check`` do),
  LOOKUP/UPDATE/DELETE_ELEM with BPF_ANY/NOEXIST/EXIST, GET_NEXT_KEY (a hash key that is
  absent gives the first key, as ``htab_map_get_next_key``), the LOOKUP/UPDATE/DELETE batch
  commands (``generic_map_*_batch``: ``count`` is how many were done, also on failure;
  ENOENT ends a lookup; an update batch takes BPF_ANY only; a hash lookup batch's
  ENOSPC for a bucket fuller than ``count`` is not modelled), MAP_FREEZE (then user-space writes get EPERM);
- hash tables full at ``max_entries`` (E2BIG; LRU tables evict the least recently used
  entry instead), arrays of ``max_entries`` zeroed values (E2BIG past the end on update,
  ENOENT on lookup, EINVAL on delete, EEXIST for BPF_NOEXIST), per-CPU values of
  ``round_up(value_size, 8) * possible CPUs`` bytes;
- cpumap, devmap and devmap_hash entries as kernel/bpf/cpumap.c and devmap.c take them:
  values of 4 or 8 bytes, the program fd in them resolved to the program's id (what a
  lookup gives back), ENOMEM (cpumap) / EINVAL (devmap) for a program not loaded for
  that map, ENODEV for a CPU beyond the possible ones, EOVERFLOW for a qsize over
  16384, EINVAL for an ifindex the caller's namespace lacks (``interfaces``), qsize 0 /
  ifindex 0 empty the slot; devmaps get BPF_F_RDONLY_PROG in their map_flags;
- other map types keep the bytes written, by index for the array-backed ones
  (``is_indexed``) and by key otherwise: the kernel would resolve the fds in them;
- BPF_PROG_LOAD accepts every program (it is not a verifier: use bpfdsl.checker or the
  kernel) and records its instructions, name, the maps it references (ld_imm64
  BPF_PSEUDO_MAP_FD/VALUE) and the kernel's tag (``bpf_prog_calc_tag``: the first 8
  bytes of the SHA-256 of the instructions with those map fds zeroed, as the 6.18 kernel
  the contract test ran on computes it; older kernels took SHA-1); BPF_BTF_LOAD keeps
  the bytes;
- OBJ_PIN creates a file at the path (EEXIST if there is one, ENOENT without its directory:
  give a temporary directory as the pin root) and OBJ_GET finds the object pinned there
  while the file exists; OBJ_GET_INFO_BY_FD (map, prog, btf), *_GET_NEXT_ID and
  *_GET_FD_BY_ID over every object made;
- BPF_PROG_TEST_RUN's refusals (EINVAL for a cpumap/devmap program, unknown flags, a
  batch size without BPF_F_TEST_XDP_LIVE_FRAMES; E2BIG for a live batch over 256); a run
  that passes them fails with EOPNOTSUPP: the fake runs no program;
- a caller without CAP_BPF (``FakeKernel(privileged=False)``): EPERM for every command;
  the possible CPUs (``possible_cpus``) that :func:`bpfdsl.kernel.syscall.possible_cpus`
  answers while the fake is installed.

Each object gets a real file descriptor (of /dev/null) so that closing it works as for a
kernel object; objects are never freed.  Any other command fails with EOPNOTSUPP.
"""

from __future__ import annotations

import ctypes as C
import errno as E
import hashlib
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from bpfdsl.abi.bpf_attr import (
    BtfInfo,
    BtfLoadAttr,
    GetIdAttr,
    InfoAttr,
    MapBatchAttr,
    MapCreateAttr,
    MapElemAttr,
    MapInfo,
    ObjAttr,
    ProgInfo,
    ProgLoadAttr,
    TestRunAttr,
)
from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import (
    BPF_EXIST,
    BPF_F_NUMA_NODE,
    BPF_F_RDONLY,
    BPF_F_RDONLY_PROG,
    BPF_F_TEST_XDP_LIVE_FRAMES,
    BPF_F_WRONLY,
    BPF_NOEXIST,
)
from bpfdsl.abi.insn import BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
from bpfdsl.abi.limits import TEST_XDP_MAX_BATCH
from bpfdsl.abi.map_types import MapType, is_array, is_hash, is_indexed, is_lru, is_percpu
from bpfdsl.abi.prog_types import AttachType, ProgramType, license_is_gpl_compatible
from bpfdsl.kernel import syscall

INSN_SIZE = 8  # bytes of one struct bpf_insn
LD_IMM64 = 0x18  # BPF_LD | BPF_IMM | BPF_DW: two insn slots


CPUMAP_MAX_QSIZE = 16384  # kernel/bpf/cpumap.c: a larger qsize is EOVERFLOW
# cpumap and devmaps: the map_flags each takes (cpu_map_alloc, DEV_CREATE_FLAG_MASK)
_ENTRY_MAPS: dict[int, int] = {
    MapType.CPUMAP: BPF_F_NUMA_NODE,
    MapType.DEVMAP: BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY,
    MapType.DEVMAP_HASH: BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY,
}


def _fail(err: int) -> OSError:
    return OSError(err, os.strerror(err))


def _read(addr: int, size: int) -> bytes:
    if size and not addr:
        raise _fail(E.EFAULT)
    return C.string_at(addr, size) if size else b""


def _write(addr: int, data: bytes) -> None:
    if data:
        if not addr:
            raise _fail(E.EFAULT)
        C.memmove(addr, data, len(data))


@dataclass(eq=False)
class FakeMap:
    """A map: its creation attributes and entries (key bytes -> value bytes, in the order
    GET_NEXT_KEY walks them; per-CPU values are the whole user-space buffer)."""

    id: int
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int
    name: str
    btf_id: int = 0
    btf_key_type_id: int = 0
    btf_value_type_id: int = 0
    frozen: bool = False
    cpus: int = 1  # possible CPUs of the fake kernel that made it
    entries: OrderedDict[bytes, bytes] = field(default_factory=OrderedDict)

    @property
    def user_value_size(self) -> int:
        """Bytes of a value in user space: per-CPU maps ``round_up(value_size, 8)`` per
        possible CPU (as syscall.percpu_value_size)."""
        if is_percpu(self.map_type):
            return ((self.value_size + 7) & ~7) * self.cpus
        return self.value_size

    def _index(self, key: bytes) -> int:
        return int.from_bytes(key, "little")

    def lookup(self, key: bytes) -> bytes:
        if is_indexed(self.map_type) and self._index(key) >= self.max_entries:
            raise _fail(E.ENOENT)
        if is_array(self.map_type):
            return self.entries.get(key, bytes(self.user_value_size))
        v = self.entries.get(key)
        if v is None:  # (a lookup from user space does not mark an LRU entry used)
            raise _fail(E.ENOENT)
        return v

    def update(self, key: bytes, value: bytes, flags: int) -> None:
        if self.frozen:
            raise _fail(E.EPERM)
        if flags & ~0x7 or (flags & 0x3) == 0x3:  # BPF_ANY/NOEXIST/EXIST (| BPF_F_LOCK)
            raise _fail(E.EINVAL)
        if is_indexed(self.map_type):
            if self._index(key) >= self.max_entries:
                raise _fail(E.E2BIG)
            if is_array(self.map_type) and flags & 0x3 == BPF_NOEXIST:
                raise _fail(E.EEXIST)
            self.entries[key] = value
            return
        present = key in self.entries
        if flags & 0x3 == BPF_NOEXIST and present:
            raise _fail(E.EEXIST)
        if flags & 0x3 == BPF_EXIST and not present:
            raise _fail(E.ENOENT)
        if not present and len(self.entries) >= self.max_entries:
            if not is_lru(self.map_type):
                raise _fail(E.E2BIG)
            self.entries.popitem(last=False)  # the least recently used entry
        self.entries[key] = value
        if is_lru(self.map_type):
            self.entries.move_to_end(key)

    def delete(self, key: bytes) -> None:
        if self.frozen:
            raise _fail(E.EPERM)
        if is_array(self.map_type):
            raise _fail(E.EINVAL)
        if key not in self.entries:
            raise _fail(E.ENOENT)
        del self.entries[key]

    def keys(self) -> list[bytes]:
        """Every key in GET_NEXT_KEY order (arrays, cpumaps and devmaps: every index, as
        ``cpu_map_get_next_key``/``dev_map_get_next_key`` walk empty slots too)."""
        if is_array(self.map_type) or self.map_type in (MapType.CPUMAP, MapType.DEVMAP):
            return [i.to_bytes(4, "little") for i in range(self.max_entries)]
        if is_indexed(self.map_type):
            return sorted(self.entries, key=self._index)
        return list(self.entries)

    def next_key(self, key: bytes | None) -> bytes:
        keys = self.keys()
        if is_indexed(self.map_type):
            i = -1 if key is None else self._index(key)
            later = [k for k in keys if self._index(k) > i] if i < self.max_entries else keys
            if not later:
                raise _fail(E.ENOENT)
            return later[0]
        if key is None or key not in self.entries:
            if not keys:
                raise _fail(E.ENOENT)
            return keys[0]
        at = keys.index(key)
        if at + 1 >= len(keys):
            raise _fail(E.ENOENT)
        return keys[at + 1]


@dataclass(eq=False)
class FakeProg:
    """A loaded program: type, instructions (the bytes given), name, licence, the ids of
    the maps it references and the kernel's 8-byte tag."""

    id: int
    prog_type: int
    insns: bytes
    name: str
    license: str
    expected_attach_type: int
    map_ids: list[int]
    tag: bytes


@dataclass(eq=False)
class FakeBtf:
    """A loaded BTF object: its raw bytes."""

    id: int
    data: bytes


FakeObject = FakeMap | FakeProg | FakeBtf


class FakeKernel:
    """The objects made through the fake bpf(2) (see the module docstring), with
    ``calls``: every command seen, in order.

    ``possible_cpus``: the machine's possible CPUs (per-CPU value sizes, the CPUs a cpumap
    entry may name; :func:`bpfdsl.kernel.syscall.possible_cpus` answers it while
    installed); None: the host's.  ``privileged=False``: a caller without CAP_BPF where
    ``kernel.unprivileged_bpf_disabled`` is 1 or 2 (the default of most distributions):
    every command fails with EPERM, as ``__sys_bpf`` refuses it before looking at it.
    ``interfaces``: ifindex -> name of the network namespace the caller is in (devmap
    entries name them); the default is a fresh namespace's, ``lo`` at ifindex 1.
    """

    def __init__(
        self,
        *,
        possible_cpus: int | None = None,
        privileged: bool = True,
        interfaces: dict[int, str] | None = None,
    ) -> None:
        self.objects: dict[int, FakeObject] = {}  # fd -> object
        self.by_id: dict[tuple[str, int], FakeObject] = {}
        self.pins: dict[str, FakeObject] = {}
        self.calls: list[BpfCmd] = []
        self.cpus = possible_cpus if possible_cpus is not None else syscall.host_possible_cpus()
        self.privileged = privileged
        self.interfaces = dict(interfaces) if interfaces is not None else {1: "lo"}
        self._next_id = 1

    # ---- bookkeeping ----
    def _new_id(self) -> int:
        i, self._next_id = self._next_id, self._next_id + 1
        return i

    def _fd_for(self, obj: FakeObject) -> int:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        self.objects[fd] = obj
        return fd

    def _obj(self, fd: int) -> FakeObject:
        obj = self.objects.get(fd)
        if obj is None:
            raise _fail(E.EBADF)
        return obj

    def _map(self, fd: int) -> FakeMap:
        obj = self._obj(fd)
        if not isinstance(obj, FakeMap):
            raise _fail(E.EINVAL)
        return obj

    @staticmethod
    def _kind(obj: FakeObject) -> str:
        return {FakeMap: "map", FakeProg: "prog", FakeBtf: "btf"}[type(obj)]

    def _register(self, obj: FakeObject) -> int:
        self.by_id[(self._kind(obj), obj.id)] = obj
        return self._fd_for(obj)

    def fd_kind(self, fd: int) -> str:
        """``map``, ``prog``, ``btf`` for a descriptor the fake made, else ``""``."""
        obj = self.objects.get(fd)
        return self._kind(obj) if obj is not None else ""

    def possible_cpus(self) -> int:
        """The possible CPUs of this fake machine (see the class docstring)."""
        return self.cpus

    # ---- the system call ----
    def bpf(self, cmd: BpfCmd, attr: C.Structure) -> int:
        """One bpf(2) command on ``attr`` (the command's ``union bpf_attr`` member, as
        bpfdsl.kernel.syscall builds it): the result, or OSError with the kernel's errno."""
        self.calls.append(cmd)
        if not self.privileged:
            raise _fail(E.EPERM)
        handler = _HANDLERS.get(cmd)
        if handler is None:
            raise _fail(E.EOPNOTSUPP)
        return handler(self, attr)

    def _map_create(self, a: MapCreateAttr) -> int:
        t = int(a.map_type)
        try:
            MapType(t)
        except ValueError:
            raise _fail(E.EINVAL) from None
        if not a.max_entries or (not a.value_size and t != MapType.RINGBUF):
            raise _fail(E.EINVAL)
        if is_indexed(t) and a.key_size != 4:
            raise _fail(E.EINVAL)
        if is_hash(t) and not a.key_size:
            raise _fail(E.EINVAL)
        flags = int(a.map_flags)
        if t in _ENTRY_MAPS:  # cpu_map_alloc, dev_map_alloc_check
            if a.key_size != 4 or a.value_size not in (4, 8) or flags & ~_ENTRY_MAPS[t]:
                raise _fail(E.EINVAL)
            if t != MapType.CPUMAP:
                flags |= BPF_F_RDONLY_PROG  # programs may not write a devmap
        btf = self.objects.get(int(a.btf_fd)) if a.btf_fd else None
        if a.btf_fd and not isinstance(btf, FakeBtf):
            raise _fail(E.EBADF)
        m = FakeMap(
            id=self._new_id(),
            map_type=t,
            key_size=int(a.key_size),
            value_size=int(a.value_size),
            max_entries=int(a.max_entries),
            map_flags=flags,
            name=a.map_name.decode(errors="replace"),
            btf_id=btf.id if btf is not None else 0,
            btf_key_type_id=int(a.btf_key_type_id),
            btf_value_type_id=int(a.btf_value_type_id),
            cpus=self.cpus,
        )
        return self._register(m)

    def _lookup(self, a: MapElemAttr) -> int:
        m = self._map(int(a.map_fd))
        _write(int(a.value), m.lookup(_read(int(a.key), m.key_size)))
        return 0

    def _update(self, a: MapElemAttr) -> int:
        m = self._map(int(a.map_fd))
        key = _read(int(a.key), m.key_size)
        value = _read(int(a.value), m.user_value_size)
        if m.map_type in _ENTRY_MAPS:
            self._entry_update(m, key, value, int(a.flags))
        else:
            m.update(key, value, int(a.flags))
        return 0

    def _entry_update(self, m: FakeMap, key: bytes, value: bytes, flags: int) -> None:
        """A cpumap or devmap entry: ``struct bpf_cpumap_val`` {qsize, prog fd} or
        ``struct bpf_devmap_val`` {ifindex, prog fd}, cut to value_size; the kernel keeps
        the program's id where the fd was (kernel/bpf/cpumap.c cpu_map_update_elem,
        kernel/bpf/devmap.c __dev_map_update_elem / __dev_map_hash_update_elem)."""
        first = int.from_bytes(value[:4], "little")
        fd = int.from_bytes(value[4:8], "little", signed=True) if len(value) >= 8 else 0
        if flags > BPF_EXIST or (m.map_type == MapType.DEVMAP_HASH and not first):
            raise _fail(E.EINVAL)
        if m.map_type == MapType.DEVMAP_HASH:
            present = key in m.entries
            if present and flags & BPF_NOEXIST:
                raise _fail(E.EEXIST)
            stored = self._devmap_val(first, fd)
            if not present and len(m.entries) >= m.max_entries:
                raise _fail(E.E2BIG)
            m.entries[key] = stored[: m.value_size]
            return
        if m._index(key) >= m.max_entries:
            raise _fail(E.E2BIG)
        if flags == BPF_NOEXIST:  # every slot exists
            raise _fail(E.EEXIST)
        if m.map_type == MapType.CPUMAP:
            if first > CPUMAP_MAX_QSIZE:
                raise _fail(E.EOVERFLOW)
            if m._index(key) >= self.cpus:
                raise _fail(E.ENODEV)  # not a possible CPU
            if not first:  # qsize 0: "same as deleting"
                m.entries.pop(key, None)
                return
            # __cpu_map_entry_alloc fails (NULL: ENOMEM) for any program it cannot take
            prog_id = self._entry_prog(fd, AttachType.XDP_CPUMAP, E.ENOMEM) if fd > 0 else 0
            stored = struct.pack("<II", first, prog_id)
        elif not first:  # no device: the slot is emptied; a program needs one
            if fd > 0:
                raise _fail(E.EINVAL)
            m.entries.pop(key, None)
            return
        else:
            stored = self._devmap_val(first, fd)
        m.entries[key] = stored[: m.value_size]

    def _devmap_val(self, ifindex: int, fd: int) -> bytes:
        """``__dev_map_alloc_node``: EINVAL for an ifindex the namespace lacks and for a
        program that is not XDP loaded for BPF_XDP_DEVMAP."""
        if ifindex not in self.interfaces:
            raise _fail(E.EINVAL)
        prog_id = self._entry_prog(fd, AttachType.XDP_DEVMAP, E.EINVAL) if fd > 0 else 0
        return struct.pack("<II", ifindex, prog_id)

    def _entry_prog(self, fd: int, want: AttachType, err: int) -> int:
        """The id of XDP program ``fd`` loaded for ``want``, else OSError ``err``."""
        p = self.objects.get(fd)
        if (
            not isinstance(p, FakeProg)
            or p.prog_type != ProgramType.XDP
            or p.expected_attach_type != want
        ):
            raise _fail(err)
        return p.id

    def _delete(self, a: MapElemAttr) -> int:
        m = self._map(int(a.map_fd))
        key = _read(int(a.key), m.key_size)
        if m.map_type in (MapType.CPUMAP, MapType.DEVMAP):  # an empty slot: still 0
            if m._index(key) >= m.max_entries:
                raise _fail(E.EINVAL)
            m.entries.pop(key, None)
            return 0
        m.delete(key)
        return 0

    def _next_key(self, a: MapElemAttr) -> int:
        m = self._map(int(a.map_fd))
        key = _read(int(a.key), m.key_size) if a.key else None
        _write(int(a.value), m.next_key(key))
        return 0

    def _freeze(self, a: MapElemAttr) -> int:
        self._map(int(a.map_fd)).frozen = True
        return 0

    def _lookup_batch(self, a: MapBatchAttr) -> int:
        m = self._map(int(a.map_fd))
        want = int(a.count)
        if not want or a.elem_flags or a.flags:
            raise _fail(E.EINVAL)
        keys = m.keys() if is_array(m.map_type) else list(m.entries)
        start = int.from_bytes(_read(int(a.in_batch), 8), "little") if a.in_batch else 0
        got = keys[start : start + want]
        ks = b"".join(got)
        vs = b"".join(m.lookup(k) for k in got)
        _write(int(a.keys), ks)
        _write(int(a.values), vs)
        a.count = len(got)
        end = start + len(got)
        _write(int(a.out_batch), end.to_bytes(8, "little"))
        if end >= len(keys):
            raise _fail(E.ENOENT)
        return 0

    def _update_batch(self, a: MapBatchAttr) -> int:
        m = self._map(int(a.map_fd))
        if a.elem_flags:  # BPF_ANY only: BPF_F_LOCK needs a spin lock no fake value has
            raise _fail(E.EINVAL)
        n, ks, vs = int(a.count), m.key_size, m.user_value_size
        keys, values = _read(int(a.keys), n * ks), _read(int(a.values), n * vs)
        for i in range(n):
            try:
                m.update(
                    keys[i * ks : (i + 1) * ks], values[i * vs : (i + 1) * vs], int(a.elem_flags)
                )
            except OSError:
                a.count = i
                raise
        return 0

    def _delete_batch(self, a: MapBatchAttr) -> int:
        m = self._map(int(a.map_fd))
        n, ks = int(a.count), m.key_size
        keys = _read(int(a.keys), n * ks)
        for i in range(n):
            try:
                m.delete(keys[i * ks : (i + 1) * ks])
            except OSError:
                a.count = i
                raise
        return 0

    def _prog_load(self, a: ProgLoadAttr) -> int:
        n = int(a.insn_cnt)
        if not n or n > 1_000_000:
            raise _fail(E.EINVAL if not n else E.E2BIG)
        raw = _read(int(a.insns), n * INSN_SIZE)
        insns = bytearray(raw)  # the copy bpf_prog_calc_tag hashes, map fds zeroed
        map_ids: list[int] = []
        i = 0
        while i < n:
            off = i * INSN_SIZE
            if insns[off] == LD_IMM64 and i + 1 < n:
                src = insns[off + 1] >> 4
                if src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE):
                    fd = int.from_bytes(insns[off + 4 : off + 8], "little", signed=True)
                    mid = self._map(fd).id
                    if mid not in map_ids:
                        map_ids.append(mid)
                    insns[off + 4 : off + 8] = bytes(4)  # bpf_prog_calc_tag zeroes the fd
                i += 2
                continue
            i += 1
        licence = C.string_at(int(a.license)).decode(errors="replace") if a.license else ""
        p = FakeProg(
            id=self._new_id(),
            prog_type=int(a.prog_type),
            insns=raw,
            name=a.prog_name.decode(errors="replace"),
            license=licence,
            expected_attach_type=int(a.expected_attach_type),
            map_ids=map_ids,
            tag=hashlib.sha256(bytes(insns)).digest()[:8],
        )
        return self._register(p)

    def _test_run(self, a: TestRunAttr) -> int:
        """BPF_PROG_TEST_RUN's refusals (kernel/bpf/syscall.c bpf_prog_test_run,
        net/bpf/test_run.c bpf_prog_test_run_xdp); a run that passes them is EOPNOTSUPP:
        the fake runs no program (use bpfdsl.interp)."""
        if bool(a.ctx_size_in) != bool(a.ctx_in) or bool(a.ctx_size_out) != bool(a.ctx_out):
            raise _fail(E.EINVAL)
        p = self._obj(int(a.prog_fd))
        if not isinstance(p, FakeProg):
            raise _fail(E.EINVAL)
        if p.prog_type == ProgramType.XDP:
            if p.expected_attach_type in (AttachType.XDP_DEVMAP, AttachType.XDP_CPUMAP):
                raise _fail(E.EINVAL)
            if a.flags & ~BPF_F_TEST_XDP_LIVE_FRAMES:
                raise _fail(E.EINVAL)
            if a.flags & BPF_F_TEST_XDP_LIVE_FRAMES:
                if a.batch_size > TEST_XDP_MAX_BATCH:
                    raise _fail(E.E2BIG)
            elif a.batch_size:
                raise _fail(E.EINVAL)
        raise _fail(E.EOPNOTSUPP)

    def _btf_load(self, a: BtfLoadAttr) -> int:
        data = _read(int(a.btf), int(a.btf_size))
        if len(data) < 24 or data[:2] != b"\x9f\xeb":  # btf_header: magic 0xeB9F
            raise _fail(E.EINVAL)
        return self._register(FakeBtf(self._new_id(), data))

    def _pin(self, a: ObjAttr) -> int:
        obj = self._obj(int(a.bpf_fd))
        path = C.string_at(int(a.pathname)).decode()
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except OSError as e:
            raise _fail(e.errno or E.EINVAL) from None
        self.pins[os.path.abspath(path)] = obj
        return 0

    def _get(self, a: ObjAttr) -> int:
        path = os.path.abspath(C.string_at(int(a.pathname)).decode())
        obj = self.pins.get(path)
        if obj is None or not os.path.exists(path):
            raise _fail(E.ENOENT)
        return self._fd_for(obj)

    def _info(self, a: InfoAttr) -> int:
        obj = self._obj(int(a.bpf_fd))
        size = int(a.info_len)
        if isinstance(obj, FakeMap):
            out: C.Structure = MapInfo(
                type=obj.map_type, id=obj.id, key_size=obj.key_size,
                value_size=obj.value_size, max_entries=obj.max_entries,
                map_flags=obj.map_flags, name=obj.name.encode()[:15], btf_id=obj.btf_id,
                btf_key_type_id=obj.btf_key_type_id,
                btf_value_type_id=obj.btf_value_type_id,
            )  # fmt: skip
        elif isinstance(obj, FakeProg):
            asked = ProgInfo.from_buffer_copy(
                _read(int(a.info), size).ljust(C.sizeof(ProgInfo), b"\0")
            )
            out = ProgInfo(
                type=obj.prog_type, id=obj.id, xlated_prog_len=len(obj.insns),
                name=obj.name.encode()[:15], nr_map_ids=len(obj.map_ids),
                gpl_compatible=int(license_is_gpl_compatible(obj.license)),
            )  # fmt: skip
            C.memmove(out.tag, obj.tag, 8)
            if asked.map_ids:
                ids = obj.map_ids[: asked.nr_map_ids]
                _write(int(asked.map_ids), b"".join(i.to_bytes(4, "little") for i in ids))
                out.map_ids = asked.map_ids
            if asked.xlated_prog_insns:
                _write(int(asked.xlated_prog_insns), obj.insns[: asked.xlated_prog_len])
                out.xlated_prog_insns = asked.xlated_prog_insns
        else:
            asked_btf = BtfInfo.from_buffer_copy(
                _read(int(a.info), size).ljust(C.sizeof(BtfInfo), b"\0")
            )
            out = BtfInfo(btf_size=len(obj.data), id=obj.id)
            if asked_btf.btf:
                _write(int(asked_btf.btf), obj.data[: asked_btf.btf_size])
                out.btf = asked_btf.btf
        n = min(size, C.sizeof(out))
        _write(int(a.info), bytes(out)[:n])
        a.info_len = n
        return 0

    def _next_id_of(self, kind: str, a: GetIdAttr) -> int:
        later = sorted(i for k, i in self.by_id if k == kind and i > a.start_id)
        if not later:
            raise _fail(E.ENOENT)
        a.next_id = later[0]
        return 0

    def _fd_by_id(self, kind: str, a: GetIdAttr) -> int:
        obj = self.by_id.get((kind, int(a.start_id)))
        if obj is None:
            raise _fail(E.ENOENT)
        return self._fd_for(obj)


_HANDLERS: dict[BpfCmd, Callable[[FakeKernel, Any], int]] = {
    BpfCmd.MAP_CREATE: FakeKernel._map_create,
    BpfCmd.MAP_LOOKUP_ELEM: FakeKernel._lookup,
    BpfCmd.MAP_UPDATE_ELEM: FakeKernel._update,
    BpfCmd.MAP_DELETE_ELEM: FakeKernel._delete,
    BpfCmd.MAP_GET_NEXT_KEY: FakeKernel._next_key,
    BpfCmd.MAP_FREEZE: FakeKernel._freeze,
    BpfCmd.MAP_LOOKUP_BATCH: FakeKernel._lookup_batch,
    BpfCmd.MAP_UPDATE_BATCH: FakeKernel._update_batch,
    BpfCmd.MAP_DELETE_BATCH: FakeKernel._delete_batch,
    BpfCmd.PROG_LOAD: FakeKernel._prog_load,
    BpfCmd.BTF_LOAD: FakeKernel._btf_load,
    BpfCmd.PROG_TEST_RUN: FakeKernel._test_run,
    BpfCmd.OBJ_PIN: FakeKernel._pin,
    BpfCmd.OBJ_GET: FakeKernel._get,
    BpfCmd.OBJ_GET_INFO_BY_FD: FakeKernel._info,
    BpfCmd.PROG_GET_NEXT_ID: lambda k, a: k._next_id_of("prog", a),
    BpfCmd.MAP_GET_NEXT_ID: lambda k, a: k._next_id_of("map", a),
    BpfCmd.BTF_GET_NEXT_ID: lambda k, a: k._next_id_of("btf", a),
    BpfCmd.PROG_GET_FD_BY_ID: lambda k, a: k._fd_by_id("prog", a),
    BpfCmd.MAP_GET_FD_BY_ID: lambda k, a: k._fd_by_id("map", a),
    BpfCmd.BTF_GET_FD_BY_ID: lambda k, a: k._fd_by_id("btf", a),
}


@contextmanager
def installed(kernel: FakeKernel | None = None) -> Iterator[FakeKernel]:
    """Route bpf(2) to ``kernel`` (a new :class:`FakeKernel` when None) inside the block,
    for this process (all threads); the previous backend comes back on exit."""
    k = kernel if kernel is not None else FakeKernel()
    previous = syscall.set_backend(k)
    try:
        yield k
    finally:
        syscall.set_backend(previous)
