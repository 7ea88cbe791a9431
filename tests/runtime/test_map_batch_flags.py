"""BPF_MAP_UPDATE_BATCH takes BPF_ANY only (the kernel answers EINVAL for BPF_NOEXIST and
BPF_EXIST: kernel/bpf/syscall.c generic_map_update_batch; tests/kernel/test_fake_kernel.py
shows it on the kernel).  So MapView.update_batch writes NOEXIST/EXIST entries one system
call each, names the entry the kernel refuses, and keeps batching BPF_ANY writes after.
Runs on the fake kernel (no root needed), which the contract test checks."""

from __future__ import annotations

import pytest

from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import BPF_ANY, BPF_NOEXIST
from bpfdsl.abi.map_types import MapType
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import fake
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.mapview import MapView


def test_noexist_goes_element_by_element_and_any_keeps_batching() -> None:
    with fake.installed() as k, S.map_create(MapType.HASH, 4, 8, 64) as fd:
        with MapView(f"id:{S.map_info(fd).id}") as m:
            assert m.update_batch([(i, i) for i in range(8)], BPF_ANY) == 8
            assert k.calls.count(BpfCmd.MAP_UPDATE_BATCH) == 1
            k.calls.clear()
            assert m.update_batch([(i, i) for i in range(8, 12)], BPF_NOEXIST) == 4
            assert BpfCmd.MAP_UPDATE_BATCH not in k.calls
            assert k.calls.count(BpfCmd.MAP_UPDATE_ELEM) == 4
            with pytest.raises(DiagnosticError) as ei:
                m.update_batch([(20, 1), (3, 1), (21, 1)], BPF_NOEXIST)  # 3 is there
            assert "File exists at entry 2 (key 03 00 00 00)" in str(ei.value)
            k.calls.clear()
            assert m.update_batch([(30, 1), (31, 1)], BPF_ANY) == 2
            assert k.calls.count(BpfCmd.MAP_UPDATE_BATCH) == 1  # still batching
        assert len(k.objects[int(fd)].entries) == 8 + 4 + 1 + 2  # 20 went in before 3 failed
