"""Mutation fuzzing of the example programs (deterministic): a mutant either fails with a
DiagnosticError (never another exception: a traceback is a bug) or compiles -- and then
the kernel verifier accepts it (safe by construction)."""

from __future__ import annotations

import random
import re

import pytest
from support.paths import PROGS

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

TOKEN = re.compile(r"[A-Za-z_]\w*|\d+\.\d+\.\d+\.\d+(?:/\d+)?|\d+|\s+|[^\sA-Za-z0-9_]")


def mutants(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    srcs = [p.read_text() for p in sorted(PROGS.glob("*.bpfd"))]
    vocab = sorted({t for s in srcs for t in TOKEN.findall(s) if not t.isspace()})
    out = []
    while len(out) < n:
        toks = TOKEN.findall(rnd.choice(srcs))
        for _ in range(rnd.randint(1, 2)):
            j = rnd.randrange(len(toks))
            r = rnd.random()
            if r < 0.4:
                toks[j] = ""
            elif r < 0.8:
                toks[j] = rnd.choice(vocab)
            else:
                toks.insert(j, f" {rnd.choice(vocab)} ")
        out.append("".join(toks))
    return out


def compiled(seed: int, n: int) -> list[tuple[str, bytes]]:
    ok = []
    for m in mutants(seed, n):
        try:
            ok.append((m, compile_source(m, "mutant.bpfd").obj))
        except DiagnosticError as e:
            assert all(d.span is None or d.span.line >= 1 for d in e.diagnostics)
    return ok


def test_mutants_fail_only_with_diagnostics():
    assert len(compiled(1, 300)) > 5


@pytest.mark.kernel
def test_compiled_mutants_pass_the_verifier():
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    objs = compiled(2, 300)
    assert len(objs) > 10
    for src, obj in objs:
        try:
            with load_collection(read_object(obj)):
                pass
        except DiagnosticError as e:  # pragma: no cover - the failure message
            pytest.fail(f"verifier rejected a compiled mutant: {e}\n{src}")
