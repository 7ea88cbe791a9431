"""cpumap/devmap entry encoding and refusals without a kernel (bpf(2) replaced by a recorder):
values follow struct bpf_cpumap_val / bpf_devmap_val (u32 then s32 fd, little-endian), a
4-byte value map gets 4 bytes, qsize 0 is refused before any update, and the FIELD-BUGS B09
case (1024 declared on a 384-CPU host) is clamped with a warning naming both numbers."""

from __future__ import annotations

import errno
import struct

import pytest

from bpfdsl.abi.map_types import MapType
from bpfdsl.cli import main
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import fake as fake_kernel
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import cpumap


@pytest.fixture
def fake(monkeypatch):
    """A fake cpumap (8-byte values, 4 slots) on a 4-CPU host; records map updates."""
    rec: dict = {
        "updates": [],
        "info": S.MapInfo(type=MapType.CPUMAP, key_size=4, value_size=8, max_entries=4),
    }
    monkeypatch.setattr(S, "possible_cpus", lambda: 4)
    monkeypatch.setattr(S, "map_info", lambda fd: rec["info"])
    monkeypatch.setattr(S, "map_update", lambda fd, k, v, flags=0: rec["updates"].append((k, v)))
    monkeypatch.setattr(cpumap, "require_entry_program", lambda *a, **k: None)
    return rec


def test_cpumap_value_layout(fake) -> None:
    cpumap.cpumap_set(3, 2, 192, 17)
    assert fake["updates"] == [(struct.pack("<I", 2), struct.pack("<Ii", 192, 17))]


def test_cpumap_qsize_only_map_gets_4_bytes(fake) -> None:
    fake["info"].value_size = 4
    cpumap.cpumap_set(3, 1, 64)
    assert fake["updates"] == [(struct.pack("<I", 1), struct.pack("<I", 64))]
    with pytest.raises(DiagnosticError, match="cpumap-no-program-slot"):
        cpumap.cpumap_set(3, 1, 64, 17)


@pytest.mark.parametrize(
    ("cpu", "qsize", "code"),
    [
        (0, 0, "cpumap-qsize-zero"),
        (4, 8, "cpumap-cpu"),
        (-1, 8, "cpumap-cpu"),
        (0, 16385, "cpumap-qsize"),
    ],
)
def test_cpumap_refused_before_update(fake, cpu: int, qsize: int, code: str) -> None:
    with pytest.raises(DiagnosticError, match=code):
        cpumap.cpumap_set(3, cpu, qsize)
    assert fake["updates"] == []


def test_cpumap_wrong_map_kind(fake) -> None:
    fake["info"].type = MapType.ARRAY
    with pytest.raises(DiagnosticError, match="wrong-map-kind"):
        cpumap.cpumap_set(3, 0, 8, map_name="cpus")


def test_b09_clamp_1024_on_384_cpus(monkeypatch) -> None:
    monkeypatch.setattr(S, "possible_cpus", lambda: 384)
    n, warning = cpumap.clamp_max_entries(1024, "cpus_available")
    assert n == 384 and "1024" in warning and "384" in warning and "cpus_available" in warning
    assert cpumap.clamp_max_entries(384, "m") == (384, None)


def test_b09_e2big_explained(monkeypatch) -> None:
    monkeypatch.setattr(S, "possible_cpus", lambda: 384)
    err = cpumap.explain_create_error(S.BpfError(S.BpfCmd.MAP_CREATE, errno.E2BIG), "m", 1024)
    text = str(err)
    assert "cpumap-too-large" in text and "1024" in text
    assert "384" in err.diagnostics[0].hints[0]


def test_devmap_value_layout(monkeypatch) -> None:
    from bpfdsl.runtime import devmap

    monkeypatch.setattr(cpumap, "require_entry_program", lambda *a, **k: None)  # via entry_value
    with fake_kernel.installed() as k, S.map_create(MapType.DEVMAP_HASH, 4, 8, 8) as m:
        assert devmap.devmap_set(m, 1000, 1, 9) == 1  # ifindex 1 = lo in every namespace
        # struct bpf_devmap_val: ifindex, then the program's fd
        assert k.objects[int(m)].entries == {struct.pack("<I", 1000): struct.pack("<Ii", 1, 9)}


@pytest.mark.parametrize(
    "argv",
    [
        ["cpumap", "set", "/x:m", "0"],  # --qsize is required
        ["devmap", "set", "/x:m", "0"],  # IFACE missing
        ["sockops", "attach", "p"],  # --cgroup is required
    ],
)
def test_cli_usage_errors(argv, capsys) -> None:
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
