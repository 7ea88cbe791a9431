"""Reproducers of what tests/fuzz/subprograms.py found and is not fixed yet, each marked
``xfail(strict=False)`` with the reason (tests/fuzz/known.py lists the ones other sessions
are fixing; the campaigns report those as known).  When a fix lands, its test passes and
the mark goes (the reproducer stays as a plain test)."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

from .harness import ROOT

REPRO = ROOT / "tests" / "fuzz" / "reproducers"


@pytest.mark.kernel
def test_loop_count_0_after_a_noinline_fn_loads() -> None:
    from bpfdsl.runtime.loader import load_collection

    src = (REPRO / "loop0_after_noinline.bpfd").read_text()
    obj = compile_source(src, "loop0_after_noinline.bpfd").obj  # the checker accepts it
    with load_collection(read_object(obj)) as coll:  # the kernel: "No program to jit"
        assert "fuzz" in coll.programs


@pytest.mark.kernel
def test_unwritten_reservation_field_reads_alike_on_both_engines() -> None:
    """codegen zeroes a reserved record (bpf_ringbuf_reserve does not): an unwritten field
    reads 0 on both engines, also once the ring wraps over old records."""
    from bpfdsl.testing.pytest_plugin import BpfProgram

    src = (REPRO / "ringbuf_unwritten_field.bpfd").read_text()
    spec = read_object(compile_source(src, "ringbuf_unwritten_field.bpfd").obj)
    seen = {}
    for engine in ("kernel", "interp"):
        prog = BpfProgram(engine, spec, "f", None)
        try:
            ws = []
            for _ in range(300):  # 300 x 2 records of 24 bytes: the 4 KiB ring wraps
                prog.run(bytes(64))
                ws += [e.value["w"] for e in prog.events("events") if e.value["tag"] == 2]
            seen[engine] = ws
        finally:
            prog.close()
    assert seen["kernel"] == seen["interp"] == [1] * 300


@pytest.mark.kernel
def test_unused_result_of_a_noinline_fn_loads_at_v4() -> None:
    from bpfdsl.runtime.loader import load_collection

    src = (REPRO / "ret_stack_pointer.bpfd").read_text()
    obj = compile_source(src, "ret_stack_pointer.bpfd", mcpu="v4").obj  # was checker-ret-stack
    with load_collection(read_object(obj)) as coll:  # was "cannot return stack pointer"
        assert "fuzz" in coll.programs


@pytest.mark.kernel
def test_context_field_loads_on_two_paths_stay_at_constant_offsets() -> None:
    """ctx.rx_queue_index and ctx.ingress_ifindex read on two paths into one call: each
    load keeps its constant offset from the context (llvm.preserve.static.offset), and
    the checker and the kernel accept the object (was: checker-modified-ctx)."""
    from bpfdsl.runtime.loader import load_collection

    src = (REPRO / "ctx_field_loads_sunk.bpfd").read_text()
    spec = read_object(compile_source(src, "ctx_field_loads_sunk.bpfd", mcpu="v4").obj)
    insns = spec.programs["t0"].insns
    ctx_loads = sorted(i.off for i in insns if i.is_load and i.src == 6)
    assert 12 in ctx_loads and 16 in ctx_loads  # ingress_ifindex, rx_queue_index
    with load_collection(spec) as coll:
        assert "t0" in coll.programs
