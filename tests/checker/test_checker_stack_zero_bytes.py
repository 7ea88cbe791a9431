"""Stack bytes known to be zero stay zero when a narrower store writes the rest of their
8-byte slot (kernel check_stack_write_fixed_off / save_register_state: the bytes of a
slot not covered by a spill go through mark_stack_slot_misc, which keeps STACK_ZERO;
a plain store keeps the other bytes' types).  A later load of the zero bytes is the
constant 0, so the branch testing it is never taken: both the checker and the kernel
accept the program, and both refuse it when the first store was not a zero.
"""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_JEQ
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import check_insns

XDP = (ProgramType.XDP, AttachType.XDP)


def _prog(first: int, other: str) -> list:
    """fp-4..fp-1 get ``first`` (a u32 store of a known register); the slot's other bytes
    an unknown value (r3, loaded from the context): ``other`` "spill" (a u32 spill at the
    slot's start, after), "plain" (a u16 store at fp-6, not at the slot's start: not a
    spill, after) or "before" (the u32 spill first).  Then fp-4 is loaded: when it is not
    0 the program reads the never-set r2."""
    zeros = [I.mov64_imm(4, first), I.stx_mem(4, 10, 4, -4)]
    unknown = {
        "spill": [I.stx_mem(4, 10, 3, -8)],
        "plain": [I.stx_mem(2, 10, 3, -6)],
        "before": [I.stx_mem(4, 10, 3, -8)],
    }[other]
    stores = [*unknown, *zeros] if other == "before" else [*zeros, *unknown]
    return [
        I.ldx_mem(4, 3, 1, 12),  # r3 = ctx->ingress_ifindex (an unknown u32)
        *stores,
        I.ldx_mem(4, 5, 10, -4),
        I.jmp_imm(BPF_JEQ, 5, 0, 1),
        I.mov64_reg(0, 2),  # r2 was never set: rejected if walked
        I.mov64_imm(0, 2),
        I.exit_(),
    ]


CASES = [(first, other) for first in (0, 7) for other in ("spill", "plain", "before")]
IDS = [f"{'zero' if f == 0 else 'nonzero'}-{o}" for f, o in CASES]


@pytest.mark.parametrize("first,other", CASES, ids=IDS)
def test_zero_bytes_survive_a_narrower_store(first, other):
    res = check_insns(_prog(first, other), *XDP)
    if first == 0:
        assert res.ok, [e.message for e in res.errors]
    else:
        assert [(e.code, e.message) for e in res.errors] == [("uninit-reg", "R2 !read_ok")]


@pytest.mark.kernel
@pytest.mark.parametrize("first,other", CASES, ids=IDS)
def test_zero_bytes_kernel_agrees(first, other):
    from bpfdsl.kernel import syscall as S

    prog = _prog(first, other)
    try:
        fd, _ = S.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1)
        fd.close()
        kernel_ok, log = True, ""
    except S.BpfError as e:
        kernel_ok, log = False, e.log
    assert kernel_ok == (first == 0), log[-400:]
    assert check_insns(prog, *XDP).ok == kernel_ok
    if not kernel_ok:
        assert "R2 !read_ok" in log
