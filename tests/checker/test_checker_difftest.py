"""A fixed slice of the differential test (scripts/difftest_checker.py) in CI: about 100
programs — the clang C references, progs/, their mutants, random programs and three
programs of the near-limit families (a loop over packet loops, a TCP option walk, an ACL
ladder) — checked by bpfdsl and loaded with BPF_PROG_LOAD; no false accept, agreement >=
95%, and where both accept, the checker walks as many instructions as the kernel (ratio
0.9-1.1; today equal)."""

from __future__ import annotations

import importlib.util
import random
import shutil
import sys
import tempfile

import pytest
from support.paths import ROOT

SCRIPT = ROOT / "scripts" / "difftest_checker.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("difftest_checker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("clang-19") is None, reason="needs clang-19")
def test_check_agrees_with_kernel_on_fixed_slice():
    dt = _load_script()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = dt.build_corpus(
            seed=7,
            n_random=30,
            tmp=tmp,
            per_kind=1,
            near_limit={"packet_loops": (2,), "option_walk": (14,), "acl_ladder": (50,)},
        )
    rng = random.Random(7)
    bases = [it for it in corpus if it.category in ("c", "progs")]
    mutants = [it for it in corpus if it.category.startswith("mutant:")]
    randoms = [it for it in corpus if it.category == "random"]
    # every mutation kind is represented
    kinds = sorted({m.category for m in mutants})
    picked = [next(m for m in mutants if m.category == k) for k in kinds]
    rest = [m for m in mutants if m not in picked]
    sl = (
        bases
        + picked
        + rng.sample(rest, max(0, min(len(rest), 100 - len(bases) - len(picked) - len(randoms))))
    )
    near = [it for it in corpus if it.category == "near_limit"]
    assert len(near) == 3
    sl += randoms + near
    res = dt.run(sl)
    stats = res["stats"]
    total = sum(s["total"] for s in stats.values())
    agree = sum(s["agree"] for s in stats.values())
    false_acc = {c: s["false_accept"] for c, s in stats.items() if s["false_accept"]}
    bad = [
        f"{it.name}: ours={it.ours} kernel={it.kernel} ({it.kernel_msg})"
        for it in sl
        if it.ours != it.kernel
    ]
    counted = [it for it in sl if it.ours == it.kernel == "ok" and it.kernel_processed]
    off = [
        f"{it.name}: ours {it.our_processed} kernel {it.kernel_processed}"
        for it in counted
        if not 0.9 <= it.our_processed / it.kernel_processed <= 1.1
    ]
    assert total >= 90
    assert not false_acc, bad
    assert agree >= 0.95 * total, bad
    assert len(counted) >= 50 and all(it in counted for it in near), bad
    assert not off, off
