"""Instruction semantics of the userspace machine: every class on hand-built programs, with
the value the kernel's interpreter gives (kernel/bpf/core.c), checked against the kernel
itself (BPF_PROG_TEST_RUN of the same instructions) where root is available."""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi import opcodes as A  # shorter op names below
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import (
    BPF_ALU,
    BPF_ALU64,
    BPF_B,
    BPF_DIV,
    BPF_END,
    BPF_H,
    BPF_JA,
    BPF_JMP32,
    BPF_K,
    BPF_LDX,
    BPF_MEMSX,
    BPF_MOD,
    BPF_MOV,
    BPF_NEG,
    BPF_W,
    BPF_X,
)
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.interp import InterpError, Machine, XdpContext

M64 = (1 << 64) - 1

ALU = I.alu64_imm
ALUX = I.alu64_reg


SUB = object()  # marks where the subprogram starts in a case body
CALL_SUB = object()  # a call to that subprogram


def sdiv(dst: int, imm: int, wide: bool = True) -> I.Insn:
    return I.Insn((BPF_ALU64 if wide else BPF_ALU) | BPF_DIV | BPF_K, dst, 0, 1, imm)


def smod(dst: int, imm: int, wide: bool = True) -> I.Insn:
    return I.Insn((BPF_ALU64 if wide else BPF_ALU) | BPF_MOD | BPF_K, dst, 0, 1, imm)


def movsx(dst: int, src: int, bits: int, wide: bool = True) -> I.Insn:
    return I.Insn((BPF_ALU64 if wide else BPF_ALU) | BPF_MOV | BPF_X, dst, src, bits)


def bswap(dst: int, bits: int) -> I.Insn:
    return I.Insn(BPF_ALU64 | BPF_END, dst, 0, 0, bits)


def ldsx(size: int, dst: int, src: int, off: int) -> I.Insn:
    sz = {1: BPF_B, 2: BPF_H, 4: BPF_W}[size]
    return I.Insn(BPF_LDX | BPF_MEMSX | sz, dst, src, off)


def gotol(imm: int) -> I.Insn:
    return I.Insn(BPF_JMP32 | BPF_JA, 0, 0, 0, imm)


# (name, body leaving the result in r0, expected 64-bit r0)
CASES = [
    ("add_wraps", [I.ld_imm64(0, M64), ALU(A.BPF_ADD, 0, 2)], 1),
    ("sub_imm_sign_extends", [I.mov64_imm(0, 5), ALU(A.BPF_SUB, 0, -3)], 8),
    ("mul64", [I.ld_imm64(0, 0x1_0000_0001), ALU(A.BPF_MUL, 0, 3)], 0x3_0000_0003),
    ("div_by_zero_is_zero", [I.mov64_imm(0, 7), I.mov64_imm(1, 0), ALUX(A.BPF_DIV, 0, 1)], 0),
    ("mod_by_zero_keeps", [I.mov64_imm(0, 7), I.mov64_imm(1, 0), ALUX(A.BPF_MOD, 0, 1)], 7),
    (
        "mod32_by_zero_truncates",
        [I.ld_imm64(0, 0x1_0000_0007), I.mov64_imm(1, 0), I.alu32_reg(A.BPF_MOD, 0, 1)],
        7,
    ),
    ("udiv_negative", [I.mov64_imm(0, -8), ALU(A.BPF_DIV, 0, 2)], (M64 - 7) // 2),
    ("sdiv_negative", [I.mov64_imm(0, -7), sdiv(0, 2)], (-3) & M64),
    ("smod_negative", [I.mov64_imm(0, -7), smod(0, 2)], (-1) & M64),
    ("sdiv32", [I.mov32_imm(0, -9), sdiv(0, 4, wide=False)], (-2) & 0xFFFFFFFF),
    ("smod32_neg_divisor", [I.mov32_imm(0, 9), smod(0, -4, wide=False)], 1),
    ("alu32_zero_extends", [I.ld_imm64(0, M64), I.alu32_imm(A.BPF_ADD, 0, 1)], 0),
    ("mov32_imm_zero_extends", [I.mov32_imm(0, -1)], 0xFFFFFFFF),
    ("mov64_imm_sign_extends", [I.mov64_imm(0, -1)], M64),
    ("lsh_masked", [I.mov64_imm(0, 1), I.mov64_imm(1, 65), ALUX(A.BPF_LSH, 0, 1)], 2),
    ("rsh32", [I.ld_imm64(0, 0xF0000000_80000000), I.alu32_imm(A.BPF_RSH, 0, 4)], 0x08000000),
    ("arsh64", [I.mov64_imm(0, -16), ALU(A.BPF_ARSH, 0, 2)], (-4) & M64),
    ("arsh32", [I.mov32_imm(0, -16), I.alu32_imm(A.BPF_ARSH, 0, 2)], 0xFFFFFFFC),
    ("neg64", [I.mov64_imm(0, 5), I.Insn(BPF_ALU64 | BPF_NEG, 0)], (-5) & M64),
    ("neg32", [I.mov64_imm(0, 5), I.Insn(BPF_ALU | BPF_NEG, 0)], 0xFFFFFFFB),
    (
        "xor_or_and",
        [
            I.mov64_imm(0, 0xF0),
            ALU(A.BPF_XOR, 0, 0xFF),
            ALU(A.BPF_OR, 0, 0x100),
            ALU(A.BPF_AND, 0, 0x10F),
        ],
        0x10F,
    ),
    ("movsx8", [I.mov64_imm(1, 0x80), movsx(0, 1, 8)], (-128) & M64),
    ("movsx16_32bit", [I.mov64_imm(1, 0x8001), movsx(0, 1, 16, wide=False)], 0xFFFF8001),
    ("movsx32", [I.ld_imm64(1, 0x1_8000_0000), movsx(0, 1, 32)], 0xFFFFFFFF_80000000),
    ("be16", [I.ld_imm64(0, 0x11223344_55667788), I.endian(0, 16)], 0x8877),
    ("be32", [I.ld_imm64(0, 0x11223344_55667788), I.endian(0, 32)], 0x88776655),
    ("be64", [I.ld_imm64(0, 0x11223344_55667788), I.endian(0, 64)], 0x88776655_44332211),
    ("le16_truncates", [I.ld_imm64(0, 0x11223344_55667788), I.endian(0, 16, to_be=False)], 0x7788),
    ("bswap32", [I.ld_imm64(0, 0x11223344_55667788), bswap(0, 32)], 0x88776655),
    (
        "jmp32_ignores_high_half",
        [
            I.ld_imm64(1, 0x5_00000001),
            I.mov64_imm(0, 1),
            I.jmp32_imm(A.BPF_JEQ, 1, 1, 1),
            I.mov64_imm(0, 2),
        ],
        1,
    ),
    (
        "jsgt_signed",
        [I.mov64_imm(1, -1), I.mov64_imm(0, 1), I.jmp_imm(A.BPF_JSGT, 1, 0, 1), I.mov64_imm(0, 2)],
        2,
    ),
    (
        "jgt_unsigned",
        [I.mov64_imm(1, -1), I.mov64_imm(0, 1), I.jmp_imm(A.BPF_JGT, 1, 0, 1), I.mov64_imm(0, 2)],
        1,
    ),
    (
        "jset",
        [I.mov64_imm(1, 6), I.mov64_imm(0, 1), I.jmp_imm(A.BPF_JSET, 1, 1, 1), I.mov64_imm(0, 2)],
        2,
    ),
    (
        "gotol",
        [I.mov64_imm(0, 1), I.jmp_imm(A.BPF_JEQ, 0, 2, 1), gotol(1), I.mov64_imm(0, 2)],
        1,
    ),
    (
        "stack_store_load_sx",
        [I.st_mem(2, 10, -2, 0xFFFE), ldsx(2, 0, 10, -2)],
        (-2) & M64,
    ),
    (
        "stack_u64_roundtrip",
        [I.ld_imm64(1, 0x0102030405060708), I.stx_mem(8, 10, 1, -8), I.ldx_mem(1, 0, 10, -7)],
        0x07,
    ),
    (
        "atomic_fetch_add64",
        [
            I.st_mem(8, 10, -8, 40),
            I.mov64_imm(1, 2),
            I.atomic(8, A.BPF_ADD | A.BPF_FETCH, 10, 1, -8),
            I.ldx_mem(8, 0, 10, -8),
            ALU(A.BPF_MUL, 0, 1000),
            ALUX(A.BPF_ADD, 0, 1),
        ],
        42040,
    ),
    (
        "atomic_or32",
        [
            I.st_mem(4, 10, -4, 1),
            I.mov64_imm(1, 6),
            I.atomic(4, A.BPF_OR, 10, 1, -4),
            I.ldx_mem(4, 0, 10, -4),
        ],
        7,
    ),
    (
        "atomic_xchg",
        [
            I.st_mem(8, 10, -8, 5),
            I.mov64_imm(1, 9),
            I.atomic(8, A.BPF_XCHG, 10, 1, -8),
            I.ldx_mem(8, 0, 10, -8),
            ALU(A.BPF_LSH, 0, 8),
            ALUX(A.BPF_OR, 0, 1),
        ],
        0x905,
    ),
    (
        "atomic_fetch_xor_into_r0",  # the source register is r0: it gets the old value
        [
            I.st_mem(8, 10, -8, 6),
            I.mov64_imm(0, 3),
            I.atomic(8, A.BPF_XOR | A.BPF_FETCH, 10, 0, -8),
            I.ldx_mem(8, 1, 10, -8),
            ALU(A.BPF_LSH, 1, 8),
            ALUX(A.BPF_OR, 0, 1),
        ],
        0x506,
    ),
    (
        "cmpxchg32_hit",
        [
            I.st_mem(4, 10, -4, 3),
            I.mov64_imm(0, 3),
            I.mov64_imm(1, 8),
            I.atomic(4, A.BPF_CMPXCHG, 10, 1, -4),
            I.ldx_mem(4, 1, 10, -4),
            ALU(A.BPF_LSH, 1, 8),
            ALUX(A.BPF_OR, 0, 1),
        ],
        0x803,
    ),
    (
        "cmpxchg64_miss",
        [
            I.st_mem(8, 10, -8, 3),
            I.mov64_imm(0, 4),
            I.mov64_imm(1, 8),
            I.atomic(8, A.BPF_CMPXCHG, 10, 1, -8),
            I.ldx_mem(8, 1, 10, -8),
            ALU(A.BPF_LSH, 1, 8),
            ALUX(A.BPF_OR, 0, 1),
        ],
        0x303,
    ),
    (
        "bpf_to_bpf_call_keeps_r6_and_stack",
        [
            I.mov64_imm(6, 100),
            I.st_mem(8, 10, -8, 7),
            I.mov64_imm(1, 5),
            CALL_SUB,
            ALUX(A.BPF_ADD, 0, 6),
            I.ldx_mem(8, 1, 10, -8),
            ALUX(A.BPF_ADD, 0, 1),
            SUB,  # main ends here; the subprogram r0 = r1 * 2 clobbers r6 and its stack
            I.mov64_imm(6, 1),
            I.st_mem(8, 10, -8, 99),
            I.mov64_reg(0, 1),
            ALU(A.BPF_MUL, 0, 2),
            I.exit_(),
        ],
        5 * 2 + 100 + 7,
    ),
]


def _program(body: list, high: bool = False) -> list[I.Insn]:
    """``body`` + (``r0 >>= 32`` when ``high``) + exit, then the subprogram after SUB."""
    tail = [ALU(A.BPF_RSH, 0, 32)] if high else []
    main, sub = (
        (body[: body.index(SUB)], body[body.index(SUB) + 1 :]) if SUB in body else (body, [])
    )
    main = main + tail + [I.exit_()]
    return [I.call_pc(len(main) - i - 1) if x is CALL_SUB else x for i, x in enumerate(main)] + sub


def run_interp(body: list[I.Insn]) -> int:
    return Machine(_program(body)).run(XdpContext(bytes(64)))


@pytest.mark.parametrize("name,body,want", CASES, ids=[c[0] for c in CASES])
def test_interp_insn_semantics(name: str, body: list[I.Insn], want: int) -> None:
    assert run_interp(body) == want


@pytest.mark.kernel
@pytest.mark.parametrize("name,body,want", CASES, ids=[c[0] for c in CASES])
def test_interp_insn_matches_kernel(name: str, body: list[I.Insn], want: int) -> None:
    from bpfdsl.kernel import syscall

    got = 0
    for high in (False, True):
        prog = _program(body, high)
        fd, _ = syscall.prog_load(ProgramType.XDP, I.encode(prog), "GPL")
        with fd:
            got |= syscall.prog_test_run(fd, bytes(64)).retval << (32 if high else 0)
    assert got == want
    assert run_interp(body) == got


def test_interp_out_of_bounds_names_insn() -> None:
    prog = [I.ldx_mem(4, 2, 1, 0), I.ldx_mem(4, 0, 2, 60), I.exit_()]
    with pytest.raises(InterpError) as ei:
        Machine(prog).run(XdpContext(bytes(62)))
    msg = str(ei.value)
    assert "out-of-bounds 4-byte access to packet at offset 60" in msg
    assert "insn 1: (61) r0 = *(u32 *)(r2 +60)" in msg


def test_interp_stale_packet_pointer_after_adjust_head() -> None:
    prog = [
        I.mov64_reg(6, 1),
        I.ldx_mem(4, 7, 1, 0),  # r7 = data
        I.mov64_imm(2, 4),
        I.call(44),  # xdp_adjust_head(ctx, 4)
        I.ldx_mem(1, 0, 7, 0),  # stale
        I.exit_(),
    ]
    with pytest.raises(InterpError, match="stale packet pointer"):
        Machine(prog).run(XdpContext(bytes(64)))


def test_interp_endless_loop_hits_budget() -> None:
    with pytest.raises(InterpError, match="budget of 1000"):
        Machine([I.mov64_imm(0, 0), I.ja(-2), I.exit_()], budget=1000).run(XdpContext(bytes(64)))


def test_interp_pointer_alu32_rejected() -> None:
    prog = [I.ldx_mem(4, 2, 1, 0), I.alu32_imm(A.BPF_ADD, 2, 1), I.mov64_imm(0, 2), I.exit_()]
    with pytest.raises(InterpError, match="32-bit arithmetic on a pointer"):
        Machine(prog).run(XdpContext(bytes(64)))


def test_interp_uninitialized_register_read() -> None:
    with pytest.raises(InterpError, match="read before it is written"):
        Machine([I.mov64_reg(0, 5), I.exit_()]).run(XdpContext(bytes(64)))


def test_interp_egress_ifindex_only_in_devmap() -> None:
    prog = [I.ldx_mem(4, 0, 1, 20), I.exit_()]
    with pytest.raises(InterpError, match="egress_ifindex"):
        Machine(prog).run(XdpContext(bytes(64)))
    ctx = XdpContext(bytes(64), attach=AttachType.XDP_DEVMAP, egress_ifindex=7)
    assert Machine(prog).run(ctx) == 7


def test_interp_misaligned_stack_store_rejected() -> None:
    """B07: an 8-byte stack store at a 4-byte boundary is refused like the verifier does."""
    prog = [I.mov64_imm(1, 1), I.stx_mem(8, 10, 1, -12), I.mov64_imm(0, 2), I.exit_()]
    with pytest.raises(InterpError, match="misaligned stack access: 8 bytes at -12"):
        Machine(prog).run(XdpContext(bytes(64)))


def test_interp_hand_built_map_fd_and_value() -> None:
    """ld_imm64 BPF_PSEUDO_MAP_FD / BPF_PSEUDO_MAP_VALUE resolve to in-memory maps by fd."""
    from bpfdsl.interp import make_map

    counters = make_map("counters", MapType.ARRAY, 4, 8, 4)
    conf = make_map(".rodata", MapType.ARRAY, 4, 16, 1)
    conf.set(0, (42).to_bytes(8, "little") + (5).to_bytes(8, "little"))
    prog = [
        I.st_mem(4, 10, -4, 2),  # key = 2
        I.ld_map_fd(1, 7),
        I.mov64_reg(2, 10),
        I.alu64_imm(A.BPF_ADD, 2, -4),
        I.call(1),  # map_lookup_elem(counters, &key)
        I.jmp_imm(A.BPF_JEQ, 0, 0, 5),  # offsets count slots: ld_imm64 takes two
        I.ld_map_value(1, 9, 8),  # &rodata[8]
        I.ldx_mem(8, 1, 1, 0),  # 5
        I.atomic(8, A.BPF_ADD, 0, 1, 0),  # counters[2] += 5
        I.ldx_mem(8, 0, 0, 0),
        I.exit_(),
    ]
    m = Machine(prog, maps={7: counters, 9: conf})
    assert m.run(XdpContext(bytes(64))) == 5
    assert m.run(XdpContext(bytes(64))) == 10
    assert counters.get(2) == (10).to_bytes(8, "little")


def test_interp_env_clock_random_cpu() -> None:
    """ktime reads the settable clock, prandom follows the seed, smp_processor_id the CPU."""
    from bpfdsl.interp import Env

    def run(helper: int, env: Env) -> int:
        return Machine([I.call(helper), I.exit_()], env=env).run(XdpContext(bytes(64)))

    env = Env(clock_ns=5_000, clock_step_ns=10, cpu=3, ncpus=4, seed=42)
    assert [run(5, env), run(5, env)] == [5_000, 5_010]
    assert run(8, env) == 3
    a = [run(7, Env(seed=42)) for _ in range(2)]
    b = run(7, Env(seed=43))
    assert a[0] == a[1] and a[0] != b and 0 <= a[0] < 2**32


def test_interp_pointer_as_helper_scalar_is_a_fault() -> None:
    """redirect(ifindex = a pointer): the verifier refuses it; the machine says so."""
    prog = [I.mov64_reg(1, 10), I.mov64_imm(2, 0), I.call(23), I.exit_()]
    with pytest.raises(InterpError, match="invalid operand") as ei:
        Machine(prog).run(XdpContext(bytes(64)))
    assert ei.value.insn_index == 2
