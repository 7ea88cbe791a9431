"""`bpfdsl map dump` / `map update` on array-like maps (new-user review): an empty
cpumap slot (lookup ENOENT) is absent, not "<not readable>", and is not counted (as
`bpftool map dump`); an array update past max_entries names the slot range (the kernel's
E2BIG, kernel/bpf/arraymap.c array_map_update_elem), while a full hash still says full."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from support.paths import ROOT

from bpfdsl.abi.map_types import MapType
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import cpumap_set, create_cpumap, possible_cpus

pytestmark = pytest.mark.kernel


def _bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def pin() -> Iterator[str]:
    path = f"/sys/fs/bpf/mapdump_{uuid.uuid4().hex[:10]}"
    try:
        yield path
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_cpumap_dump_lists_only_the_set_cpu(pin: str) -> None:
    if possible_cpus() < 2:
        pytest.skip("needs 2 possible CPUs for an empty slot")
    fd, _ = create_cpumap("mapdump_cm", 64)
    with fd:
        cpumap_set(fd, 0, 64)
        S.obj_pin(fd, pin)
    r = _bpfdsl("map", "dump", pin)
    assert r.returncode == 0, r.stderr
    assert "<not readable>" not in r.stdout
    assert "\n1 entry\n" in r.stdout
    assert "bpfdsl cpumap show" in r.stdout
    r = _bpfdsl("map", "dump", pin, "--json")
    assert r.returncode == 0, r.stderr
    entries = json.loads(r.stdout)["entries"]
    assert [e["key"] for e in entries] == [0]


def test_array_update_past_the_end_names_the_slots(pin: str) -> None:
    with S.map_create(MapType.ARRAY, 4, 8, 64, name="mapdump_arr") as fd:
        S.obj_pin(fd, pin)
    r = _bpfdsl("map", "update", pin, "64", "1")
    assert r.returncode != 0
    assert "key 64 is outside the map's slots 0..63 (max_entries 64)" in r.stderr
    assert "the map is full" not in r.stderr
    assert _bpfdsl("map", "update", pin, "63", "1").returncode == 0


def test_full_hash_update_still_says_full(pin: str) -> None:
    with S.map_create(MapType.HASH, 4, 8, 2, name="mapdump_h") as fd:
        S.obj_pin(fd, pin)
        for k in (1, 2):
            S.map_update(fd, struct.pack("<I", k), struct.pack("<Q", k))
    r = _bpfdsl("map", "update", pin, "3", "1")
    assert r.returncode != 0
    assert "the map is full (max_entries 2)" in r.stderr


def test_sum_on_a_map_that_is_not_per_cpu_says_it_has_no_effect(pin: str) -> None:
    """`--sum` on an array: the dump as without it, and a note that it did nothing."""
    with S.map_create(MapType.ARRAY, 4, 8, 2, name="mapdump_ar") as fd:
        S.map_update(fd, struct.pack("<I", 1), struct.pack("<Q", 7))
        S.obj_pin(fd, pin)
    r = _bpfdsl("map", "dump", pin, "--sum")
    assert r.returncode == 0, r.stderr
    assert "note[sum-not-percpu]: --sum has no effect" in r.stderr
    assert r.stdout == _bpfdsl("map", "dump", pin).stdout
