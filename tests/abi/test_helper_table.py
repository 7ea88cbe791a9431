"""The one helper table (bpfdsl.abi.helpers.PROTOTYPES): indexed by helper id, every kernel
helper named, prototypes for the modelled ones; the printer, the checker and the interpreter
all name a helper from it."""

from __future__ import annotations

import pytest
from support.vmlinux import kernel_enums

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS, HELPERS_BY_ID, PROTOTYPES, kernel_helper_name
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.interp import InterpError, Machine, XdpContext


def test_prototypes_are_indexed_by_helper_id_with_unique_names():
    assert [h.id for h in PROTOTYPES] == list(range(len(PROTOTYPES)))
    names = [h.name for h in PROTOTYPES]
    assert len(set(names)) == len(names)
    assert PROTOTYPES[0].name == "unspec" and not PROTOTYPES[0].modelled
    assert kernel_helper_name(0) is None and kernel_helper_name(len(PROTOTYPES)) is None


def test_modelled_helpers_are_the_table_entries_with_a_prototype():
    modelled = [h for h in PROTOTYPES if h.modelled]
    assert list(HELPERS.values()) == modelled and list(HELPERS_BY_ID.values()) == modelled
    for h in modelled:
        assert PROTOTYPES[h.id] is h and HELPERS[h.name] is h
        assert h.ret is not None and len(h.args) <= 5  # r1..r5
    unmodelled = [h for h in PROTOTYPES[1:] if not h.modelled]
    assert unmodelled and all(h.ret is None and h.map_types is None for h in unmodelled)


@pytest.mark.kernel
def test_table_covers_every_helper_of_the_running_kernel():
    k = kernel_enums()
    assert len(PROTOTYPES) == k["__BPF_FUNC_MAX_ID"]
    for h in PROTOTYPES:
        assert k[f"BPF_FUNC_{h.name}"] == h.id, h.name


def test_printer_checker_and_interpreter_name_an_unmodelled_helper_alike():
    """bpf_get_current_uid_gid (#15) is a kernel helper XDP may call (bpf_base_func_proto)
    that bpfdsl does not model: all three name it from the one table, with its kernel
    name and id.  (bpf_skb_store_bytes, #9, is tc only: the checker rejects it in XDP as
    the kernel does, "program of this type cannot use helper".)"""
    assert not PROTOTYPES[15].modelled and PROTOTYPES[15].kernel_name == "bpf_get_current_uid_gid"
    prog = [I.call(15), I.mov64_imm(0, 2), I.exit_()]
    assert I.format_insn(prog[0]) == "(85) call bpf_get_current_uid_gid#15"
    r = check_insns(prog, ProgramType.XDP, name="p")
    assert r.status == "unchecked"
    assert "helper bpf_get_current_uid_gid (#15) is not modelled" in r.errors[0].message
    with pytest.raises(
        InterpError, match=r"helper bpf_get_current_uid_gid \(#15\) is not implemented"
    ):
        Machine(prog).run(XdpContext(bytes(64)))
    r = check_insns([I.call(9), I.mov64_imm(0, 2), I.exit_()], ProgramType.XDP, name="p")
    assert r.status == "rejected"
    assert r.errors[0].message == "program of this type cannot use helper bpf_skb_store_bytes#9"
