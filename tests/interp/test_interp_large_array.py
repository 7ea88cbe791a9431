"""The interpreter's array maps make an index's memory on first use: an object declaring a
huge array runs at once (a corrupted object's max_entries 2^31-1 made `bpfdsl run --engine
interp` allocate for minutes, found by tests/fuzz/objects.py); values read as zeros.
Measured as memory (tracemalloc's peak), not time: eager allocation would be gigabytes."""

from __future__ import annotations

import tracemalloc

from bpfdsl.abi.map_types import MapType
from bpfdsl.compiler import compile_source
from bpfdsl.interp import InterpCollection, make_map
from bpfdsl.obj.collection import read_object

MIB = 1 << 20


def test_huge_array_map_is_cheap_and_zero() -> None:
    tracemalloc.start()
    m = make_map("big", MapType.PERCPU_ARRAY, 4, 8, 0x7FFFFFFF, ncpus=2)
    last = (0x7FFFFFFE).to_bytes(4, "little")
    assert m.get(last) == [bytes(8), bytes(8)]
    assert m.update(last, (5).to_bytes(8, "little"), cpu=1) == 0
    assert m.get(last) == [bytes(8), (5).to_bytes(8, "little")]
    assert m.lookup((0x7FFFFFFF).to_bytes(4, "little")) is None  # past the end
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 4 * MIB  # eagerly: 2 CPUs x 2^31 x 8 bytes


def test_program_with_a_large_array_runs_quickly() -> None:
    src = """license "GPL"
map big: array<u32, u64>(max_entries: 100000000)
xdp fn f(ctx) {
    big[99999999] += 7
    let v = big.lookup(99999999) else { return XDP_ABORTED }
    if v == 7 { return XDP_DROP }
    return XDP_PASS
}
"""
    spec = read_object(compile_source(src, "big.bpfd").obj)
    tracemalloc.start()
    coll = InterpCollection(spec)
    assert coll.programs["f"].run_xdp(bytes(64)).retval == 1  # XDP_DROP
    assert coll.maps["big"].get((99999999).to_bytes(4, "little")) == (7).to_bytes(8, "little")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * MIB  # eagerly: 10^8 x 8 bytes
