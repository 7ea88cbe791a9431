"""uapi.py and helpers.py numbers agree with the running kernel's own BTF (vmlinux)."""

from __future__ import annotations

import pytest
from support.vmlinux import kernel_enums

from bpfdsl.abi import uapi as U
from bpfdsl.abi.helpers import HELPERS, kernel_helper_name


@pytest.mark.kernel
@pytest.mark.parametrize(
    "enum,prefix",
    [
        (U.BpfCmd, "BPF_"),
        (U.MapType, "BPF_MAP_TYPE_"),
        (U.ProgramType, "BPF_PROG_TYPE_"),
        (U.AttachType, "BPF_"),
        (U.XdpAction, "XDP_"),
        (U.SkAction, "SK_"),
        (U.SockOpsOp, "BPF_SOCK_OPS_"),
    ],
)
def test_enum_matches_kernel(enum, prefix):
    k = kernel_enums()
    for member in enum:
        name = prefix + member.name
        assert k.get(name) == member.value, name


@pytest.mark.kernel
def test_helper_ids_match_kernel():
    k = kernel_enums()
    for h in HELPERS.values():
        assert k.get(f"BPF_FUNC_{h.name}") == h.id, h.name


def test_section_table():
    assert U.kind_for_section("xdp").attach_type == U.AttachType.XDP
    assert U.kind_for_section("xdp/cpumap").attach_type == U.AttachType.XDP_CPUMAP
    assert U.kind_for_section("xdp/devmap").attach_type == U.AttachType.XDP_DEVMAP
    assert U.kind_for_section("xdp/anything").section == "xdp"
    assert U.kind_for_section("sk_msg").program_type == U.ProgramType.SK_MSG
    assert U.kind_for_section("sockops").program_type == U.ProgramType.SOCK_OPS
    assert U.kind_for_section(".text") is None
    assert "XDP_TX" not in U.kind_for_keyword("xdp(devmap)").returns
    assert "XDP_TX" not in U.kind_for_keyword("xdp(cpumap)").returns


@pytest.mark.kernel
def test_helper_names_match_kernel():
    k = kernel_enums()
    ids = {v: n for n, v in k.items() if n.startswith("BPF_FUNC_") and n != "BPF_FUNC_unspec"}
    for helper_id, name in ids.items():
        if name.startswith("BPF_FUNC_") and helper_id < k["__BPF_FUNC_MAX_ID"]:
            assert kernel_helper_name(helper_id) == "bpf_" + name[len("BPF_FUNC_") :]
    assert kernel_helper_name(k["__BPF_FUNC_MAX_ID"] + 100) is None
