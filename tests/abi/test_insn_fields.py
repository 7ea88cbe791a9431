"""Instruction fields a corrupted (or hand-made) object can put out of range: register
numbers over r10, unknown opcodes, ld_imm64 pseudo kinds, call kinds, helper ids outside
enum bpf_func_id, jump targets outside the program.  The one decoder (bpfdsl.abi.insn) refuses
each with the kernel's own words, so `bpfdsl check`, `disasm` and `run` all stop with the
same clean error, and the interpreter refuses hand-built programs the same way before
running them.  The kernel tests show the kernel says the same words."""

from __future__ import annotations

import contextlib
import io
import random
import struct

import pytest
from support.paths import ROOT

from bpfdsl import compiler
from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import (
    BPF_ALU64,
    BPF_CALL,
    BPF_DW,
    BPF_IMM,
    BPF_JCOND,
    BPF_JEQ,
    BPF_JMP,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_PSEUDO_MAP_FD,
    BPF_W,
    BPF_X,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.cli import build_parser, main
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.interp import InterpError, Machine
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object

FILTER = ROOT / "progs" / "xdp_udp_filter.bpfd"
# one UDP/IPv4 frame to 192.168.0.2:9999 (the port xdp_udp_filter drops)
FRAME = "ffffffffffff00000000000108004500001c0001000040110000c0a80001c0a800020035270f00080000"

# (program, the kernel's verifier-log line for it); every one is refused on any path
BAD = {
    "dst_r11": ([I.mov64_reg(11, 1), I.mov64_imm(0, 2), I.exit_()], "R11 is invalid"),
    "src_r12": ([I.mov64_reg(0, 12), I.exit_()], "R12 is invalid"),
    "ldx_r15": ([I.mov64_imm(0, 2), I.ldx_mem(4, 15, 1, 0), I.exit_()], "R15 is invalid"),
    "stx_src_r11": (
        [I.mov64_imm(0, 2), I.stx_mem(8, 10, 11, -8), I.exit_()],
        "R11 is invalid",
    ),
    "jmp_src_r13": (
        [I.mov64_imm(0, 2), I.jmp_reg(BPF_JEQ, 0, 13, 0), I.exit_()],
        "R13 is invalid",
    ),
    "opcode_8e": ([I.Insn(0x8E), I.mov64_imm(0, 2), I.exit_()], "unknown opcode 8e"),
    "opcode_e4": ([I.Insn(0xE4), I.mov64_imm(0, 2), I.exit_()], "unknown opcode e4"),
    "ldx_mode_imm": (
        [I.Insn(BPF_LDX | BPF_IMM | BPF_W), I.mov64_imm(0, 2), I.exit_()],
        "BPF_LDX uses reserved fields",
    ),
    "jump_past_end": (
        [I.mov64_imm(0, 2), I.ja(5), I.exit_()],
        "jump out of range from insn 1 to 7",
    ),
    "jump_before_start": (
        [I.mov64_imm(0, 2), I.jmp_imm(BPF_JEQ, 0, 0, -5), I.exit_()],
        "jump out of range from insn 1 to -3",
    ),
    "ld_imm64_kind_7": (
        [I.ld_imm64(1, 5, 7), I.mov64_imm(0, 2), I.exit_()],
        "unrecognized bpf_ld_imm64 insn",
    ),
    "ld_map_fd_high_imm": (
        [I.ld_imm64(1, 5 | 1 << 32, BPF_PSEUDO_MAP_FD), I.mov64_imm(0, 2), I.exit_()],
        "unrecognized bpf_ld_imm64 insn",
    ),
    "call_kind_7": (
        [I.Insn(BPF_JMP | BPF_CALL, 0, 7, 0, 1), I.mov64_imm(0, 2), I.exit_()],
        "BPF_CALL uses reserved fields",
    ),
    "call_past_end": ([I.call_pc(5), I.exit_()], "call to invalid destination"),
}

# helper ids the kernel lacks: refused where a path reaches the call (check_helper_call),
# so the decoder lets them through and the checker / interpreter refuse them at the call
ON_PATH = {
    "helper_212": ([I.call(212), I.mov64_imm(0, 2), I.exit_()], "invalid func unknown#212"),
    "helper_5000": ([I.call(5000), I.mov64_imm(0, 2), I.exit_()], "invalid func unknown#5000"),
    "helper_minus_1": ([I.call(-1), I.mov64_imm(0, 2), I.exit_()], "invalid func unknown#-1"),
    "helper_0": (
        [I.call(0), I.mov64_imm(0, 2), I.exit_()],
        "program of this type cannot use helper bpf_unspec#0",
    ),
}
# the same calls behind a branch never taken: the kernel accepts the program
DEAD = [I.mov64_imm(0, 2), I.jmp_imm(BPF_JEQ, 0, 2, 1)]


def _kernel_log(prog: list[I.Insn]) -> str:
    """The verifier log of loading ``prog`` as XDP ('' when the kernel accepts it)."""
    try:
        fd, _ = syscall.prog_load(ProgramType.XDP, I.encode(prog), "GPL")
    except syscall.BpfError as e:
        return e.log
    fd.close()
    return ""


@pytest.mark.parametrize("name", sorted(BAD))
def test_decoder_and_interpreter_refuse_with_kernel_words(name):
    prog, reason = BAD[name]
    with pytest.raises(I.InsnError) as ei:
        I.validate(prog)
    assert ei.value.reason.startswith(reason)
    with pytest.raises(InterpError) as ie:  # refused before any run, not at a fault
        Machine(prog)
    d = ie.value.diagnostics[0]
    assert d.code == "bad-insn" and d.message.startswith(reason)
    assert "does not model" not in d.render()  # the kernel refuses it too: not "unmodelled"


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(BAD))
def test_kernel_refuses_with_the_same_words(name):
    prog, reason = BAD[name]
    assert reason in _kernel_log(prog)


@pytest.mark.parametrize("name", sorted(ON_PATH))
def test_unknown_helper_refused_at_the_call_on_a_path(name):
    """The decoder lets the call through; the checker rejects it at insn 0 (not "cannot
    check"), the interpreter faults when it reaches it with the same words."""
    prog, reason = ON_PATH[name]
    I.validate(prog)
    r = check_insns(prog, ProgramType.XDP)
    assert not r.ok and not r.unchecked
    assert r.errors[0].message == reason and r.errors[0].idx == 0
    with pytest.raises(InterpError) as ie:
        Machine(prog).run(bytes(64))
    assert reason in ie.value.diagnostics[0].message
    dead = DEAD + prog[:1] + [I.exit_()]
    r = check_insns(dead, ProgramType.XDP)
    assert r.ok, r.errors  # never reached: no error (the kernel's dead code)


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(ON_PATH))
def test_kernel_refuses_unknown_helpers_on_a_path_only(name):
    prog, reason = ON_PATH[name]
    assert reason in _kernel_log(prog)
    assert _kernel_log(DEAD + prog[:1] + [I.exit_()]) == ""


@pytest.mark.kernel
def test_opcode_table_is_the_kernels():
    """OPCODES holds exactly the opcodes this kernel's resolve_pseudo_ldimm64 lets through."""
    refused = set()
    for code in range(256):
        if code == BPF_LD | BPF_IMM | BPF_DW:
            continue  # needs its second half; the table case above covers it
        log = _kernel_log([I.Insn(code), I.mov64_imm(0, 2), I.exit_()])
        if "unknown opcode" in log or "BPF_LDX uses reserved fields" in log:
            refused.add(code)
    known = set(range(256)) - refused
    assert known == set(I.OPCODES)
    assert len(known) == 128  # Linux 6.18


def test_good_programs_pass():
    """What the kernel does accept decodes: every progs/ object, may_goto, ld_imm64 kinds."""
    for src in sorted((ROOT / "progs").glob("*.bpfd")):
        spec = read_object(compiler.compile_file(src).obj)
        for p in spec.programs.values():
            I.validate(p.insns)
    I.validate([I.Insn(BPF_JMP | BPF_JCOND), I.mov64_imm(0, 2), I.exit_()])
    I.validate([I.ld_map_value(1, 3, 8), I.call(211), I.exit_()])
    assert I.format_insn(I.Insn(BPF_JMP | BPF_JCOND, off=3)) == "(e5) may_goto pc+3"


def _filter_object() -> tuple[bytes, int, list[I.Insn]]:
    """xdp_udp_filter's object, the byte offset of its code, and its instructions."""
    obj = compiler.compile_file(FILTER).obj
    prog = read_object(obj).programs["udp_filter"]
    at = obj.find(I.encode(prog.insns))
    assert at > 0
    return obj, at, prog.insns


def _patch(obj: bytes, at: int, slot: int, **fields: int) -> bytes:
    b = bytearray(obj)
    code, regs, off, imm = struct.unpack_from("<BBhi", b, at + 8 * slot)
    dst, src = fields.get("dst", regs & 15), fields.get("src", regs >> 4)
    struct.pack_into(
        "<BBhi",
        b,
        at + 8 * slot,
        fields.get("code", code),
        dst | src << 4,
        fields.get("off", off),
        fields.get("imm", imm),
    )
    return bytes(b)


def test_r11_object_refused_alike_by_check_disasm_run(tmp_path, capsys):
    """The reported crash: an object with r11 made `run --engine interp` raise IndexError."""
    obj, at, insns = _filter_object()
    slots = I.slot_offsets(insns)
    i = next(k for k, x in enumerate(insns) if x.opcode == BPF_ALU64 | BPF_MOV | BPF_X)
    bad = tmp_path / "r11.o"
    bad.write_bytes(_patch(obj, at, slots[i], dst=11))
    line = insns[i]
    want = f"section 'xdp' function 'udp_filter': insn {slots[i]}: R11 is invalid"
    for argv in (
        ["check", str(bad)],
        ["disasm", str(bad)],
        ["run", "--engine", "interp", "--hex", FRAME, str(bad)],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert want in err and f"r11 = r{line.src}" in err, (argv, err)
        assert "xdp_udp_filter.bpfd:" in err and "Traceback" not in err  # the source line


def test_unknown_helper_in_object_is_rejected_not_unmodelled(tmp_path, capsys):
    """Before: `helper unknown helper (#5000) is not implemented ... the kernel supports
    this`, then an object refused when read (exit 2, "cannot check"); the kernel has no
    helper 5000 and refuses a path that calls it: `check` rejects (exit 1) at the call's
    insn and source line, the interpreter faults there."""
    obj, at, insns = _filter_object()
    slots = I.slot_offsets(insns)
    i = next(k for k, x in enumerate(insns) if x.is_helper_call)
    bad = tmp_path / "h.o"
    bad.write_bytes(_patch(obj, at, slots[i], imm=5000))
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr()
    out = err.out + err.err
    assert "invalid func unknown#5000" in out and f"insn {slots[i]}: (85) call unknown#5000" in out
    assert "xdp_udp_filter.bpfd:" in out and "REJECTED" in out
    every = obj
    for k, x in enumerate(insns):
        if x.is_helper_call:
            every = _patch(every, at, slots[k], imm=5000)
    bad.write_bytes(every)  # the frame's path reaches one of them
    main(["run", "--engine", "interp", "--hex", FRAME, str(bad)])
    err = capsys.readouterr()
    assert "invalid func unknown#5000" in err.out + err.err
    assert "kernel supports this" not in err.out + err.err


def test_corrupted_fields_never_escape_as_python_errors(tmp_path):
    """Every field of random instructions of progs/ objects set out of range: check, disasm
    and run end in a Diagnostic (rendered without a traceback), never another exception."""
    rng = random.Random(20261201)
    bases = []
    for name in ("xdp_udp_filter", "xdp_pong", "sk_msg_policy", "xdp_acl"):
        obj = compiler.compile_file(ROOT / "progs" / f"{name}.bpfd").obj
        for p in read_object(obj).programs.values():
            code = I.encode(p.insns)
            bases.append((obj, obj.find(code), len(code) // 8))
    values = {
        "dst": [11, 12, 15],
        "src": [7, 11, 13, 15],
        "off": [-32768, -2, 1, 1000, 32767],
        "imm": [-1, 3, 212, 5000, 0x7FFFFFFF, -0x80000000],
        "code": list(range(256)),
    }
    parser = build_parser()
    path = tmp_path / "m.o"
    outcomes = {"diagnostic": 0, "ran": 0}
    for _ in range(150):
        obj, at, n = rng.choice(bases)
        field = rng.choice(sorted(values))
        path.write_bytes(_patch(obj, at, rng.randrange(n), **{field: rng.choice(values[field])}))
        for argv in (
            ["check", str(path)],
            ["disasm", str(path)],
            ["run", "--engine", "interp", "--hex", FRAME, str(path)],
        ):
            args = parser.parse_args(argv)
            args.json = args.verbose = False
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    args.func(args)
                outcomes["ran"] += 1
            except DiagnosticError as e:
                assert "Traceback" not in e.render()
                outcomes["diagnostic"] += 1
    assert outcomes["diagnostic"] > 50 and outcomes["ran"] > 50
