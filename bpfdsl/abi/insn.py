"""The one instruction table: decode, encode, classify and print eBPF instructions.

Format: ``struct bpf_insn`` (include/uapi/linux/bpf.h): 8 bytes, little endian (bpfel):
``u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm``.  ``BPF_LD | BPF_IMM | BPF_DW``
(ld_imm64) takes two slots; it decodes into ONE :class:`Insn` whose ``imm`` is the full
64-bit constant (``width == 2``).  Jump offsets count slots, as in the kernel; use
:func:`slot_offsets` / :func:`jump_target` to move between list indexes and slots.

Decode once, into a semantic form: an :class:`Insn` carries its class, operation, mode,
size and ``is_*`` classification as plain attributes, computed when it is made (once per
opcode value), so the checker, the interpreter, the back end's stack-depth scan and the
disassembler read them instead of taking ``code`` apart again.  Bytes appear only in
:func:`decode` and :func:`encode`; nobody else decodes instruction bytes.

:func:`format_insn` prints the kernel verifier log syntax (kernel/bpf/disasm.c
``print_bpf_insn``), e.g. ``(61) r2 = *(u32 *)(r1 +4)``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from bpfdsl.abi.helpers import kernel_helper_name
from bpfdsl.abi.opcodes import (
    BPF_ABS,
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_AND,
    BPF_ARSH,
    BPF_ATOMIC,
    BPF_B,
    BPF_CALL,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_DW,
    BPF_END,
    BPF_EXIT,
    BPF_FETCH,
    BPF_H,
    BPF_IMM,
    BPF_IND,
    BPF_JA,
    BPF_JCOND,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JMP,
    BPF_JMP32,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_K,
    BPF_LD,
    BPF_LDX,
    BPF_LSH,
    BPF_MEM,
    BPF_MEMSX,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_PSEUDO_BTF_ID,
    BPF_PSEUDO_CALL,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_KFUNC_CALL,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_IDX,
    BPF_PSEUDO_MAP_IDX_VALUE,
    BPF_PSEUDO_MAP_VALUE,
    BPF_RSH,
    BPF_ST,
    BPF_STX,
    BPF_SUB,
    BPF_TO_BE,
    BPF_TO_LE,
    BPF_W,
    BPF_X,
    BPF_XCHG,
    BPF_XOR,
)

INSN_SIZE = 8  # bytes per slot
_FMT = struct.Struct("<BBhi")

# Operator spelling in the kernel log (kernel/bpf/disasm.c); the checker reuses them.
ALU_OP_NAMES = {
    BPF_ADD: "+=",
    BPF_SUB: "-=",
    BPF_MUL: "*=",
    BPF_DIV: "/=",
    BPF_OR: "|=",
    BPF_AND: "&=",
    BPF_LSH: "<<=",
    BPF_RSH: ">>=",
    BPF_MOD: "%=",
    BPF_XOR: "^=",
    BPF_MOV: "=",
    BPF_ARSH: "s>>=",
}
JMP_OP_NAMES = {
    BPF_JEQ: "==",
    BPF_JGT: ">",
    BPF_JGE: ">=",
    BPF_JSET: "&",
    BPF_JNE: "!=",
    BPF_JSGT: "s>",
    BPF_JSGE: "s>=",
    BPF_JLT: "<",
    BPF_JLE: "<=",
    BPF_JSLT: "s<",
    BPF_JSLE: "s<=",
}
SIZE_BYTES = {BPF_B: 1, BPF_H: 2, BPF_W: 4, BPF_DW: 8}
_SIZE_BY_BYTES = {v: k for k, v in SIZE_BYTES.items()}
_SIZE_NAMES = {BPF_B: "u8", BPF_H: "u16", BPF_W: "u32", BPF_DW: "u64"}
_ATOMIC_NAMES = {BPF_ADD: "add", BPF_AND: "and", BPF_OR: "or", BPF_XOR: "xor"}


class InsnError(ValueError):
    """Instructions the kernel refuses before verifying any path (truncated bytes, unknown
    opcode, register number over r10, broken ld_imm64, jump outside the program).  A call
    of a helper id the kernel does not have is not one: the kernel refuses it on a path
    only.  ``reason``: the kernel's wording; ``slot``: the
    instruction's slot number (as in the kernel's log), None when the whole program is at
    fault."""

    def __init__(self, reason: str, slot: int | None = None, insn: Insn | None = None):
        where = f"insn {slot}: " if slot is not None else ""
        text = f" (in `{format_insn(insn)}`)" if insn is not None else ""
        super().__init__(f"{where}{reason}{text}")
        self.reason, self.slot = reason, slot


_LD_IMM64 = BPF_LD | BPF_IMM | BPF_DW
_OPCODE_FIELDS: dict[int, tuple] = {}  # opcode byte -> its decoded fields (see _opcode_fields)


_DECODED = (
    "cls",
    "op",
    "source",
    "mode",
    "size",
    "width",
    "is_ld_imm64",
    "is_alu",
    "is_alu64",
    "is_jmp_class",
    "is_call",
    "is_exit",
    "is_ja",
    "is_cond_jump",
    "is_load",
    "is_store",
    "is_atomic",
    "is_legacy_pkt_load",
)  # :func:`_opcode_fields` order


def _opcode_fields(c: int) -> tuple:
    """What the ``code`` byte ``c`` says, in :class:`Insn`'s slot order from ``cls`` to
    ``is_legacy_pkt_load``; computed once per opcode value."""
    f = _OPCODE_FIELDS.get(c)
    if f is None:
        cls, op, mode = c & 0x07, c & 0xF0, c & 0xE0
        jmp = cls in (BPF_JMP, BPF_JMP32)
        ld_imm64 = c == _LD_IMM64
        f = _OPCODE_FIELDS[c] = (
            cls,
            op,
            c & 0x08,  # source
            mode,
            SIZE_BYTES[c & 0x18],  # size
            2 if ld_imm64 else 1,  # width
            ld_imm64,
            cls in (BPF_ALU, BPF_ALU64),  # is_alu
            cls == BPF_ALU64,  # is_alu64
            jmp,  # is_jmp_class
            cls == BPF_JMP and op == BPF_CALL,  # is_call
            cls == BPF_JMP and op == BPF_EXIT,  # is_exit
            jmp and op == BPF_JA,  # is_ja
            jmp and op in JMP_OP_NAMES,  # is_cond_jump
            cls == BPF_LDX and mode in (BPF_MEM, BPF_MEMSX),  # is_load
            cls in (BPF_ST, BPF_STX) and mode == BPF_MEM,  # is_store
            cls == BPF_STX and mode == BPF_ATOMIC,  # is_atomic
            cls == BPF_LD and mode in (BPF_ABS, BPF_IND),  # is_legacy_pkt_load
        )
    return f


@dataclass(frozen=True, slots=True)
class Insn:
    """One decoded instruction, classified once when it is made (cilium's ``asm.Instruction``).

    Fields (compared, hashed, printed): ``opcode``: the ``code`` byte.  ``dst``/``src``:
    register numbers 0..10 where the opcode uses them as registers (:func:`decode` refuses
    more; ``src`` is also the pseudo kind of ld_imm64 and call).
    ``off``: signed 16-bit.  ``imm``: signed 32-bit, or for ld_imm64 the full 64-bit value
    (unsigned view: ``imm & 0xFFFF_FFFF_FFFF_FFFF``).

    Decoded from them (plain attributes):
    ``cls`` (``BPF_LD``..``BPF_ALU64``, bits 0-2), ``op`` (ALU/JMP operation ``BPF_ADD``,
    ``BPF_JEQ``..., bits 4-7), ``source`` (``BPF_K``/``BPF_X``; for BPF_END the byte
    order), ``mode`` (bits 5-7), ``size`` (access size in bytes for loads/stores: 1, 2, 4,
    8), ``width`` (slots taken: 2 for ld_imm64, else 1) and the classification ``is_ld_imm64``,
    ``is_alu``, ``is_alu64``, ``is_jmp_class``, ``is_call``, ``is_exit``, ``is_ja``,
    ``is_cond_jump``, ``is_load`` (LDX MEM/MEMSX), ``is_store`` (ST/STX MEM), ``is_atomic``,
    ``is_legacy_pkt_load`` (BPF_LD ABS/IND), ``is_helper_call`` (``src == 0``),
    ``is_pseudo_call`` (BPF-to-BPF call: target slot = this slot + 1 + imm).
    """

    opcode: int
    dst: int = 0
    src: int = 0
    off: int = 0
    imm: int = 0
    # decoded from opcode (and src): not compared, hashed or printed; set in __post_init__
    cls: int = field(init=False, repr=False, compare=False)
    op: int = field(init=False, repr=False, compare=False)
    source: int = field(init=False, repr=False, compare=False)
    mode: int = field(init=False, repr=False, compare=False)
    size: int = field(init=False, repr=False, compare=False)
    width: int = field(init=False, repr=False, compare=False)
    is_ld_imm64: bool = field(init=False, repr=False, compare=False)
    is_alu: bool = field(init=False, repr=False, compare=False)
    is_alu64: bool = field(init=False, repr=False, compare=False)
    is_jmp_class: bool = field(init=False, repr=False, compare=False)
    is_call: bool = field(init=False, repr=False, compare=False)
    is_exit: bool = field(init=False, repr=False, compare=False)
    is_ja: bool = field(init=False, repr=False, compare=False)
    is_cond_jump: bool = field(init=False, repr=False, compare=False)
    is_load: bool = field(init=False, repr=False, compare=False)
    is_store: bool = field(init=False, repr=False, compare=False)
    is_atomic: bool = field(init=False, repr=False, compare=False)
    is_legacy_pkt_load: bool = field(init=False, repr=False, compare=False)
    is_helper_call: bool = field(init=False, repr=False, compare=False)
    is_pseudo_call: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__  # frozen: the decoded fields are written once, here
        for name, value in zip(_DECODED, _opcode_fields(self.opcode), strict=True):
            put(self, name, value)
        put(self, "is_helper_call", self.is_call and self.src == 0)
        put(self, "is_pseudo_call", self.is_call and self.src == BPF_PSEUDO_CALL)

    def with_imm(self, imm: int) -> Insn:
        """Copy with another ``imm`` (the loader patches map fds this way)."""
        return Insn(self.opcode, self.dst, self.src, self.off, imm)


# ---- decode / encode ----


def _s32(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _s64(v: int) -> int:
    v &= 0xFFFFFFFFFFFFFFFF
    return v - (1 << 64) if v & (1 << 63) else v


def decode(data: bytes | bytearray | memoryview) -> list[Insn]:
    """Decode a program's bytes into instructions (ld_imm64 as one :class:`Insn`).

    Raises :class:`InsnError` (kernel wording, naming the slot) when the length is not a
    multiple of 8, or an instruction is one the kernel refuses whatever the path
    (:func:`field_error`: unknown opcode, register over r10, broken ld_imm64 pair).  Jump targets need the whole function: see
    :func:`check_jumps`.
    """
    data = bytes(data)
    if len(data) % INSN_SIZE:
        raise InsnError(f"program size {len(data)} is not a multiple of {INSN_SIZE} bytes")
    out: list[Insn] = []
    n = len(data) // INSN_SIZE
    ops, rare = OPCODES, _RARE
    i = 0
    while i < n:
        code, regs, off, imm = _FMT.unpack_from(data, i * INSN_SIZE)
        slot = i
        if code == _LD_IMM64:
            if i + 1 >= n:
                raise InsnError("ld_imm64 without its second half", i)
            code2, regs2, off2, imm2 = _FMT.unpack_from(data, (i + 1) * INSN_SIZE)
            if code2 or regs2 or off2:
                raise InsnError("invalid second half of ld_imm64", i + 1)
            imm = _s64((imm & 0xFFFFFFFF) | ((imm2 & 0xFFFFFFFF) << 32))
            i += 1
        x = Insn(code, regs & 0x0F, regs >> 4, off, imm)
        kind = ops.get(code)
        # the common case: the opcode is known, its register fields are in range, and it is
        # neither ld_imm64 nor a call (whose src and imm field_error looks at)
        if (
            kind is None
            or code in rare
            or (kind[0] and regs & 0x0F > 10)
            or (kind[1] and regs >> 4 > 10)
        ):
            bad = field_error(x)
            if bad is not None:
                raise InsnError(bad, slot, x)
        out.append(x)
        i += 1
    return out


def encode(insns: Iterable[Insn]) -> bytes:
    """Encode instructions back to bytes (inverse of :func:`decode`)."""
    buf = bytearray()
    for x in insns:
        regs = (x.dst & 0x0F) | ((x.src & 0x0F) << 4)
        if x.is_ld_imm64:
            v = x.imm & 0xFFFFFFFFFFFFFFFF
            buf += _FMT.pack(x.opcode, regs, x.off, _s32(v))
            buf += _FMT.pack(0, 0, 0, _s32(v >> 32))
        else:
            buf += _FMT.pack(x.opcode, regs, x.off, _s32(x.imm))
    return bytes(buf)


# ---- what the kernel refuses before verifying any path ----

MAX_BPF_REG = 11  # r0..r10 (linux/bpf.h __MAX_BPF_REG); check_reg_arg: "R%d is invalid"
_ALU_OPS = (
    BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV, BPF_OR, BPF_AND,
    BPF_LSH, BPF_RSH, BPF_MOD, BPF_XOR, BPF_MOV, BPF_ARSH,
)  # fmt: skip
_LD_PSEUDO = (
    0,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    BPF_PSEUDO_BTF_ID,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_MAP_IDX,
    BPF_PSEUDO_MAP_IDX_VALUE,
)
_CALL_PSEUDO = (0, BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL)


def _opcode_table() -> dict[int, tuple[bool, bool]]:
    """Every opcode the kernel accepts -> (dst is a register, src is a register).

    The kernel's list: kernel/bpf/core.c ``bpf_opcode_in_insntable`` (BPF_INSN_MAP, the
    cBPF carry-overs LD_ABS/LD_IND, ``may_goto``), checked by kernel/bpf/verifier.c
    ``resolve_pseudo_ldimm64`` for every instruction ("unknown opcode %02x"; a BPF_LDX
    outside BPF_MEM/BPF_MEMSX: "BPF_LDX uses reserved fields").  128 opcodes on Linux
    6.18; tests/abi/test_insn_fields.py compares this table with the running kernel.
    """
    t: dict[int, tuple[bool, bool]] = {}
    for cls in (BPF_ALU, BPF_ALU64):
        for op in _ALU_OPS:
            t[cls | op | BPF_K] = (True, False)
            t[cls | op | BPF_X] = (True, True)
        t[cls | BPF_NEG] = (True, False)
    t[BPF_ALU | BPF_END | BPF_TO_LE] = t[BPF_ALU | BPF_END | BPF_TO_BE] = (True, False)
    t[BPF_ALU64 | BPF_END | BPF_TO_LE] = (True, False)  # bswap (ISA v4)
    for cls in (BPF_JMP, BPF_JMP32):
        for op in JMP_OP_NAMES:
            t[cls | op | BPF_K] = (True, False)
            t[cls | op | BPF_X] = (True, True)
        t[cls | BPF_JA] = (False, False)  # goto (JMP: off), gotol (JMP32: imm)
    t[BPF_JMP | BPF_CALL] = t[BPF_JMP | BPF_EXIT] = (False, False)
    t[BPF_JMP | BPF_JCOND] = (False, False)  # may_goto
    for size in SIZE_BYTES:
        t[BPF_LDX | BPF_MEM | size] = (True, True)
        t[BPF_ST | BPF_MEM | size] = (True, False)
        t[BPF_STX | BPF_MEM | size] = (True, True)
        t[BPF_STX | BPF_ATOMIC | size] = (True, True)  # B/H: load-acquire, store-release
        if size != BPF_DW:
            t[BPF_LDX | BPF_MEMSX | size] = (True, True)
            t[BPF_LD | BPF_ABS | size] = (False, False)
            t[BPF_LD | BPF_IND | size] = (False, True)
    t[BPF_LD | BPF_IMM | BPF_DW] = (True, False)  # src: the pseudo kind
    return t


OPCODES: dict[int, tuple[bool, bool]] = _opcode_table()
_RARE = frozenset((BPF_LD | BPF_IMM | BPF_DW, BPF_JMP | BPF_CALL))


def field_error(x: Insn) -> str | None:
    """What the kernel says about an instruction it refuses whatever the path, or None.

    Kernel wording (kernel/bpf/verifier.c): ``unknown opcode 0e`` (resolve_pseudo_ldimm64;
    for a BPF_LDX of another mode than BPF_MEM/BPF_MEMSX ``BPF_LDX uses reserved fields``),
    ``R11 is invalid`` (check_reg_arg; only fields the opcode reads as registers),
    ``unrecognized bpf_ld_imm64 insn`` (a pseudo kind it lacks, or BPF_PSEUDO_MAP_FD/IDX
    with upper 32 bits set), ``BPF_CALL uses reserved fields`` (a call kind other than
    helper, BPF-to-BPF, kfunc).  Fields the kernel only requires to be zero, and helper
    ids (``invalid func unknown#212``, check_helper_call, on the path that reaches the
    call: :func:`bpfdsl.abi.helpers.kernel_refuses_helper`), are left to the checker and
    the interpreter, which report them on the path.
    """
    regs = OPCODES.get(x.opcode)
    if regs is None:
        if x.cls == BPF_LDX:  # resolve_pseudo_ldimm64 looks at LDX's mode first
            return "BPF_LDX uses reserved fields"
        return f"unknown opcode {x.opcode:02x}"
    if regs[0] and x.dst >= MAX_BPF_REG:
        return f"R{x.dst} is invalid"
    if regs[1] and x.src >= MAX_BPF_REG:
        return f"R{x.src} is invalid"
    if x.is_ld_imm64:
        high = (x.imm & 0xFFFF_FFFF_FFFF_FFFF) >> 32
        if x.src not in _LD_PSEUDO or (x.src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_IDX) and high):
            return "unrecognized bpf_ld_imm64 insn"
    elif x.is_call:
        if x.src not in _CALL_PSEUDO:
            return "BPF_CALL uses reserved fields"
        # a helper id the kernel lacks is refused on a path only (check_helper_call: the
        # kernel accepts a call of helper 250 it never reaches), by the checker and the
        # interpreter at the call, not here
    return None


def check_jumps(insns: Sequence[Insn], *, calls: bool = True) -> None:
    """Raise :class:`InsnError` for a jump (``calls``: also a BPF-to-BPF call) whose target
    is outside the program or the second half of an ld_imm64 (kernel/bpf/verifier.c
    check_subprogs/check_cfg: "jump out of range from insn 5 to 3006", "call to invalid
    destination"; a jump into an ld_imm64 the kernel reports as an unreachable insn).
    Pass ``calls=False`` for one function of an object, whose calls point at other
    functions until they are linked."""
    slots = slot_offsets(insns)
    total = slots[-1] + insns[-1].width if insns else 0
    starts = set(slots)
    for i, x in enumerate(insns):
        if not x.is_jmp_class or x.is_exit or (x.is_call and not (calls and x.is_pseudo_call)):
            continue
        wide = x.is_pseudo_call or (x.cls == BPF_JMP32 and x.op == BPF_JA)
        t = slots[i] + 1 + (x.imm if wide else x.off)
        if not 0 <= t < total:
            msg = (
                f"call to invalid destination {t}"
                if x.is_call
                else f"jump out of range from insn {slots[i]} to {t}"
            )
            raise InsnError(msg, slots[i], x)
        if t not in starts:
            msg = (
                f"function call to insn {t} in the middle of ldimm64"
                if x.is_call
                else f"jump into the middle of ldimm64 insn {t - 1}"
            )
            raise InsnError(msg, slots[i], x)


def validate(insns: Sequence[Insn]) -> None:
    """Everything :func:`decode` and :func:`check_jumps` refuse, for a whole (linked or
    hand-built) program: raises :class:`InsnError` naming the first bad slot."""
    if not insns:
        return
    for s, x in zip(slot_offsets(insns), insns, strict=True):
        bad = field_error(x)
        if bad is not None:
            raise InsnError(bad, s, x)
    check_jumps(insns)


def slot_offsets(insns: Sequence[Insn]) -> list[int]:
    """Slot number of each instruction (ld_imm64 takes two slots)."""
    out, s = [], 0
    for x in insns:
        out.append(s)
        s += x.width
    return out


def index_by_slot(insns: Sequence[Insn]) -> dict[int, int]:
    """Slot number -> list index (only slots where an instruction starts)."""
    return {s: i for i, s in enumerate(slot_offsets(insns))}


def jump_target(
    insns: Sequence[Insn],
    i: int,
    slots: Sequence[int] | None = None,
    by_slot: dict[int, int] | None = None,
) -> int | None:
    """List index a jump (or pseudo call) at index ``i`` goes to; None if it lands mid-insn
    or outside the program.  Pass precomputed ``slots``/``by_slot`` in loops."""
    x = insns[i]
    slots = slots if slots is not None else slot_offsets(insns)
    by_slot = by_slot if by_slot is not None else index_by_slot(insns)
    delta = x.imm if (x.is_pseudo_call or (x.cls == BPF_JMP32 and x.op == BPF_JA)) else x.off
    return by_slot.get(slots[i] + 1 + delta)


# ---- constructors (cilium asm style) ----


def mov64_imm(dst: int, imm: int) -> Insn:
    return Insn(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm)


def mov64_reg(dst: int, src: int) -> Insn:
    return Insn(BPF_ALU64 | BPF_MOV | BPF_X, dst, src)


def mov32_imm(dst: int, imm: int) -> Insn:
    return Insn(BPF_ALU | BPF_MOV | BPF_K, dst, 0, 0, imm)


def mov32_reg(dst: int, src: int) -> Insn:
    return Insn(BPF_ALU | BPF_MOV | BPF_X, dst, src)


def alu64_imm(op: int, dst: int, imm: int) -> Insn:
    return Insn(BPF_ALU64 | op | BPF_K, dst, 0, 0, imm)


def alu64_reg(op: int, dst: int, src: int) -> Insn:
    return Insn(BPF_ALU64 | op | BPF_X, dst, src)


def alu32_imm(op: int, dst: int, imm: int) -> Insn:
    return Insn(BPF_ALU | op | BPF_K, dst, 0, 0, imm)


def alu32_reg(op: int, dst: int, src: int) -> Insn:
    return Insn(BPF_ALU | op | BPF_X, dst, src)


def endian(dst: int, bits: int, to_be: bool = True) -> Insn:
    """``r = be16 r`` etc. (BPF_ALU | BPF_END)."""
    return Insn(BPF_ALU | BPF_END | (BPF_TO_BE if to_be else BPF_TO_LE), dst, 0, 0, bits)


def ld_imm64(dst: int, imm: int, src: int = 0) -> Insn:
    return Insn(_LD_IMM64, dst, src, 0, _s64(imm))


def ld_map_fd(dst: int, fd: int) -> Insn:
    """ld_imm64 with ``src = BPF_PSEUDO_MAP_FD``: the kernel turns ``fd`` into a map pointer."""
    return ld_imm64(dst, fd, BPF_PSEUDO_MAP_FD)


def ld_map_value(dst: int, fd: int, offset: int) -> Insn:
    """ld_imm64 with ``src = BPF_PSEUDO_MAP_VALUE``: pointer to byte ``offset`` of map value 0."""
    return Insn(
        _LD_IMM64,
        dst,
        BPF_PSEUDO_MAP_VALUE,
        0,
        _s64((fd & 0xFFFFFFFF) | ((offset & 0xFFFFFFFF) << 32)),
    )


def ldx_mem(size: int, dst: int, src: int, off: int) -> Insn:
    """``dst = *(size *)(src + off)``; ``size`` in bytes."""
    return Insn(BPF_LDX | BPF_MEM | _SIZE_BY_BYTES[size], dst, src, off)


def stx_mem(size: int, dst: int, src: int, off: int) -> Insn:
    """``*(size *)(dst + off) = src``; ``size`` in bytes."""
    return Insn(BPF_STX | BPF_MEM | _SIZE_BY_BYTES[size], dst, src, off)


def st_mem(size: int, dst: int, off: int, imm: int) -> Insn:
    """``*(size *)(dst + off) = imm``; ``size`` in bytes."""
    return Insn(BPF_ST | BPF_MEM | _SIZE_BY_BYTES[size], dst, 0, off, imm)


def atomic(size: int, op: int, dst: int, src: int, off: int) -> Insn:
    """``lock *(size *)(dst + off) op= src``; ``op`` like ``BPF_ADD`` or ``BPF_ADD | BPF_FETCH``."""
    return Insn(BPF_STX | BPF_ATOMIC | _SIZE_BY_BYTES[size], dst, src, off, op)


def jmp_imm(op: int, dst: int, imm: int, off: int) -> Insn:
    return Insn(BPF_JMP | op | BPF_K, dst, 0, off, imm)


def jmp_reg(op: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_JMP | op | BPF_X, dst, src, off)


def jmp32_imm(op: int, dst: int, imm: int, off: int) -> Insn:
    return Insn(BPF_JMP32 | op | BPF_K, dst, 0, off, imm)


def jmp32_reg(op: int, dst: int, src: int, off: int) -> Insn:
    return Insn(BPF_JMP32 | op | BPF_X, dst, src, off)


def ja(off: int) -> Insn:
    return Insn(BPF_JMP | BPF_JA, 0, 0, off)


def call(helper_id: int) -> Insn:
    return Insn(BPF_JMP | BPF_CALL, 0, 0, 0, helper_id)


def call_pc(off: int) -> Insn:
    """BPF-to-BPF call to slot ``this + 1 + off``."""
    return Insn(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, off)


def exit_() -> Insn:
    return Insn(BPF_JMP | BPF_EXIT)


# ---- printing (kernel verifier log syntax) ----


def _reg(r: int, wide: bool) -> str:
    return f"{'r' if wide else 'w'}{r}"


def _helper_name(helper_id: int) -> str:
    return f"{kernel_helper_name(helper_id) or 'unknown'}#{helper_id}"


def format_insn(
    x: Insn, *, with_code: bool = True, symbol: Callable[[Insn], str | None] | None = None
) -> str:
    """One instruction in the kernel log's syntax: ``(61) r2 = *(u32 *)(r1 +4)``.

    ``symbol(insn)`` may name an ld_imm64 operand (``map[drops]``) for disassembly.
    """
    body = _format_body(x, symbol)
    return f"({x.opcode:02x}) {body}" if with_code else body


def _format_body(x: Insn, symbol: Callable[[Insn], str | None] | None) -> str:
    c = x.cls
    if c in (BPF_ALU, BPF_ALU64):
        wide = c == BPF_ALU64
        d = _reg(x.dst, wide)
        if x.op == BPF_END:
            r = f"r{x.dst}"  # the kernel prints byte swaps on r even for BPF_ALU
            if wide:
                return f"{r} = bswap{x.imm} {r}"
            return f"{r} = {'be' if x.source == BPF_TO_BE else 'le'}{x.imm} {r}"
        if x.op == BPF_NEG:
            return f"{d} = -{d}"
        name = ALU_OP_NAMES.get(x.op)
        if name is None:
            return f"invalid alu opcode {x.opcode:#04x}"
        if x.off and x.op in (BPF_DIV, BPF_MOD):
            name = "s" + name
        if x.source == BPF_X:
            s = _reg(x.src, wide)
            if x.op == BPF_MOV and x.off:
                return f"{d} = (s{x.off}){s}"
            return f"{d} {name} {s}"
        return f"{d} {name} {x.imm}"
    if c == BPF_LDX:
        sign = "s" if x.mode == BPF_MEMSX else "u"
        return f"r{x.dst} = *({sign}{x.size * 8} *)(r{x.src} {x.off:+d})"
    if c == BPF_STX and x.mode == BPF_ATOMIC:
        return _format_atomic(x)
    if c == BPF_STX:
        return f"*({_SIZE_NAMES[x.opcode & 0x18]} *)(r{x.dst} {x.off:+d}) = r{x.src}"
    if c == BPF_ST:
        return f"*({_SIZE_NAMES[x.opcode & 0x18]} *)(r{x.dst} {x.off:+d}) = {x.imm}"
    if c == BPF_LD:
        if x.is_ld_imm64:
            named = symbol(x) if symbol else None
            if named:
                return f"r{x.dst} = {named}"
            if x.src == BPF_PSEUDO_MAP_FD:
                return f"r{x.dst} = map[fd:{x.imm & 0xFFFFFFFF}]"
            if x.src == BPF_PSEUDO_MAP_VALUE:
                v = x.imm & 0xFFFFFFFFFFFFFFFF
                return f"r{x.dst} = map[fd:{v & 0xFFFFFFFF}][0]+{v >> 32}"
            return f"r{x.dst} = {x.imm & 0xFFFFFFFFFFFFFFFF:#x}"
        if x.mode == BPF_ABS:
            return f"r0 = *({_SIZE_NAMES[x.opcode & 0x18]} *)skb[{x.imm}]"
        if x.mode == BPF_IND:
            return f"r0 = *({_SIZE_NAMES[x.opcode & 0x18]} *)skb[r{x.src} + {x.imm}]"
        return f"invalid ld opcode {x.opcode:#04x}"
    # JMP / JMP32
    if x.is_call:
        if x.src == BPF_PSEUDO_CALL:
            return f"call pc{x.imm:+d}"
        if x.src == BPF_PSEUDO_KFUNC_CALL:
            return f"call kernel-function#{x.imm}"
        return f"call {_helper_name(x.imm)}"
    if x.is_exit:
        return "exit"
    if x.op == BPF_JA:
        return f"gotol pc{x.imm:+d}" if c == BPF_JMP32 else f"goto pc{x.off:+d}"
    if c == BPF_JMP and x.op == BPF_JCOND:
        return f"may_goto pc{x.off:+d}"
    name = JMP_OP_NAMES.get(x.op)
    if name is None:
        return f"invalid jmp opcode {x.opcode:#04x}"
    wide = c == BPF_JMP
    rhs = _reg(x.src, wide) if x.source == BPF_X else f"{x.imm & 0xFFFFFFFF:#x}"
    return f"if {_reg(x.dst, wide)} {name} {rhs} goto pc{x.off:+d}"


def _format_atomic(x: Insn) -> str:
    wide = x.size == 8
    sz = _SIZE_NAMES[x.opcode & 0x18]
    mem = f"({sz} *)(r{x.dst} {x.off:+d})"
    s = _reg(x.src, wide)
    base = x.imm & ~BPF_FETCH
    if x.imm == BPF_XCHG:
        return f"{s} = atomic{'64' if wide else ''}_xchg({mem}, {s})"
    if x.imm == BPF_CMPXCHG:
        r0 = _reg(0, wide)
        return f"{r0} = atomic{'64' if wide else ''}_cmpxchg({mem}, {r0}, {s})"
    name = _ATOMIC_NAMES.get(base)
    if name is None:
        return f"invalid atomic op {x.imm:#x}"
    if x.imm & BPF_FETCH:
        return f"{s} = atomic{'64' if wide else ''}_fetch_{name}({mem}, {s})"
    opsym = {"add": "+=", "and": "&=", "or": "|=", "xor": "^="}[name]
    return f"lock *{mem} {opsym} {s}"


def format_program(insns: Sequence[Insn]) -> list[str]:
    """``"slot: (code) text"`` lines for a whole program, numbered by slot like the kernel."""
    return [f"{s}: {format_insn(x)}" for s, x in zip(slot_offsets(insns), insns, strict=True)]
