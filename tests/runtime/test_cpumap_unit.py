"""cpumap/devmap entry encoding and refusals without a kernel (bpf(2) answered by the fake
kernel, bpfdsl.kernel.fake, whose cpumap/devmap rules its contract test compares with the
kernel's): values follow struct bpf_cpumap_val / bpf_devmap_val (u32 then s32 fd,
little-endian; the kernel keeps the program's id), a 4-byte value map gets 4 bytes, qsize 0
is refused before any update, a program of the wrong flavour is named, and the FIELD-BUGS
B09 case (1024 declared on a 384-CPU host) is clamped with a warning naming both numbers."""

from __future__ import annotations

import errno
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.cli import main
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import fake as fake_kernel
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import cpumap, devmap

PASS = I.encode([I.mov64_imm(0, 2), I.exit_()])  # return XDP_PASS


def _prog(attach: AttachType) -> S.Fd:
    """An XDP program loaded for ``attach`` (into the installed fake kernel)."""
    return S.prog_load(ProgramType.XDP, PASS, "GPL", expected_attach_type=attach)[0]


def _entry(m: S.Fd, key: int, size: int = 8) -> bytes | None:
    return S.map_lookup(m, struct.pack("<I", key), size)


@dataclass
class Fake:
    kernel: fake_kernel.FakeKernel
    cpus: S.Fd  # a cpumap of 4 slots, 8-byte values

    def updates(self) -> int:
        return self.kernel.calls.count(BpfCmd.MAP_UPDATE_ELEM)


@pytest.fixture
def fake() -> Iterator[Fake]:
    """A 4-CPU fake kernel with a cpumap (8-byte values, 4 slots)."""
    with fake_kernel.installed(fake_kernel.FakeKernel(possible_cpus=4)) as k:
        with S.map_create(MapType.CPUMAP, 4, 8, 4, name="cpus") as m:
            yield Fake(k, m)


def test_cpumap_value_layout(fake: Fake) -> None:
    with _prog(AttachType.XDP_CPUMAP) as prog:
        cpumap.cpumap_set(fake.cpus, 2, 192, int(prog))
        # struct bpf_cpumap_val: qsize, then the program (the kernel shows its id)
        assert _entry(fake.cpus, 2) == struct.pack("<II", 192, S.prog_info(prog).id)
    assert _entry(fake.cpus, 1) is None


def test_cpumap_qsize_only_map_gets_4_bytes(fake: Fake) -> None:
    with S.map_create(MapType.CPUMAP, 4, 4, 4) as m, _prog(AttachType.XDP_CPUMAP) as prog:
        cpumap.cpumap_set(m, 1, 64)
        assert _entry(m, 1, 4) == struct.pack("<I", 64)
        with pytest.raises(DiagnosticError, match="cpumap-no-program-slot"):
            cpumap.cpumap_set(m, 1, 64, int(prog))


@pytest.mark.parametrize(
    ("cpu", "qsize", "code"),
    [
        (0, 0, "cpumap-qsize-zero"),
        (4, 8, "cpumap-cpu"),
        (-1, 8, "cpumap-cpu"),
        (0, 16385, "cpumap-qsize"),
    ],
)
def test_cpumap_refused_before_update(fake: Fake, cpu: int, qsize: int, code: str) -> None:
    with pytest.raises(DiagnosticError, match=code):
        cpumap.cpumap_set(fake.cpus, cpu, qsize)
    assert fake.updates() == 0


def test_cpumap_wrong_program_flavour_is_named(fake: Fake) -> None:
    """A devmap program (or a plain XDP one) in a cpumap entry: the kernel answers a bare
    ENOMEM; bpfdsl names the flavours (the program's expected attach type, found with the
    test-run and entry probes the fake answers as the kernel does) before any update."""
    for attach, what in ((AttachType.XDP_DEVMAP, "xdp(devmap)"), (AttachType.XDP, "xdp (")):
        with _prog(attach) as prog:
            with pytest.raises(DiagnosticError, match="cpumap-wrong-program") as ei:
                cpumap.cpumap_set(fake.cpus, 0, 8, int(prog), map_name="cpus", prog_name="p")
        assert f"program 'p' is {what}" in str(ei.value) and "xdp(cpumap)" in str(ei.value)
    assert _entry(fake.cpus, 0) is None


def test_cpumap_wrong_map_kind(fake: Fake) -> None:
    with S.map_create(MapType.ARRAY, 4, 8, 4) as m:
        with pytest.raises(DiagnosticError, match="wrong-map-kind"):
            cpumap.cpumap_set(m, 0, 8, map_name="cpus")
    assert fake.updates() == 0


def test_b09_clamp_1024_on_384_cpus() -> None:
    with fake_kernel.installed(fake_kernel.FakeKernel(possible_cpus=384)):
        n, warning = cpumap.clamp_max_entries(1024, "cpus_available")
        assert n == 384 and "1024" in warning and "384" in warning
        assert "cpus_available" in warning
        assert cpumap.clamp_max_entries(384, "m") == (384, None)


def test_b09_e2big_explained() -> None:
    with fake_kernel.installed(fake_kernel.FakeKernel(possible_cpus=384)):
        err = cpumap.explain_create_error(S.BpfError(S.BpfCmd.MAP_CREATE, errno.E2BIG), "m", 1024)
    text = str(err)
    assert "cpumap-too-large" in text and "1024" in text
    assert "384" in err.diagnostics[0].hints[0]


def test_devmap_value_layout() -> None:
    with (
        fake_kernel.installed(),
        S.map_create(MapType.DEVMAP_HASH, 4, 8, 8) as m,
        _prog(AttachType.XDP_DEVMAP) as prog,
    ):
        assert devmap.devmap_set(m, 1000, 1, int(prog)) == 1  # ifindex 1 = lo in every namespace
        # struct bpf_devmap_val: ifindex, then the program (the kernel shows its id)
        assert _entry(m, 1000) == struct.pack("<II", 1, S.prog_info(prog).id)


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
