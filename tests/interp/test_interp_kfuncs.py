"""The interpreter runs the XDP metadata kfuncs as a driver without the hints would
(-EOPNOTSUPP, nothing written) unless the run is given the hints, which they then return
(0, values written, be16 in network order)."""

from __future__ import annotations

import pytest

from bpfdsl.abi.prog_types import PROGRAM_KINDS
from bpfdsl.compiler import compile_source
from bpfdsl.interp import InterpCollection
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import runinfo

SRC = """
license "GPL"
map out: array<u32, u64>(max_entries: 8)

xdp(dev_bound) fn hints(ctx) {
    let hash: u32 = 7
    let rss_type: u32 = 7
    out[0] = (rx_hash(hash, rss_type) as u32) as u64
    out[1] = hash as u64
    out[2] = rss_type as u64
    let ts: u64 = 7
    out[3] = (rx_timestamp(ts) as u32) as u64
    out[4] = ts
    let proto: be16 = 0x0001
    let tci: u16 = 7
    out[5] = (rx_vlan_tag(proto, tci) as u32) as u64
    out[6] = host(proto) as u64
    out[7] = tci as u64
    return XDP_PASS
}
"""
FRAME = bytes(64)
EOPNOTSUPP = (-95) & 0xFFFFFFFF


def run(hints: dict[str, int] | None = None) -> list[int]:
    coll = InterpCollection(read_object(compile_source(SRC, "hints.bpfd").obj))
    coll.programs["hints"].run_xdp(FRAME, hints=hints)
    return [
        int.from_bytes(bytes(coll.maps["out"].lookup(i.to_bytes(4, "little")).buf), "little")
        for i in range(8)
    ]


def test_without_hints_every_kfunc_returns_eopnotsupp_and_writes_nothing() -> None:
    assert run() == [EOPNOTSUPP, 7, 7, EOPNOTSUPP, 7, EOPNOTSUPP, 1, 7]


def test_given_hints_are_returned() -> None:
    got = run({"rx_hash": 0x1234, "rx_rss_type": 0x19, "rx_timestamp": 10**18,
               "rx_vlan_proto": 0x8100, "rx_vlan_tci": 42})  # fmt: skip
    # proto is a be16, written in network order: host(proto) reads 0x8100 back
    assert got == [0, 0x1234, 0x19, 0, 10**18, 0, 0x8100, 42]


def test_one_hint_makes_its_kfunc_answer_with_zeroes_for_the_others() -> None:
    got = run({"rx_hash": 0xABCD})
    assert got[:3] == [0, 0xABCD, 0] and got[3] == EOPNOTSUPP and got[5] == EOPNOTSUPP


def test_run_ctx_takes_the_hints_by_name() -> None:
    xdp = next(k for k in PROGRAM_KINDS if k.keyword == "xdp")
    assert runinfo.parse_ctx(["rx_hash=0x1234", "rx_vlan_tci=5"], xdp) == {
        "rx_hash": 0x1234,
        "rx_vlan_tci": 5,
    }
    with pytest.raises(Exception) as ei:
        runinfo.parse_ctx(["rx_vlan_tci=0x10000"], xdp)  # a u16
    assert "16 bits" in str(ei.value)
