"""A rejection at the verifier's complexity limit is summarized as "BPF program is too
large. Processed N insn": the kernel appends that sentence to the line of the last insn it
walked, and the summary took the first state line of the log ("R1=ctx() R10=fp0") instead
(found by tests/fuzz/programs.py: a generated program over the 1M-insn budget)."""

from __future__ import annotations

import pytest

from bpfdsl.runtime.verifier_log import summarize

LOG = """func#0 @0
0: R1=ctx() R10=fp0
0: (b7) r0 = 0                        ; R0_w=0
1: (07) r0 += 1                       ; R0_w=1
2: (a5) if r0 < 0x7fffffff goto pc-2  ; R0_w=1
1: (07) r0 += 1                       ; R0_w=2
2: (a5) if r0 < 0x7fffffff goto pc-2 BPF program is too large. Processed 1000001 insn
processed 1000001 insns (limit 1000000) max_states_per_insn 4 total_states 10 peak_states 10 mark_read 0
"""


def test_too_large_summary_from_a_log() -> None:
    s = summarize(LOG)
    assert s.message == "BPF program is too large. Processed 1000001 insn"
    assert s.insn == 2


def test_other_rejections_keep_their_last_line() -> None:
    log = "0: R1=ctx() R10=fp0\n0: (61) r0 = *(u32 *)(r1 +99)\ninvalid bpf_context access off=99 size=4\nprocessed 1 insns\n"
    assert summarize(log).message == "invalid bpf_context access off=99 size=4"


@pytest.mark.kernel
def test_too_large_summary_from_the_kernel() -> None:
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.opcodes import BPF_ADD, BPF_JLT
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.kernel import syscall

    prog = [I.mov64_imm(0, 0), I.alu64_imm(BPF_ADD, 0, 1),
            I.jmp_imm(BPF_JLT, 0, 0x7FFFFFFF, -2), I.exit_()]  # fmt: skip
    with pytest.raises(syscall.BpfError) as ei:
        syscall.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1)
    assert summarize(ei.value.log).message.startswith("BPF program is too large. Processed ")
