"""The analyzer's handlers made for one instruction (bpfdsl/checker/handlers.py _fast_alu,
_cond_k: ALU on an immediate, moves, conditional jumps on an immediate, used from an insn's
second walk on) are the general handlers' exact equivalent: with them or with the general
ones only, every program gets the same verdict, messages, processed count and number of
states -- random programs (both verdicts, malformed encodings, pointers where scalars
are expected, BPF-to-BPF calls), progs/ at v1 and v3 (also for a declared older kernel),
and loop-heavy programs (an ACL ladder, a packet loop).
"""

from __future__ import annotations

import importlib.util
import random
import sys

import pytest
from support.complexity import acl_ladder, packet_loops
from support.paths import ROOT

from bpfdsl import checker
from bpfdsl.abi.map_types import MapType
from bpfdsl.checker import CheckOptions, analyzer, check_insns, check_object, handlers
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.maps import MapSpec

MAPS = {
    "h": MapSpec("h", MapType.HASH, 4, 8, 16),
    "a": MapSpec("a", MapType.ARRAY, 4, 16, 4),
    "pa": MapSpec("pa", MapType.PERCPU_ARRAY, 4, 8, 1),
}


def _corpus_module():
    """scripts/difftest_checker.py, whose corpus generators (tests/checker/randprogs.py,
    idioms.py) it puts on the path."""
    spec = importlib.util.spec_from_file_location(
        "difftest_checker", ROOT / "scripts" / "difftest_checker.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _general_only(monkeypatch: pytest.MonkeyPatch) -> None:
    if checker.NATIVE:
        # compiled code calls _handler directly, past the module attribute: the patch
        # would change nothing.  scripts/test.sh reruns tests/checker on the .py modules.
        pytest.skip("needs the pure-Python checker (BPFDSL_PURE_PYTHON=1)")
    general = handlers.handler
    monkeypatch.setattr(analyzer, "handler", lambda x, succ, made=True: general(x, succ, False))


def _summary(res) -> tuple:
    return (
        res.status,
        res.insns_processed,
        res.states,
        [(e.code, e.idx, e.message, e.state) for e in res.errors],
        [(w.code, w.idx, w.message) for w in res.warnings],
    )


def _random_items() -> list:
    dt = _corpus_module()
    rng = random.Random(12)
    items = [dt.random_prog(rng, k, MAPS) for k in range(160)]
    items += [dt.idiom_prog(rng, k, MAPS) for k in range(80)]
    items += [dt.ctx_prog(rng, k, MAPS) for k in range(40)]
    items += [dt.calls_prog(rng, k, MAPS) for k in range(30)]
    return items


def _check_item(it, privileged: bool) -> tuple:
    res = check_insns(
        it.insns,
        it.prog_type,
        it.attach_type,
        map_refs=it.refs,
        options=CheckOptions(privileged=privileged, nr_cpus=2),
    )
    return _summary(res)


def test_random_programs_same_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    items = _random_items()
    made = [_check_item(it, priv) for it in items for priv in (True, False)]
    _general_only(monkeypatch)
    general = [_check_item(it, priv) for it in items for priv in (True, False)]
    assert {m[0] for m in made} >= {"ok", "rejected"}  # both verdicts are exercised
    names = [(it.name, priv) for it in items for priv in (True, False)]
    diff = [(n, m, g) for n, m, g in zip(names, made, general, strict=True) if m != g]
    assert not diff, diff[:3]


def _objects() -> list:
    out = []
    for p in sorted((ROOT / "progs").glob("*.bpfd")):
        for mcpu in ("v1", "v3"):
            out.append(compile_source(p.read_text(), p.name, mcpu=mcpu, check=False).obj)
    for text in (acl_ladder(12), packet_loops(1)):
        out.append(compile_source(text, "gen.bpfd", check=False).obj)
    return [read_object(o) for o in out]


def test_programs_and_loops_same_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    specs = _objects()

    def run() -> list[tuple]:
        # this kernel model, and a declared Linux 4.19 (no jmp32: the v3 objects are refused)
        return [
            _summary(p)
            for s in specs
            for kernel in (None, (4, 19))
            for p in check_object(s, options=CheckOptions(nr_cpus=2, kernel=kernel)).programs
        ]

    made = run()
    assert max(m[1] for m in made) > 5000  # a program whose insns are walked many times
    assert any(e[0] == "kernel-version" for m in made for e in m[3])
    _general_only(monkeypatch)
    assert run() == made
