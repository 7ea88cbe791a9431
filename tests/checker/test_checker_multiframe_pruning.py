"""Pruning and precision inside static subprograms (more than one frame), as the kernel
verifier does them (kernel/bpf/verifier.c is_state_visited, states_equal with
func_states_equal per frame, mark_chain_precision).

A frozen checkpoint of more than one frame is compared through its precomputed
``FramesPlan`` (checker/state.py) and the one-frame ones through their ``CoverPlan``, with
first checks that adapt to the states met; mark_precise backtracks most insns by its
table.  These tests walk real programs whose rules are static subprograms and check, at
every prune point, that the planned comparison prunes exactly when the general
``states_equal`` says a frozen checkpoint covers the state, and at every precision request
that the table-driven walk marks what the general ``backtrack_insn`` walk marks; a kernel
test checks that the processed count is the kernel's.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest
from support.paths import ROOT

from bpfdsl import checker
from bpfdsl.checker import analyzer as A
from bpfdsl.checker import check_program
from bpfdsl.checker import precision as P
from bpfdsl.checker.state import NOT_EXACT, State, states_equal
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object


def _acl_gen():
    spec = importlib.util.spec_from_file_location("acl_gen", ROOT / "benchmarks" / "acl_gen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _static_acl(rules: int, noinline: bool):
    """benchmarks/acl_gen.py's ACL of ``rules`` rules: its rule functions made ``noinline``
    (static subprograms with BTF), or kept ``global`` (static when checked without BTF)."""
    src = _acl_gen().bpfd_source(rules)
    if noinline:
        src = src.replace("global fn", "noinline fn")
    return read_object(compile_source(src, "acl.bpfd").obj)


def _check(spec, btf):
    (p,) = spec.programs.values()
    return check_program(
        p, spec.maps, data_sections=spec.data_sections, license=spec.license, btf=btf
    )


# These wrap the walk's own functions (monkeypatch): compiled code calls them directly,
# past the module attributes, so they run on the pure-Python checker only
# (scripts/test.sh reruns tests/checker with BPFDSL_PURE_PYTHON=1).
pure_only = pytest.mark.skipif(
    checker.NATIVE, reason="wraps the walk's functions: needs BPFDSL_PURE_PYTHON=1"
)

CASES = [
    pytest.param(120, True, True, id="noinline-btf"),
    pytest.param(120, False, False, id="global-nobtf"),
]


@pure_only
@pytest.mark.parametrize("rules,noinline,with_btf", CASES)
def test_planned_pruning_is_states_equal_on_multiframe_walks(
    rules, noinline, with_btf, monkeypatch
):
    """At every prune point of the walk: the path is pruned exactly when some frozen
    checkpoint there covers it by the general states_equal (NOT_EXACT, with the live
    masks of the state's frames), and multi-frame checkpoints are planned and hit."""
    spec = _static_acl(rules, noinline)
    seen = {"visits": 0, "multi": 0, "pruned": 0, "multi_pruned": 0, "fplans": 0}
    bad: list[tuple[int, int, bool]] = []
    orig = A._Explorer.visited

    def visited(self: A._Explorer, st: State, i: int, prev: int) -> bool:
        before = list(self.explored.get(i, ()))
        cur = st.copy()
        pruned = orig(self, st, i, prev)
        live = A._live_masks(self.cfg, cur, i)
        # the checkpoints are cleaned as visited() meets them (and all of them when it
        # does not prune): what the plans were made from
        want = False
        for cp in before:
            if cp.branches == 0 and (cp.cleaned or not pruned):
                if states_equal(cp.state, cp.prec, cp.sprec, cur, live, NOT_EXACT, self.uninit_ok):
                    want = True
                    break
        if pruned != want:  # (an exception here would end the walk as a rejection)
            bad.append((i, len(cur.frames), pruned))
        multi = len(cur.frames) > 1
        seen["visits"] += 1
        seen["multi"] += multi
        seen["pruned"] += pruned
        seen["multi_pruned"] += pruned and multi
        seen["fplans"] += sum(cp.fplan is not None for cp in before)
        return pruned

    monkeypatch.setattr(A._Explorer, "visited", visited)
    res = _check(spec, spec.btf if with_btf else None)
    assert bad == []
    assert res.status == "ok"
    assert seen["multi"] > 1000 and seen["multi_pruned"] > 100 and seen["fplans"] > 1000, seen


@pure_only
@pytest.mark.parametrize("rules,noinline,with_btf", CASES)
def test_table_driven_precision_marks_as_backtrack_insn(rules, noinline, with_btf, monkeypatch):
    """At every precision request of the walk, mark_precise with the backtrack table
    (the one-frame walk, and the table for insns that stay in their frame) marks the
    checkpoints behind the path exactly as the walk by backtrack_insn alone."""
    spec = _static_acl(rules, noinline)
    counts = {"calls": 0, "multi": 0}
    bad: list[int] = []
    orig = P.mark_precise

    def chain(st: State) -> list:
        out, cp = [], st.parent
        while cp is not None:
            out.append(cp)
            cp = cp.parent
        return out

    def mark_precise(insns, call_target, cur, cur_idx, regs, slots, table=None, *rest):
        cps = chain(cur)
        saved = [(list(cp.prec), list(cp.sprec)) for cp in cps]
        orig(insns, call_target, cur, cur_idx, list(regs), list(slots), None, *rest)
        want = [(list(cp.prec), list(cp.sprec)) for cp in cps]
        for cp, (p, s) in zip(cps, saved, strict=True):
            cp.prec[:], cp.sprec[:] = p, s
        out = orig(insns, call_target, cur, cur_idx, regs, slots, table, *rest)
        if [(cp.prec, cp.sprec) for cp in cps] != want:
            bad.append(cur_idx)
        counts["calls"] += 1
        counts["multi"] += len(cur.frames) > 1
        return out

    monkeypatch.setattr(A, "mark_precise", mark_precise)
    res = _check(spec, spec.btf if with_btf else None)
    assert bad == []
    assert res.status == "ok"
    assert counts["multi"] > 1000, counts


@pytest.mark.kernel
def test_static_subprogram_acl_walks_the_kernels_count():
    """140 rules as ``noinline`` functions (static subprograms, BTF loaded): each rule is
    walked in the caller's frames on every path that calls it and multi-frame checkpoints
    prune most of them; the checker's processed count, checkpoints made and verdict are
    the kernel's ("processed N insns ... total_states M", BPF_LOG_STATS)."""
    from bpfdsl.runtime.loader import load_collection

    spec = _static_acl(140, True)
    res = _check(spec, spec.btf)
    with load_collection(spec, log_level=4, log_size=1 << 20) as coll:
        log = next(iter(coll.programs.values())).log
    m = re.search(r"processed (\d+) insns .* total_states (\d+)", log)
    assert m is not None, log
    assert res.status == "ok"
    assert (res.insns_processed, res.states) == (int(m.group(1)), int(m.group(2)))
    assert res.insns_processed > 100_000  # the walk is mostly inside the subprograms
