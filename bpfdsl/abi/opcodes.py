"""Instruction encoding: opcode classes, sizes, modes, ALU and jump operations, atomic
modifiers and pseudo source registers (include/uapi/linux/bpf_common.h, linux/bpf.h).

:mod:`bpfdsl.abi.insn` decodes, encodes and prints instructions with them.
"""

from __future__ import annotations

from typing import Final

# Final: one name per line, so mypy knows each value and the compiled checker (mypyc)
# uses the number itself instead of looking the name up in this module at run time.
# class (low 3 bits of the opcode)
BPF_LD: Final = 0
BPF_LDX: Final = 1
BPF_ST: Final = 2
BPF_STX: Final = 3
BPF_ALU: Final = 4
BPF_JMP: Final = 5
BPF_JMP32: Final = 6
BPF_ALU64: Final = 7
# size (bits 3-4, load/store)
BPF_W: Final = 0x00
BPF_H: Final = 0x08
BPF_B: Final = 0x10
BPF_DW: Final = 0x18
# mode (bits 5-7, load/store)
BPF_IMM: Final = 0x00
BPF_ABS: Final = 0x20
BPF_IND: Final = 0x40
BPF_MEM: Final = 0x60
BPF_MEMSX: Final = 0x80
BPF_ATOMIC: Final = 0xC0
# source (bit 3, alu/jmp)
BPF_K: Final = 0x00
BPF_X: Final = 0x08
# BPF_END source bit
BPF_TO_LE: Final = 0x00
BPF_TO_BE: Final = 0x08
# alu ops (bits 4-7)
BPF_ADD: Final = 0x00
BPF_SUB: Final = 0x10
BPF_MUL: Final = 0x20
BPF_DIV: Final = 0x30
BPF_OR: Final = 0x40
BPF_AND: Final = 0x50
BPF_LSH: Final = 0x60
BPF_RSH: Final = 0x70
BPF_NEG: Final = 0x80
BPF_MOD: Final = 0x90
BPF_XOR: Final = 0xA0
BPF_MOV: Final = 0xB0
BPF_ARSH: Final = 0xC0
BPF_END: Final = 0xD0
# jmp ops (bits 4-7)
BPF_JA: Final = 0x00
BPF_JEQ: Final = 0x10
BPF_JGT: Final = 0x20
BPF_JGE: Final = 0x30
BPF_JSET: Final = 0x40
BPF_JNE: Final = 0x50
BPF_JSGT: Final = 0x60
BPF_JSGE: Final = 0x70
BPF_CALL: Final = 0x80
BPF_EXIT: Final = 0x90
BPF_JLT: Final = 0xA0
BPF_JLE: Final = 0xB0
BPF_JSLT: Final = 0xC0
BPF_JSLE: Final = 0xD0
BPF_JCOND: Final = 0xE0  # may_goto (BPF_JMP | BPF_JCOND | BPF_K, src_reg BPF_MAY_GOTO = 0)
# atomic op modifiers (imm field of BPF_ATOMIC)
BPF_FETCH = 0x01
BPF_XCHG = 0xE0 | BPF_FETCH
BPF_CMPXCHG = 0xF0 | BPF_FETCH
# ld_imm64 src_reg values
BPF_PSEUDO_MAP_FD = 1
BPF_PSEUDO_MAP_VALUE = 2
BPF_PSEUDO_BTF_ID = 3
BPF_PSEUDO_FUNC = 4
BPF_PSEUDO_MAP_IDX = 5
BPF_PSEUDO_MAP_IDX_VALUE = 6
# call src_reg values
BPF_PSEUDO_CALL = 1
BPF_PSEUDO_KFUNC_CALL = 2
