"""The interpreter refuses a map whose key or value is larger than the kernel allows
(KMALLOC_MAX_SIZE, 4 MiB: BPF_MAP_CREATE gives E2BIG) with a clean no-interp error; a
corrupted object's value size of 4 GiB was a MemoryError traceback from `bpfdsl run
--engine interp` (found by tests/fuzz/objects.py)."""

from __future__ import annotations

import pytest

from bpfdsl.abi.map_types import MapType
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import UsageError
from bpfdsl.interp import InterpCollection, make_map
from bpfdsl.obj.collection import read_object


@pytest.mark.parametrize("key,value", [(4, 0xFFFFFFFE), (4, (4 << 20) + 1), ((4 << 20) + 1, 8)])
def test_oversized_map_is_refused(key: int, value: int) -> None:
    with pytest.raises(ValueError, match="more than the kernel allows"):
        make_map("big", MapType.HASH, key, value, 4)


def test_largest_allowed_value_still_works() -> None:
    m = make_map("ok", MapType.ARRAY, 4, 4 << 20, 1)
    assert m.get(bytes(4)) == bytes(4 << 20)


def test_collection_reports_no_interp() -> None:
    src = (
        'license "GPL"\nmap m: hash<u32, u64>(max_entries: 4)\nxdp fn f(ctx) { return XDP_PASS }\n'
    )
    spec = read_object(compile_source(src, "m.bpfd").obj)
    spec.maps["m"].value_size = 0xFFFFFFFE  # as a corrupted object's BTF says
    with pytest.raises(UsageError) as ei:
        InterpCollection(spec)
    assert ei.value.diagnostics[0].code == "no-interp"
