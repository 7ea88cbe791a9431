"""A checkpoint whose stack holds a spilled scalar (live: read after the join) does not
cover a state that never touched that stack slot, even when uninitialized stack may be
read (root, allow_uninit_stack): the kernel's stacksafe refuses every populated byte at
or beyond the current state's ``allocated_stack`` ("explored stack has more populated
slots than current stack"), and a path grows that only by accessing the stack
(grow_stack_state).  The checker took the untouched slot for misc bytes and pruned, so
it counted less than the kernel (fuzz programs: 465 vs 488, 1,113 vs 1,209, 2,920 vs
3,322 processed; here 15 vs 17).
"""

from __future__ import annotations

import re

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.opcodes import BPF_JEQ
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns


def _join(pad: int) -> list[I.Insn]:
    """r0 random; r0 != 0: spill 5 to fp-8 and ``pad`` moves; both ways then read fp-8
    (uninitialized on the r0 == 0 way: allowed for root) and exit."""
    spill = [I.mov64_imm(1, 5), I.stx_mem(8, 10, 1, -8)] + [I.mov64_imm(2, k) for k in range(pad)]
    head = [I.mov64_reg(6, 1), I.call(HELPERS["get_prandom_u32"].id)]
    head.append(I.jmp_imm(BPF_JEQ, 0, 0, len(spill)))
    return head + spill + [I.ldx_mem(8, 3, 10, -8), I.mov64_imm(0, 2), I.exit_()]


@pytest.mark.parametrize("pad", [6, 10])
def test_untouched_slot_is_walked_again(pad: int) -> None:
    # the spilling path: 3 + (2 + pad) + 3 insns; the other one: the join's 3 again (it
    # is not covered), not 1 (the join found covered)
    res = check_insns(_join(pad), ProgramType.XDP)
    assert res.ok, res.errors
    assert res.insns_processed == 3 + (2 + pad) + 3 + 3


@pytest.mark.kernel
@pytest.mark.parametrize("pad", [0, 6, 10])
def test_processed_count_is_the_kernels(pad: int) -> None:
    from bpfdsl.kernel import syscall

    prog = _join(pad)
    fd, log = syscall.prog_load(
        ProgramType.XDP, I.encode(prog), "GPL", log_level=1 | 4, log_size=1 << 20
    )
    fd.close()
    m = re.search(r"processed (\d+) insns", log)
    assert m is not None
    assert check_insns(prog, ProgramType.XDP).insns_processed == int(m.group(1))
