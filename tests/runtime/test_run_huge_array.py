"""`bpfdsl run` on the interpreter takes a map snapshot before and after the packets (what
changed is shown); an array map whose max_entries is 2^32 - 1 (from a corrupted object: the
objects fuzzer, seed 23 case 71) was listed index by index, a MemoryError.  Its snapshot is
skipped as for any map over the diff limit, and the run gives the program's verdict."""

from __future__ import annotations

import dataclasses

from support.paths import PROGS

from bpfdsl.abi.prog_types import PROGRAM_KINDS
from bpfdsl.compiler import compile_file
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import testrun

FRAME = (
    bytes.fromhex(
        "020000000002020000000001080045000032000140004011f8c60a010101c000020104d20035001e0000"
    )
    + b"q" * 22
)


def _run(spec) -> testrun.PacketResult:
    kind = next(k for k in PROGRAM_KINDS if k.keyword == "xdp")
    (res,) = testrun.run_packets(testrun.open_engine("interp", spec), "pong", kind, [(0, FRAME)])
    return res


def test_run_with_a_2_32_entry_array_map() -> None:
    obj = compile_file(PROGS / "xdp_pong.bpfd").obj
    want = _run(read_object(obj))
    spec = read_object(obj)
    big = dataclasses.replace(spec.maps["reflected"], max_entries=0xFFFFFFFF)
    spec.maps["reflected"] = big
    engine = testrun.open_engine("interp", spec)
    snap = engine.snapshot_maps()
    assert snap["reflected"] is None  # too many entries to diff, not listed
    res = _run(spec)
    assert (res.retval, res.data_out) == (want.retval, want.data_out)
