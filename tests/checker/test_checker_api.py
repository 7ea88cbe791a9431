"""Library API of the checker as the compiler uses it: check_object on a compiled .bpfd
object, and rejections turned into Diagnostics that point at the .bpfd source line."""

from __future__ import annotations

import pytest
from support.paths import PROGS

from bpfdsl.abi import insn as I
from bpfdsl.checker import CheckOptions, check_insns, check_object, check_program, map_refs_for
from bpfdsl.obj.collection import read_object


@pytest.fixture(scope="module")
def udp_filter():
    from bpfdsl.compiler import compile_file

    src = PROGS / "xdp_udp_filter.bpfd"
    if not src.exists():
        pytest.skip("progs/xdp_udp_filter.bpfd not present")
    return read_object(compile_file(src).obj)


def test_check_every_prog_passes():
    from bpfdsl.compiler import compile_file

    for src in sorted(PROGS.glob("*.bpfd")):
        res = check_object(read_object(compile_file(src).obj))
        assert res.programs and res.ok, (
            src.name,
            [e.message for p in res.programs for e in p.errors],
        )


def test_check_program_api(udp_filter):
    p = next(iter(udp_filter.programs.values()))
    res = check_program(p, udp_filter.maps, data_sections=udp_filter.data_sections)
    assert res.ok and res.insns_processed >= len(p.insns) // 2


def test_check_error_points_at_bpfd_line(udp_filter):
    p = next(iter(udp_filter.programs.values()))
    ins = list(p.insns)
    i = next(k for k, x in enumerate(ins) if x.is_cond_jump and x.source == 0x08)
    ins[i] = I.ja(0)  # drop the first generated bounds check
    refs = map_refs_for(p, udp_filter.maps, udp_filter.data_sections)
    res = check_insns(
        ins, p.kind.program_type, p.kind.attach_type, map_refs=refs, line_at=p.line_at
    )
    assert not res.ok
    e = res.errors[0]
    assert e.code == "pkt-bounds"
    assert e.source is not None and e.source.file.endswith("xdp_udp_filter.bpfd")
    d = e.diagnostic(p.name)
    assert d.span is not None and d.span.line == e.source.line
    assert d.code == "checker-pkt-bounds" and d.hints and "data_end" in d.hints[0]
    text = (PROGS / "xdp_udp_filter.bpfd").read_text().splitlines()[e.source.line - 1]
    assert text.strip() == e.source.text.strip()


def test_check_leaves_the_cycle_collector_as_it_found_it(udp_filter):
    """check_insns pauses the cycle collector while analysing; the caller's setting must
    come back, enabled or disabled, for accepted and rejected programs alike."""
    import gc

    from bpfdsl.abi.opcodes import BPF_EXIT, BPF_JMP
    from bpfdsl.abi.prog_types import ProgramType

    bad = [I.mov64_imm(0, 2), I.ldx_mem(4, 0, 10, -8), I.Insn(BPF_JMP | BPF_EXIT)]
    was = gc.isenabled()
    try:
        for enabled in (True, False):
            gc.enable() if enabled else gc.disable()
            ok = check_object(udp_filter)
            rejected = check_insns(bad, ProgramType.XDP, options=CheckOptions(privileged=False))
            assert ok.ok and not rejected.ok
            assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
