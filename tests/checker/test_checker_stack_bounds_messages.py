"""Stack accesses outside the 512 bytes below r10, direct or through a helper's (or a global
function's) memory argument, refused with Linux 6.18's messages (kernel/bpf/verifier.c
check_stack_access_within_bounds, reached from check_mem_access and from
check_stack_range_initialized): "invalid read from stack R1 off=-4 size=8", "invalid
write to stack ...", "invalid variable-offset read from stack R1 var_off=(0x0; 0x8)
off=-16 size=16", "invalid unbounded variable-offset read from stack R1".  Before, a
helper's argument was worded "invalid indirect access to stack ..." (the wording of kernels
before 6.x), and a zero-sized argument at fp+0 or below fp-512 was accepted although the
kernel refuses it.  Each program is also loaded into the kernel: the same verdict, message
and processed count."""

from __future__ import annotations

import re

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.opcodes import BPF_ADD, BPF_AND
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns

CSUM = HELPERS["csum_diff"].id  # reads (from, from_size): ARG_PTR_TO_MEM | MEM_RDONLY, size 0 ok
LOAD = HELPERS["xdp_load_bytes"].id  # writes (buf, len)
ZERO_STACK = [I.mov64_imm(0, 0), I.stx_mem(8, 10, 0, -8), I.stx_mem(8, 10, 0, -16)]


def fp(off: int) -> list[I.Insn]:
    return [I.mov64_reg(1, 10), I.alu64_imm(BPF_ADD, 1, off)]


def var(base: int, mask: int | None) -> list[I.Insn]:
    """r1 = fp + base + (rx_queue_index [& mask])"""
    m = [] if mask is None else [I.alu64_imm(BPF_AND, 2, mask)]
    return [I.ldx_mem(4, 2, 1, 16), *m, I.mov64_reg(1, 10), I.alu64_imm(BPF_ADD, 1, base),
            I.alu64_reg(BPF_ADD, 1, 2)]  # fmt: skip


def csum(setup: list[I.Insn], size: int) -> list[I.Insn]:
    return [*ZERO_STACK, *setup, I.mov64_imm(2, size), I.mov64_imm(3, 0), I.mov64_imm(4, 0),
            I.mov64_imm(5, 0), I.call(CSUM), I.mov64_imm(0, 2), I.exit_()]  # fmt: skip


def load(setup: list[I.Insn], size: int) -> list[I.Insn]:
    return [I.mov64_reg(6, 1), *ZERO_STACK, *setup, I.mov64_reg(3, 1), I.mov64_reg(1, 6),
            I.mov64_imm(2, 0), I.mov64_imm(4, size), I.call(LOAD), I.mov64_imm(0, 2),
            I.exit_()]  # fmt: skip


def direct(setup: list[I.Insn], write: bool) -> list[I.Insn]:
    acc = I.stx_mem(8, 1, 0, 0) if write else I.ldx_mem(8, 0, 1, 0)
    return [*ZERO_STACK, *setup, acc, I.mov64_imm(0, 2), I.exit_()]


VAR = "var_off=(0x0; 0x8)"
# name -> (program, Linux 6.18's verdict ("ok" or its message), processed insns), read off
# this kernel's log
CASES = {
    "read-fits": (csum(fp(-8), 8), "ok", 12),
    "read-past-fp": (csum(fp(-4), 8), "invalid read from stack R1 off=-4 size=8", 10),
    "read-too-long": (csum(fp(-8), 16), "invalid read from stack R1 off=-8 size=16", 10),
    "read-below-512": (csum(fp(-520), 8), "invalid read from stack R1 off=-520 size=8", 10),
    "zero-size-at-fp": (csum(fp(0), 0), "invalid read from stack R1 off=0 size=0", 10),
    "zero-size-below-512": (csum(fp(-600), 0), "invalid read from stack R1 off=-600 size=0", 10),
    "zero-size-inside": (csum(fp(-8), 0), "ok", 12),
    "read-variable-fits": (csum(var(-16, 8), 8), "ok", 15),
    "read-variable-past-fp": (csum(var(-16, 8), 16),
        f"invalid variable-offset read from stack R1 {VAR} off=-16 size=16", 13),
    "read-variable-unbounded": (csum(var(-16, None), 8),
        "invalid unbounded variable-offset read from stack R1", 12),
    "write-past-fp": (load(fp(-4), 8), "invalid write to stack R3 off=-4 size=8", 11),
    "write-below-512": (load(fp(-520), 8), "invalid write to stack R3 off=-520 size=8", 11),
    "write-variable-past-fp": (load(var(-8, 8), 8),
        f"invalid variable-offset write to stack R3 {VAR} off=-8 size=8", 14),
    "write-variable-unbounded": (load(var(-16, None), 8),
        "invalid unbounded variable-offset write to stack R3", 13),
    "direct-variable-past-fp": (direct(var(-8, 8), False),
        f"invalid variable-offset read from stack R1 {VAR} off=-8 size=8", 9),
    "direct-unbounded-aligned": (direct(var(-16, -8), True),
        "invalid unbounded variable-offset write to stack R1", 9),
    "direct-unbounded-misaligned": (direct(var(-16, None), False),
        "misaligned stack access off (0x0; 0xffffffff)+-16+0 size 8", 8),
}  # fmt: skip


def _ours(prog: list[I.Insn]) -> tuple[str, int]:
    r = check_insns(prog, ProgramType.XDP)
    return ("ok" if r.ok else r.errors[0].message), r.insns_processed


@pytest.mark.parametrize("name", list(CASES))
def test_checker_message_and_count(name):
    prog, verdict, processed = CASES[name]
    assert _ours(prog) == (verdict, processed)


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_agrees(name):
    from bpfdsl.kernel import syscall as S

    prog, verdict, processed = CASES[name]
    try:
        fd, log = S.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1 | 4,
                              log_size=1 << 20)  # fmt: skip
        fd.close()
        got = "ok"
    except S.BpfError as e:
        log = e.log or ""
        lines = [ln for ln in log.splitlines() if ln.strip()]
        got = next(
            ln for ln in reversed(lines) if not ln.startswith(("processed", "verif", "stack d"))
        )
    m = re.search(r"processed (\d+) insns", log)
    assert m is not None, log
    assert (got, int(m.group(1))) == (verdict, processed)
    assert _ours(prog) == (got, int(m.group(1)))
