"""Which helpers each checked program type may call (bpfdsl.abi.helpers.PROG_TYPE_FUNCS,
the kernel's ``*_func_proto``), asked of this kernel: a program calling helper N is loaded
and the kernel either says "program of this type cannot use helper bpf_NAME#N" /
"invalid func unknown#N" (check_helper_call: the checker must reject it with the same
words, exit 1) or goes on to check the arguments (allowed: the table must say so)."""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import (
    HELPERS,
    PROG_TYPE_FUNCS,
    PROTOTYPES,
    helper_allowed,
    kernel_refuses_helper,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.kernel import syscall

PT = ProgramType


def _kernel_words(pt: ProgramType, helper_id: int) -> str | None:
    """The kernel's refusal of a call of ``helper_id`` by ``pt``, or None when it checks on."""
    prog = [I.call(helper_id), I.mov64_imm(0, 0), I.exit_()]
    try:
        fd, _ = syscall.prog_load(pt, I.encode(prog), "GPL")
        fd.close()
        return None
    except syscall.BpfError as e:
        for line in e.log.splitlines():
            if "cannot use helper" in line or line.startswith("invalid func"):
                return line
        return None


@pytest.mark.kernel
@pytest.mark.parametrize("pt", sorted(PROG_TYPE_FUNCS, key=int), ids=lambda p: p.name)
def test_availability_table_is_the_kernels(pt):
    for helper_id in range(-1, len(PROTOTYPES) + 2):
        assert kernel_refuses_helper(helper_id, pt) == _kernel_words(pt, helper_id), helper_id


@pytest.mark.parametrize("pt", sorted(PROG_TYPE_FUNCS, key=int), ids=lambda p: p.name)
def test_modelled_prototypes_agree_with_the_table(pt):
    for h in HELPERS.values():
        assert helper_allowed(h, pt) == (h.name in PROG_TYPE_FUNCS[pt]), h.name


@pytest.mark.parametrize(
    ("pt", "name"),
    [(PT.XDP, "setsockopt"), (PT.XDP, "msg_redirect_map"), (PT.SK_MSG, "sk_lookup_tcp")],
)
def test_checker_rejects_a_helper_of_another_program_type(pt, name):
    """Before: "cannot check" (exit 2) for an unmodelled helper the program type lacks."""
    hid = next(h.id for h in PROTOTYPES if h.name == name)
    r = check_insns([I.call(hid), I.mov64_imm(0, 0), I.exit_()], pt)
    assert not r.ok and not r.unchecked
    assert r.errors[0].message == f"program of this type cannot use helper bpf_{name}#{hid}"
