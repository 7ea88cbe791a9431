"""Map references (PIN_PATH | DIR:NAME | id:N) that name nothing: the error says what is
missing (the pin dir itself, or the map in an existing dir) and lists what is there."""

from __future__ import annotations

import pytest

from bpfdsl.diagnostics import UsageError
from bpfdsl.runtime.mapview import resolve_ref


def test_missing_pin_dir_is_named_as_the_missing_thing(tmp_path) -> None:
    with pytest.raises(UsageError) as ei:
        resolve_ref(f"{tmp_path}/nonexistent:foo")
    (d,) = ei.value.diagnostics
    assert d.code == "bad-map"
    assert d.message == f"no pin dir {tmp_path}/nonexistent (for map 'foo')"
    assert "maps there" not in " ".join(d.hints)


def test_missing_map_in_an_existing_dir_lists_the_dir(tmp_path) -> None:
    with pytest.raises(UsageError) as ei:
        resolve_ref(f"{tmp_path}:foo")
    (d,) = ei.value.diagnostics
    assert d.message == f"no map 'foo' pinned in {tmp_path}"
    assert d.hints == ["maps there: none"]
