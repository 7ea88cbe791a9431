"""Deleting a cpumap or devmap slot says what happened (issue #26 review): the kernel's
delete of an array-like slot succeeds whether or not the slot was filled
(kernel/bpf/cpumap.c cpu_map_delete_elem, kernel/bpf/devmap.c dev_map_delete_elem), so
`cpumap delete` / `devmap delete` report an empty slot as "was not set", not "removed",
and `map delete` as "not found" (a sockmap's EINVAL for an empty slot too);
and a slot beyond the map's max_entries as created (a cpumap is clamped to the possible
CPUs, FIELD-BUGS B09) is refused naming the slots the map has, not as "the kernel refused
the entry value"."""

from __future__ import annotations

import errno
import json
import shutil
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from support.paths import PROGS, ROOT

from bpfdsl.abi.map_types import MapType
from bpfdsl.diagnostics import UsageError
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import cpumap_delete, cpumap_set, create_cpumap, possible_cpus
from bpfdsl.runtime.devmap import devmap_delete, devmap_set
from bpfdsl.runtime.xsk import xsk_map_delete

pytestmark = pytest.mark.kernel


def test_the_kernel_deletes_an_empty_cpumap_slot_without_error() -> None:
    """The premise: BPF_MAP_DELETE_ELEM on an empty cpumap slot returns 0."""
    fd, _ = create_cpumap("slotdel_cm", 1)
    with fd:
        assert S.map_delete(fd, struct.pack("<I", 0)) is True


def test_cpumap_delete_tells_an_empty_slot_from_a_filled_one() -> None:
    fd, _ = create_cpumap("slotdel_cm", 64)  # clamped to the possible CPUs
    with fd:
        assert cpumap_delete(fd, 0) is False
        cpumap_set(fd, 0, 64)
        assert cpumap_delete(fd, 0) is True
        assert cpumap_delete(fd, 0) is False
        assert S.map_lookup(fd, struct.pack("<I", 0), 8) is None


def test_cpumap_delete_beyond_the_clamped_slots_names_them() -> None:
    n = possible_cpus()
    fd, _ = create_cpumap("slotdel_cm", 64)
    with fd, pytest.raises(UsageError) as ei:
        cpumap_delete(fd, n + 3, map_name="cpu_map")
    d = ei.value.diagnostics[0]
    assert d.code == "cpumap-cpu"
    assert f"cpumap 'cpu_map': CPU {n + 3} is outside the map's slots 0..{n - 1}" in d.message


def test_devmap_delete_tells_an_empty_slot_from_a_filled_one() -> None:
    with S.map_create(MapType.DEVMAP, 4, 8, 4, name="slotdel_dm") as fd:
        assert S.map_delete(fd, struct.pack("<I", 2)) is True  # the kernel: 0 when empty
        assert devmap_delete(fd, 2) is False
        assert devmap_set(fd, 2, 1) == 1  # ifindex 1: lo
        assert devmap_delete(fd, 2) is True
        assert devmap_delete(fd, 2) is False
        with pytest.raises(UsageError) as ei:
            devmap_delete(fd, 4, map_name="tx_ports")
        assert "devmap 'tx_ports': slot 4 is outside the map's slots 0..3" in str(ei.value)


def test_devmap_hash_delete_of_an_absent_key_is_false() -> None:
    with S.map_create(MapType.DEVMAP_HASH, 4, 8, 4, name="slotdel_dh") as fd:
        assert devmap_delete(fd, 1000) is False
        assert devmap_set(fd, 1000, 1) == 1
        assert devmap_delete(fd, 1000) is True


def _bpfdsl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args], capture_output=True, text=True, timeout=60,
        cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def pin() -> Iterator[str]:
    """progs/xdp_cpumap_steer.bpfd loaded by `bpfdsl load` into a pin dir (unloaded after)."""
    pin = f"/sys/fs/bpf/bpfdsl_slotdel_{uuid.uuid4().hex[:8]}"
    try:
        r = _bpfdsl("load", str(PROGS / "xdp_cpumap_steer.bpfd"), "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        yield pin
    finally:
        _bpfdsl("unload", pin)
        shutil.rmtree(pin, ignore_errors=True)


def test_cli_cpumap_delete_says_was_not_set_and_refuses_a_slot_it_lacks(pin: str) -> None:
    n = possible_cpus()
    r = _bpfdsl("cpumap", "delete", f"{pin}:cpu_map", "0")
    assert r.returncode == 0 and "CPU 0 was not set" in r.stdout, r.stdout + r.stderr
    r = _bpfdsl("cpumap", "set", f"{pin}:cpu_map", "0", "--qsize", "64")
    assert r.returncode == 0, r.stderr
    r = _bpfdsl("-j", "cpumap", "delete", f"{pin}:cpu_map", "0")
    assert json.loads(r.stdout) == {"map": "cpu_map", "cpu": 0, "deleted": True}
    r = _bpfdsl("cpumap", "delete", f"{pin}:cpu_map", str(n + 3))
    assert r.returncode == 2 and "error[cpumap-cpu]" in r.stderr
    assert f"slots 0..{n - 1} (max_entries {n} as created)" in r.stderr
    assert f"pick a CPU below {n}" in r.stderr


def test_sockmap_delete_of_an_empty_slot_is_false_not_einval() -> None:
    with S.map_create(MapType.SOCKMAP, 4, 8, 4, name="slotdel_sm") as fd:
        with pytest.raises(S.BpfError) as ei:  # the premise: the kernel says EINVAL
            S.map_delete(fd, struct.pack("<I", 1))
        assert ei.value.errno == errno.EINVAL
        assert S.map_delete_slot(fd, struct.pack("<I", 1), MapType.SOCKMAP, 8) is False


def test_xskmap_delete_beyond_its_slots_is_refused() -> None:
    with S.map_create(MapType.XSKMAP, 4, 4, 2, name="slotdel_xm") as fd:
        assert xsk_map_delete(fd, 1) is True  # empty now; the kernel does not say more
        with pytest.raises(UsageError) as ei:
            xsk_map_delete(fd, 2, map_name="xsks")
        assert ei.value.diagnostics[0].code == "xskmap-queue"
        assert "xskmap 'xsks': queue 2 is outside the map's slots 0..1" in str(ei.value)


def test_cli_map_delete_of_an_empty_cpumap_slot_is_not_found(pin: str) -> None:
    r = _bpfdsl("map", "delete", f"{pin}/maps/cpu_map", "0")
    assert r.returncode == 1 and "error[key-not-found]" in r.stderr, r.stdout + r.stderr
    r = _bpfdsl("cpumap", "set", f"{pin}:cpu_map", "0", "--qsize", "64")
    assert r.returncode == 0, r.stderr
    r = _bpfdsl("map", "delete", f"{pin}/maps/cpu_map", "0")
    assert r.returncode == 0 and "deleted" in r.stdout, r.stdout + r.stderr
    assert json.loads(_bpfdsl("-j", "cpumap", "show", f"{pin}:cpu_map").stdout) == []
