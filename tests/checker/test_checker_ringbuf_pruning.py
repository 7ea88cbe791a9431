"""Ring buffer reservations at the checker's prune points, as the kernel verifier compares
them (kernel/bpf/verifier.c regsafe, case PTR_TO_MEM: the fields before var_off equal, the
current offsets within the explored ones, ids and references mapped; mark_chain_precision
of bpf_ringbuf_reserve's size).

A reservation pointer moved by a variable offset on two branches (0..7 bytes on the first
path, 0..3 on the second) is covered by the first path's checkpoint where they join, so
the kernel walks the rest of the program once; the checker must walk it once too (its
processed count is the kernel's), and must not take a pointer into a smaller reservation
as covered (that one could overflow).
"""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ADD, BPF_AND, BPF_JEQ, BPF_JGT, BPF_JNE
from bpfdsl.abi.prog_types import AttachType, ProgramType, XdpAction
from bpfdsl.checker import check_insns
from bpfdsl.checker.env import MapRef
from bpfdsl.obj.maps import MapSpec

RB = MapSpec("rb", MapType.RINGBUF, 0, 0, 4096)
TAIL = 12  # insns after the join (each walked once more when the join is not pruned)
FILL = 6  # insns on each path before the join (the kernel's checkpoint needs 8 since one)


def _asm(items: list) -> list[I.Insn]:
    """Instructions with jumps to labels: ("label", NAME) marks a place, (make, NAME)
    is a jump ``make(off)`` to it (no ld_imm64 between a jump and its target)."""
    at, k = {}, 0
    for x in items:
        if isinstance(x, tuple) and x[0] == "label":
            at[x[1]] = k
        else:
            k += 1
    out: list[I.Insn] = []
    for x in items:
        if isinstance(x, tuple) and x[0] == "label":
            continue
        if isinstance(x, tuple):
            make, name = x
            out.append(make(at[name] - len(out) - 1))
        else:
            out.append(x)
    return out


def _path(size: int, off_reg: int, other: str | None) -> list:
    """Reserve ``size`` bytes, r9 = the record, r0 = record + r``off_reg``, some filler;
    then to the join (``other``: the label of the next path to jump over)."""
    items = [
        I.mov64_imm(2, size),
        I.call(HELPERS["ringbuf_reserve"].id),
        (lambda o: I.jmp_imm(BPF_JEQ, 0, 0, o), "out"),  # NULL: nothing reserved
        I.mov64_reg(9, 0),
        I.alu64_reg(BPF_ADD, 0, off_reg),
    ]
    items += [I.mov64_imm(4, k) for k in range(FILL)]
    if other is not None:
        items.append((I.ja, "join"))
    return items


def _prog(size_a: int, size_b: int) -> list[I.Insn]:
    """XDP: reserve ``size_a`` (first path) or ``size_b`` (second path) bytes, move the
    record pointer by a random offset (0..7, resp. 0..3), join, write one byte at it,
    submit, XDP_PASS."""
    items = [
        I.call(HELPERS["get_prandom_u32"].id),
        I.mov64_reg(6, 0),  # r6: which path
        I.mov64_reg(7, 0),
        I.alu64_imm(BPF_AND, 7, 7),  # r7 in 0..7
        I.mov64_reg(8, 0),
        I.alu64_imm(BPF_AND, 8, 3),  # r8 in 0..3
        I.ld_imm64(1, 0),  # the ring buffer (index 6: REFS)
        I.mov64_imm(3, 0),
        (lambda o: I.jmp_imm(BPF_JGT, 6, 100, o), "second"),
        *_path(size_a, 7, "second"),
        ("label", "second"),
        *_path(size_b, 8, None),
        ("label", "join"),
        I.mov64_imm(5, 0),
        *[I.alu64_imm(BPF_ADD, 5, 1) for _ in range(TAIL - 1)],
        I.st_mem(1, 0, 0, 1),
        I.mov64_reg(1, 9),
        I.mov64_imm(2, 0),
        I.call(HELPERS["ringbuf_submit"].id),
        ("label", "out"),
        I.mov64_imm(0, XdpAction.PASS),
        I.exit_(),
    ]
    return _asm(items)


REFS = {6: MapRef(RB)}


def _check(ins: list[I.Insn]):
    return check_insns(ins, ProgramType.XDP, AttachType.XDP, map_refs=REFS)


def _kernel(ins: list[I.Insn], at: int = 6) -> tuple[bool, int, str]:
    """The kernel's verdict and processed count (log_level 1 | 4 = BPF_LOG_STATS), the
    ring buffer loaded by the ld_imm64 at index ``at``."""
    import re

    from bpfdsl.kernel import syscall as S

    with S.map_create(RB.map_type, 0, 0, RB.max_entries) as fd:
        prog = list(ins)
        prog[at] = I.ld_map_fd(1, int(fd))
        try:
            pfd, log = S.prog_load(ProgramType.XDP, I.encode(prog), "GPL", log_level=1 | 4)
            pfd.close()
            ok = True
        except S.BpfError as e:
            ok, log = False, e.log
    m = re.search(r"processed (\d+) insns", log)
    return ok, int(m.group(1)) if m else -1, log


def test_offsets_within_the_explored_ones_are_pruned() -> None:
    res = _check(_prog(16, 16))
    assert res.ok, [e.message for e in res.errors]
    # the join's tail is walked once: the second path stops at the join
    once = len(_prog(16, 16))
    assert res.insns_processed < once + TAIL, res.insns_processed


def test_a_smaller_reservation_is_not_covered() -> None:
    # the second reservation is 8 bytes: its record + 0..3 written at +0 fits, but the
    # walk cannot take it as covered by a 16-byte one (mem_size differs), so it walks it
    res = _check(_prog(16, 8))
    assert res.ok, [e.message for e in res.errors]
    assert res.insns_processed > _check(_prog(16, 16)).insns_processed


@pytest.mark.kernel
@pytest.mark.parametrize("sizes", [(16, 16), (16, 8), (8, 16)])
def test_processed_count_is_the_kernels(sizes: tuple[int, int]) -> None:
    ins = _prog(*sizes)
    ok, processed, log = _kernel(ins)
    res = _check(ins)
    assert res.ok == ok, log[-800:]
    assert res.insns_processed == processed, log[-1500:]


def _sized_by_path(size_a: int, size_b: int) -> list[I.Insn]:
    """XDP: the reservation's size chosen by a random branch (``size_a`` first), the two
    paths joining before the call; 8 bytes written at offset 8 of the record."""
    items = [
        I.call(HELPERS["get_prandom_u32"].id),
        I.mov64_imm(2, size_a),
        (lambda o: I.jmp_imm(BPF_JGT, 0, 100, o), "small"),
        *[I.mov64_imm(4, k) for k in range(FILL)],
        (I.ja, "join"),
        ("label", "small"),
        I.mov64_imm(2, size_b),
        *[I.mov64_imm(4, k) for k in range(FILL)],
        ("label", "join"),
        I.ld_imm64(1, 0),  # the ring buffer (SIZED_REFS)
        I.mov64_imm(3, 0),
        I.call(HELPERS["ringbuf_reserve"].id),
        (lambda o: I.jmp_imm(BPF_JEQ, 0, 0, o), "out"),
        I.st_mem(8, 0, 8, 1),
        I.mov64_reg(1, 0),
        I.mov64_imm(2, 0),
        I.call(HELPERS["ringbuf_submit"].id),
        ("label", "out"),
        I.mov64_imm(0, XdpAction.PASS),
        I.exit_(),
    ]
    return _asm(items)


SIZED_AT = next(k for k, x in enumerate(_sized_by_path(16, 16)) if x.is_ld_imm64)


def test_the_reserved_size_is_precise() -> None:
    # the 8-byte path joins the 16-byte one before the call: the size decides the
    # record's bounds, so it must not be taken as covered (kernel: precise)
    ins = _sized_by_path(16, 8)
    res = check_insns(ins, ProgramType.XDP, AttachType.XDP, map_refs={SIZED_AT: MapRef(RB)})
    assert not res.ok
    assert res.errors[0].code == "mem-bounds", res.errors[0].message
    assert "mem_size=8 off=8 size=8" in res.errors[0].message
    ok = check_insns(
        _sized_by_path(16, 16),
        ProgramType.XDP,
        AttachType.XDP,
        map_refs={SIZED_AT: MapRef(RB)},
    )
    assert ok.ok, [e.message for e in ok.errors]


@pytest.mark.kernel
@pytest.mark.parametrize("sizes", [(16, 8), (16, 16)])
def test_sized_by_path_as_the_kernel(sizes: tuple[int, int]) -> None:
    ins = _sized_by_path(*sizes)
    ok, processed, log = _kernel(ins, at=SIZED_AT)
    res = check_insns(ins, ProgramType.XDP, AttachType.XDP, map_refs={SIZED_AT: MapRef(RB)})
    assert res.ok == ok, log[-800:]
    if ok:
        assert res.insns_processed == processed, log[-1500:]


def _recheck_prog(second: str) -> list[I.Insn]:
    """Reserve 16 bytes, the NULL check, then ``if r0 <second> 0`` again on the record (as
    LLVM emits when a loop carries the reservation's NULL test in another register): its
    other target exits without submitting, reachable only if the record could be NULL."""
    op = {"==": BPF_JEQ, "!=": BPF_JNE}[second]
    items = [
        I.ld_imm64(1, 0),  # the ring buffer (index 0)
        I.mov64_imm(2, 16),
        I.mov64_imm(3, 0),
        I.call(HELPERS["ringbuf_reserve"].id),
        (lambda o: I.jmp_imm(BPF_JEQ, 0, 0, o), "out"),
        (lambda o: I.jmp_imm(op, 0, 0, o), "recheck"),
        *([] if second == "==" else [(I.ja, "leak")]),
        ("label", "submit") if second == "==" else ("label", "recheck"),
        I.mov64_reg(1, 0),
        I.mov64_imm(2, 0),
        I.call(HELPERS["ringbuf_submit"].id),
        ("label", "out"),
        I.mov64_imm(0, XdpAction.PASS),
        I.exit_(),
        ("label", "recheck") if second == "==" else ("label", "leak"),
        I.mov64_imm(0, XdpAction.DROP),  # leaves the reservation open
        I.exit_(),
    ]
    return _asm(items)


@pytest.mark.kernel
@pytest.mark.parametrize("second", ["==", "!="])
def test_a_checked_record_is_never_null_as_in_the_kernel(second: str) -> None:
    """After its NULL check a reservation is PTR_TO_MEM, which the kernel's reg_not_null
    knows is not NULL: a second ``if r0 == 0`` is decided (never taken; ``!=`` always),
    and the path that would leak it is dead.  The checker walked both branches and refused
    with "Unreleased reference" (found by tests/fuzz/subprograms.py); now it takes the
    kernel's branch and counts what the kernel counts."""
    ins = _recheck_prog(second)
    ok, processed, log = _kernel(ins, at=0)
    assert ok, log[-1500:]
    res = check_insns(ins, ProgramType.XDP, AttachType.XDP, map_refs={0: MapRef(RB)})
    assert res.ok, [e.message for e in res.errors]
    assert res.insns_processed == processed, log[-1500:]
