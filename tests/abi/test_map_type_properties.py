"""Map-type properties (bpfdsl.abi.map_types: per-CPU, indexed, array, hash...) agree with what the
running kernel does with each map type, and the interpreter's maps agree with both."""

from __future__ import annotations

import ctypes
import errno

import pytest

from bpfdsl.abi.bpf_attr import MapElemAttr
from bpfdsl.abi.btf.core import Btf, BtfType, Kind
from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import BPF_F_NO_PREALLOC
from bpfdsl.abi.map_types import (
    MapType,
    is_array,
    is_hash,
    is_indexed,
    is_percpu,
    takes_btf_key_value,
)
from bpfdsl.interp.maps import make_map
from bpfdsl.kernel import syscall as S
from bpfdsl.testing.pytest_plugin import BpfMap

DATA_MAPS = (
    MapType.ARRAY,
    MapType.PERCPU_ARRAY,
    MapType.HASH,
    MapType.PERCPU_HASH,
    MapType.LRU_HASH,
    MapType.LRU_PERCPU_HASH,
)
# map type -> (key size, value size, max_entries, map_flags) the kernel accepts for it
CREATE = {
    **{t: (4, 4, 4, 0) for t in DATA_MAPS},
    MapType.PROG_ARRAY: (4, 4, 4, 0),
    MapType.PERF_EVENT_ARRAY: (4, 4, 4, 0),
    MapType.CGROUP_ARRAY: (4, 4, 4, 0),
    MapType.LPM_TRIE: (8, 4, 4, BPF_F_NO_PREALLOC),
    MapType.DEVMAP: (4, 4, 4, 0),
    MapType.DEVMAP_HASH: (4, 4, 4, 0),
    MapType.SOCKMAP: (4, 4, 4, 0),
    MapType.SOCKHASH: (4, 4, 4, 0),
    MapType.CPUMAP: (4, 4, 1, 0),
    MapType.XSKMAP: (4, 4, 4, 0),
    MapType.REUSEPORT_SOCKARRAY: (4, 4, 4, 0),
}
SENTINEL = 0xA5


def _create(t: MapType) -> S.Fd:
    key, value, n, flags = CREATE[t]
    return S.map_create(t, key, value, n, map_flags=flags, name="bpfdsl_mtprop")


def _kernel_value_bytes(fd: int, key: bytes) -> int:
    """How many bytes BPF_MAP_LOOKUP_ELEM writes for ``key`` (whose value is all zeros):
    the kernel's user-space value size (kernel/bpf/syscall.c bpf_map_value_size)."""
    k = ctypes.create_string_buffer(key, len(key))
    v = ctypes.create_string_buffer(bytes([SENTINEL]) * 8192, 8192)
    S.sys_bpf(BpfCmd.MAP_LOOKUP_ELEM, MapElemAttr(fd, ctypes.addressof(k), ctypes.addressof(v), 0))
    return v.raw.index(bytes([SENTINEL]))


@pytest.mark.kernel
@pytest.mark.parametrize("t", sorted(CREATE), ids=lambda t: t.name)
def test_indexed_maps_are_the_ones_whose_empty_map_has_key_0(t):
    """The kernel's array-backed maps answer BPF_MAP_GET_NEXT_KEY(NULL) with index 0 even
    when empty; hash-keyed maps have no first key (ENOENT)."""
    with _create(t) as fd:
        first = S.map_get_next_key(fd, None, CREATE[t][0])
    assert (first == bytes(4)) == is_indexed(t)
    assert first in (None, bytes(4))


@pytest.mark.kernel
def test_map_in_map_of_arrays_is_indexed_of_hashes_is_not():
    with S.map_create(MapType.ARRAY, 4, 4, 1, name="bpfdsl_inner") as inner:
        for t in (MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS):
            with S.map_create(t, 4, 4, 4, inner_map_fd=int(inner), name="bpfdsl_outer") as fd:
                assert (S.map_get_next_key(fd, None, 4) == bytes(4)) == is_indexed(t), t.name


@pytest.mark.kernel
@pytest.mark.parametrize("t", DATA_MAPS, ids=lambda t: t.name)
def test_per_cpu_value_layout_matches_the_kernel(t):
    """A 4-byte value reads back as round_up(4, 8) * possible CPUs bytes from a per-CPU map
    and as 4 bytes otherwise; the syscall layer, the interpreter and the test plugin agree."""
    key = bytes(4)
    with _create(t) as fd:
        if is_hash(t):
            S.map_update(fd, key, bytes(8 * S.possible_cpus()))
        got = _kernel_value_bytes(fd, key)
        want = S.percpu_value_size(4) if is_percpu(t) else 4
        assert got == want
        if is_array(t):
            with pytest.raises(S.BpfError) as e:  # arrays have no delete
                S.map_delete(fd, key)
            assert e.value.errno == errno.EINVAL
        else:
            assert S.map_delete(fd, key) is True
    m = make_map("m", t, 4, 4, 4, ncpus=2)
    m.set(0, 7)
    assert isinstance(m.get(0), list) == is_percpu(t)
    assert BpfMap("m", 4, 4, t, 2).percpu == is_percpu(t)


@pytest.mark.kernel
def test_size_only_maps_are_the_ones_the_kernel_refuses_btf_key_value_types_for():
    """A BTF ``int`` as key and value type: the kernel creates the map with it exactly when
    ``takes_btf_key_value`` says so (codegen then writes ``__type(key, T)``, else ``key_size``)."""
    ints = [BtfType(0, Kind.UNKN), BtfType(1, Kind.INT, "int", 1, size=4, encoding=1, bits=32)]
    keyless = {MapType.QUEUE: 0, MapType.STACK: 0, MapType.BLOOM_FILTER: 0}
    btf, _ = S.btf_load(Btf(ints, b"\0int\0").to_bytes())
    with btf, S.map_create(MapType.ARRAY, 4, 4, 1, name="bpfdsl_inner") as inner:
        for t in [*CREATE, MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS, *keyless]:
            if t == MapType.LPM_TRIE:  # 8-byte keys: no 4-byte int for them
                continue
            key = keyless.get(t, 4)
            kw = (
                {"inner_map_fd": int(inner)}
                if t in (MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS)
                else {}
            )
            n = CREATE.get(t, (0, 0, 4))[2]
            S.map_create(t, key, 4, n, name="bpfdsl_plain", **kw).close()  # creatable at all
            try:
                S.map_create(t, key, 4, n, name="bpfdsl_btf", btf_fd=int(btf),
                             btf_key_type_id=1 if key else 0, btf_value_type_id=1, **kw).close()  # fmt: skip
                accepted = True
            except S.BpfError as e:
                assert e.errno in (errno.EINVAL, 524), (t.name, e)  # 524: ENOTSUPP
                accepted = False
            assert accepted == takes_btf_key_value(t), t.name


def test_interp_array_maps_keep_every_index_hash_maps_none():
    for t in DATA_MAPS:
        m = make_map("m", t, 4, 4, 3)
        assert (len(m.keys()) == 3) == is_indexed(t), t.name
        m.set(0, 1)
        assert m.remove(0) is not is_array(t), t.name  # arrays have no delete


def test_percpu_cgroup_storage_values_are_per_cpu_for_the_test_plugin():
    """bpf_map_value_size counts BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE as per-CPU; the pytest
    plugin's map view used to read it as one value."""
    assert is_percpu(MapType.PERCPU_CGROUP_STORAGE)
    assert BpfMap("s", 16, 4, MapType.PERCPU_CGROUP_STORAGE, 4).percpu


def test_socket_maps_store_sockets_alike_in_the_interpreter():
    """An int put into a SOCKMAP or a SOCKHASH names a socket (a program's lookup gives a
    socket reference, as the kernel's PTR_TO_SOCKET), not a 4-byte value."""
    for t in (MapType.SOCKMAP, MapType.SOCKHASH):
        m = make_map("socks", t, 4, 4, 4)
        m.set(1, 42)
        r = m.lookup((1).to_bytes(4, "little"))
        assert r is not None and r.kind == "sock", t.name
