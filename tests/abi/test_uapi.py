"""The numbers of abi/ (commands, flags, map_types, prog_types, opcodes; helpers.py) agree
with the running kernel's own BTF (vmlinux)."""

from __future__ import annotations

import pytest
from support.vmlinux import kernel_enums

from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.helpers import HELPERS, kernel_helper_name
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import (
    AttachType,
    ProgramType,
    SkAction,
    SockOpsOp,
    XdpAction,
    kind_for_keyword,
    kind_for_section,
)


@pytest.mark.kernel
@pytest.mark.parametrize(
    "enum,prefix",
    [
        (BpfCmd, "BPF_"),
        (MapType, "BPF_MAP_TYPE_"),
        (ProgramType, "BPF_PROG_TYPE_"),
        (AttachType, "BPF_"),
        (XdpAction, "XDP_"),
        (SkAction, "SK_"),
        (SockOpsOp, "BPF_SOCK_OPS_"),
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
    assert kind_for_section("xdp").attach_type == AttachType.XDP
    assert kind_for_section("xdp/cpumap").attach_type == AttachType.XDP_CPUMAP
    assert kind_for_section("xdp/devmap").attach_type == AttachType.XDP_DEVMAP
    assert kind_for_section("xdp/anything").section == "xdp"
    assert kind_for_section("sk_msg").program_type == ProgramType.SK_MSG
    assert kind_for_section("sockops").program_type == ProgramType.SOCK_OPS
    assert kind_for_section(".text") is None
    assert "XDP_TX" not in kind_for_keyword("xdp(devmap)").returns
    assert "XDP_TX" not in kind_for_keyword("xdp(cpumap)").returns


def test_section_matching_rule_is_the_kinds_extras_flag():
    """``section/anything`` reads as a kind only when its table entry says so (libbpf's
    ``"type+"`` rule); the others match their exact name only."""
    assert kind_for_section("xdp.frags/x").section == "xdp.frags"
    assert kind_for_section("xdp.frags/x").prog_flags != 0
    assert kind_for_section("sockops/x").program_type == ProgramType.SOCK_OPS
    assert kind_for_section("tc/ingress").program_type == ProgramType.SCHED_CLS
    assert kind_for_section("sk_skb/stream_verdict/x") is None
    assert kind_for_section("xdpx") is None
    assert kind_for_section("xdp/x").keyword == "xdp"  # not xdp(dev_bound), same section


@pytest.mark.kernel
def test_helper_names_match_kernel():
    k = kernel_enums()
    ids = {v: n for n, v in k.items() if n.startswith("BPF_FUNC_") and n != "BPF_FUNC_unspec"}
    for helper_id, name in ids.items():
        if name.startswith("BPF_FUNC_") and helper_id < k["__BPF_FUNC_MAX_ID"]:
            assert kernel_helper_name(helper_id) == "bpf_" + name[len("BPF_FUNC_") :]
    assert kernel_helper_name(k["__BPF_FUNC_MAX_ID"] + 100) is None
