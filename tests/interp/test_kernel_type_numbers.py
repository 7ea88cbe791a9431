"""Map and program type numbers newer than bpfdsl's abi tables (a kernel can report any
number): the interpreter refuses a map it cannot model by name and number, the checker
does not apply its helper/map table to it, and the sock_ops attach error names it by
number; known numbers keep their names."""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.checker.env import MapRef
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.interp import make_map
from bpfdsl.kernel import fake
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.maps import MapSpec
from bpfdsl.runtime import cgroup

NEW_MAP_TYPE = max(MapType) + 1  # one past the last BPF_MAP_TYPE_* bpfdsl knows
NEW_PROG_TYPE = max(ProgramType) + 1


def test_interp_refuses_unknown_map_type_by_name_and_number() -> None:
    with pytest.raises(ValueError, match=f"map 'future': map type {NEW_MAP_TYPE} is unknown"):
        make_map("future", NEW_MAP_TYPE, 4, 4, 1)
    m = make_map("a", int(MapType.ARRAY), 4, 8, 4)  # the kernel's number, as an int
    assert m.map_type is MapType.ARRAY
    m.set((1).to_bytes(4, "little"), 7)
    assert m.lookup((1).to_bytes(4, "little")).buf[:8] == (7).to_bytes(8, "little")


def _redirect_map_with(map_type: int):
    """bpf_redirect_map(map, 0, 0) on a 4-byte-key map of ``map_type``."""
    insns = [I.ld_imm64(1, 0), I.mov64_imm(2, 0), I.mov64_imm(3, 0), I.call(51), I.exit_()]
    refs = {0: MapRef(MapSpec("m", map_type, 4, 4, 4))}
    return check_insns(insns, ProgramType.XDP, AttachType.XDP, map_refs=refs)


def test_checker_helper_map_table_only_for_known_map_types() -> None:
    refused = _redirect_map_with(MapType.HASH)
    assert not refused.ok and refused.errors[0].code == "map-helper"
    assert "(hash) cannot be used with bpf_redirect_map" in refused.errors[0].explain
    assert _redirect_map_with(MapType.DEVMAP).ok
    unknown = _redirect_map_with(NEW_MAP_TYPE)
    assert all(e.code != "map-helper" for e in unknown.errors), unknown.errors


@pytest.mark.parametrize(
    ("prog_type", "named"), [(ProgramType.XDP, "xdp"), (NEW_PROG_TYPE, str(NEW_PROG_TYPE))]
)
def test_sock_ops_attach_names_the_wrong_program_type(prog_type, named) -> None:
    # a program of that type in the fake kernel (a newer kernel reports any number); the
    # type check comes before the cgroup is opened
    insns = I.encode([I.mov64_imm(0, 1), I.exit_()])
    with fake.installed(), S.prog_load(prog_type, insns, "GPL")[0] as fd:
        with pytest.raises(DiagnosticError) as ei:
            cgroup.sock_ops_attach("/nonexistent-cgroup", int(fd), prog_name="p")
    d = ei.value.diagnostics[0]
    assert d.code == "not-sock-ops"
    assert d.message == f"program 'p' is a {named} program, not sock_ops"
