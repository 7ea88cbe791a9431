"""A value the map's BTF type refuses is quoted as the user wrote it (JSON), not as
Python's repr (found by a new-user review: `map update MAP 0 '{"a":1}'` said
``got {'a': 1}``)."""

from __future__ import annotations

import pytest

from bpfdsl.abi.btf import values as V
from bpfdsl.abi.btf.core import Btf, BtfType, Kind


def _btf() -> Btf:
    u32 = BtfType(1, Kind.INT, "u32", size=4, bits=32)
    arr = BtfType(2, Kind.ARRAY, type=1, index_type=1, nelems=2)
    return Btf([BtfType(0, Kind(0)), u32, arr], b"\0")


@pytest.mark.parametrize(
    ("tid", "obj", "quoted"),
    [(1, {"a": 1}, '{"a": 1}'), (1, [True], "[true]"), (2, [1, 2, 3], "[1, 2, 3]")],
)
def test_a_refused_value_is_quoted_as_json(tid: int, obj: object, quoted: str) -> None:
    with pytest.raises(ValueError) as ei:
        V.encode_value(_btf(), tid, obj)
    assert str(ei.value).endswith(f"got {quoted}")
