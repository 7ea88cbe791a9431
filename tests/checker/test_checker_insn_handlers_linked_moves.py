"""The analyzer's handler made for a 32-bit register move (bpfdsl/checker/handlers.py
_mov_x, used from an insn's second walk on) keeps what the general one does: a scalar
that fits in 32 bits is copied whole and linked to its source (kernel check_alu_op,
assign_scalar_id_before_mov for ``w_dst = w_src``), so a bounds check of the copy bounds
the source too.

XDP: a random 16-bit value in r6 (linked to r0 by a 64-bit move), a branch on it (so the
move below is walked on two paths, the second time by the made handler), ``w7 = w6``,
``if r7 > 7`` out, then a 16-byte ring buffer record written at ``record + r6``: within
the record only because r6 is bounded through its link to r7.  The kernel accepts it; the
checker must too, on both paths, with the kernel's processed count.
"""

from __future__ import annotations

import re

import pytest

from bpfdsl import checker
from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ADD, BPF_AND, BPF_JEQ, BPF_JGT
from bpfdsl.abi.prog_types import AttachType, ProgramType, XdpAction
from bpfdsl.checker import analyzer, check_insns, handlers
from bpfdsl.checker.env import MapRef
from bpfdsl.obj.maps import MapSpec

RB = MapSpec("rb", MapType.RINGBUF, 0, 0, 4096)


def _prog(limit: int) -> list[I.Insn]:
    """The program above, the copy checked against ``limit`` (7: in bounds of the
    16-byte record; 16: one byte past it)."""
    return [
        I.call(HELPERS["get_prandom_u32"].id),
        I.alu64_imm(BPF_AND, 0, 0xFFFF),  # r0 0..0xffff
        I.mov64_reg(6, 0),  # r6 linked to r0 (64-bit move of an unknown scalar)
        I.jmp_imm(BPF_JGT, 6, 3, 1),  # to the join (r6 4..0xffff there)
        I.mov64_imm(4, 1),
        I.mov32_reg(7, 6),  # the join: w7 = w6; r6 fits in 32 bits, r7 is linked to it
        I.jmp_imm(BPF_JGT, 7, limit, 12),  # to out (offsets in slots: ld_imm64 is 2)
        I.ld_imm64(1, 0),  # the ring buffer (AT)
        I.mov64_imm(2, 16),
        I.mov64_imm(3, 0),
        I.call(HELPERS["ringbuf_reserve"].id),
        I.jmp_imm(BPF_JEQ, 0, 0, 6),  # NULL: to out
        I.mov64_reg(9, 0),
        I.alu64_reg(BPF_ADD, 0, 6),  # record + r6 (bounded only through r7)
        I.st_mem(1, 0, 0, 1),  # one byte
        I.mov64_reg(1, 9),
        I.mov64_imm(2, 0),
        I.call(HELPERS["ringbuf_submit"].id),
        I.mov64_imm(0, XdpAction.PASS),  # out
        I.exit_(),
    ]


AT = next(k for k, x in enumerate(_prog(7)) if x.is_ld_imm64)


def _check(ins: list[I.Insn]):
    return check_insns(ins, ProgramType.XDP, AttachType.XDP, map_refs={AT: MapRef(RB)})


def _kernel(ins: list[I.Insn]) -> tuple[bool, int, str]:
    """The kernel's verdict and processed count (log_level 1 | 4 = BPF_LOG_STATS)."""
    from bpfdsl.kernel import syscall as S

    with S.map_create(RB.map_type, 0, 0, RB.max_entries) as fd:
        prog = list(ins)
        prog[AT] = I.ld_map_fd(1, int(fd))
        try:
            pfd, log = S.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1 | 4)
            pfd.close()
            ok = True
        except S.BpfError as e:
            ok, log = False, e.log
    m = re.search(r"processed (\d+) insns", log)
    return ok, int(m.group(1)) if m else -1, log


def test_a_32_bit_copy_bounds_its_source(monkeypatch: pytest.MonkeyPatch) -> None:
    made = _check(_prog(7))
    assert made.ok, [e.message for e in made.errors]
    too_far = _check(_prog(16))
    assert not too_far.ok and too_far.errors[0].code == "mem-bounds"
    if checker.NATIVE:
        # compiled code calls _handler directly, past the module attribute: the patch
        # would change nothing.  scripts/test.sh reruns tests/checker on the .py modules.
        pytest.skip("needs the pure-Python checker (BPFDSL_PURE_PYTHON=1)")
    general = handlers.handler
    monkeypatch.setattr(analyzer, "handler", lambda x, succ, made=True: general(x, succ, False))
    alone = _check(_prog(7))
    assert (alone.ok, alone.insns_processed, alone.states) == (
        made.ok,
        made.insns_processed,
        made.states,
    )


@pytest.mark.kernel
@pytest.mark.parametrize("limit", [7, 16])
def test_as_the_kernel(limit: int) -> None:
    ins = _prog(limit)
    ok, processed, log = _kernel(ins)
    res = _check(ins)
    assert res.ok == ok, log[-800:]
    if ok:
        assert res.insns_processed == processed, log[-1500:]
