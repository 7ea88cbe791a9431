"""bpfdsl.abi.insn decodes once, into a semantic form: every Insn carries its class, operation,
mode, size and classification; checker, interpreter, disassembler and the back end's stack
scan all read those.  The stack depths measured on them equal the kernel verifier's."""

from __future__ import annotations

import dataclasses
import re

import pytest
from support.objbuild import build
from support.paths import ROOT

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_B, BPF_DW, BPF_H, BPF_PSEUDO_CALL, BPF_W
from bpfdsl.backend.target import stack_depths
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import load_collection

FLAGS = ("is_ld_imm64", "is_alu", "is_alu64", "is_jmp_class", "is_call", "is_helper_call",
         "is_pseudo_call", "is_exit", "is_ja", "is_cond_jump", "is_load", "is_store",
         "is_atomic", "is_legacy_pkt_load")  # fmt: skip
# struct bpf_insn bytes (linux/bpf.h, Documentation/bpf/standardization/instruction-set.rst)
# -> the classification flags that hold for it (all others must be False)
CASES = [
    ("b700000002000000", {"is_alu", "is_alu64"}),  # r0 = 2
    ("b400000002000000", {"is_alu"}),  # w0 = 2
    ("dc03000010000000", {"is_alu"}),  # r3 = be16 r3
    ("6112040000000000", {"is_load"}),  # r2 = *(u32 *)(r1 +4)
    ("9112040000000000", {"is_load"}),  # r2 = *(s8 *)(r1 +4)  (BPF_MEMSX, v4)
    ("7b1af8ff00000000", {"is_store"}),  # *(u64 *)(r10 -8) = r1
    ("620afcff00000000", {"is_store"}),  # *(u32 *)(r10 -4) = 0
    ("db10000001000000", {"is_atomic"}),  # r1 = atomic64_fetch_add(...)
    ("2000000000000000", {"is_legacy_pkt_load"}),  # r0 = *(u32 *)skb[0]  (BPF_LD | BPF_ABS)
    ("18110000070000000000000000000000", {"is_ld_imm64"}),  # r1 = map[fd:7]
    ("8500000001000000", {"is_jmp_class", "is_call", "is_helper_call"}),  # call #1
    ("8510000005000000", {"is_jmp_class", "is_call", "is_pseudo_call"}),  # call pc+5
    ("8520000005000000", {"is_jmp_class", "is_call"}),  # call kernel-function#5
    ("9500000000000000", {"is_jmp_class", "is_exit"}),  # exit
    ("0500030000000000", {"is_jmp_class", "is_ja"}),  # goto pc+3
    ("0600000003000000", {"is_jmp_class", "is_ja"}),  # gotol pc+3  (BPF_JMP32 | BPF_JA, v4)
    ("2d23fcff00000000", {"is_jmp_class", "is_cond_jump"}),  # if r3 > r2 goto pc-4
    ("5601070000080000", {"is_jmp_class", "is_cond_jump"}),  # if w1 != 0x800 goto pc+7
]


@pytest.mark.parametrize("hexbytes,true_flags", CASES, ids=[c[0] for c in CASES])
def test_decode_classifies_each_instruction_once(hexbytes, true_flags):
    (x,) = I.decode(bytes.fromhex(hexbytes))
    assert {f for f in FLAGS if getattr(x, f)} == true_flags
    assert x.width == len(hexbytes) // 16


def test_decoded_fields_follow_the_kernel_opcode_layout_for_every_code_byte():
    """BPF_CLASS / BPF_OP / BPF_SRC / BPF_MODE / BPF_SIZE of include/uapi/linux/bpf_common.h."""
    sizes = {BPF_W: 4, BPF_H: 2, BPF_B: 1, BPF_DW: 8}
    for code in range(256):
        x = I.Insn(code)
        assert (x.cls, x.op, x.source, x.mode) == (code & 0x07, code & 0xF0, code & 0x08,
                                                   code & 0xE0), hex(code)  # fmt: skip
        assert x.size == sizes[code & 0x18] and x.width == (2 if code == 0x18 else 1)


def test_copies_are_decoded_again_and_compare_by_the_five_fields():
    call = I.call(7)
    pseudo = dataclasses.replace(call, src=BPF_PSEUDO_CALL)
    assert pseudo.is_pseudo_call and not pseudo.is_helper_call
    assert dataclasses.replace(call, src=BPF_PSEUDO_CALL) == pseudo and hash(pseudo) == hash(
        I.call_pc(7)
    )
    assert repr(call) == "Insn(opcode=133, dst=0, src=0, off=0, imm=7)"
    with pytest.raises(TypeError, match="unexpected"):
        I.Insn(0x95, dts=1)


def _kernel_stack_depths(obj: bytes) -> dict[str, list[int]]:
    """Per program: the ``stack depth`` figures the kernel verifier reports (BPF_LOG_STATS,
    log level 4: print_verification_stats, one per subprogram, main program first)."""
    coll = load_collection(read_object(obj), log_level=4)
    try:
        out = {}
        for name, p in coll.programs.items():
            m = re.search(r"^stack depth ([\d+]+)", p.log, re.M)
            assert m, p.log[-500:]
            out[name] = [int(d) for d in m.group(1).split("+")]
        return out
    finally:
        coll.close()


def _slots(nbytes: int) -> int:
    """Bytes in whole 8-byte stack slots: the kernel counts stack depth in BPF_REG_SIZE
    slots (kernel/bpf/verifier.c grow_stack_state rounds up to 8)."""
    return -(-nbytes // 8) * 8


@pytest.mark.kernel
@pytest.mark.parametrize("mcpu", ["v1", "v2", "v3", "v4"])
def test_compile_stats_stack_equals_the_kernel_verifier_stack_depth(mcpu):
    """``bpfdsl compile --stats`` (stack bytes from the one decoder) says what the kernel
    verifier found for every example program: the same byte count for its own frame, and
    one more frame per subprogram (noinline/global fns, loop callbacks) it carries."""
    for path in sorted((ROOT / "progs").glob("*.bpfd")):
        res = compile_source(path.read_text(), path.name, mcpu=mcpu, stats=True, check=False)
        ours = {s.name: [_slots(s.stack)] for s in res.stats}
        kernel = _kernel_stack_depths(res.obj)
        assert ours == {n: f[:1] for n, f in kernel.items()}, (path.name, mcpu)
        subprogs = {n: len(p.subprograms) for n, p in read_object(res.obj).programs.items()}
        assert {n: len(f) - 1 for n, f in kernel.items()} == subprogs, (path.name, mcpu)


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "tests/data/c").glob("*.c")))
def test_stack_depths_of_clang_objects_equal_the_kernel_verifier_main_frame(name):
    obj = build(name).read_bytes()
    ours = stack_depths(obj)
    for prog, figures in _kernel_stack_depths(obj).items():
        assert _slots(ours[prog]) == figures[0], (name, prog, ours, figures)
