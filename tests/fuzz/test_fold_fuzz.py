"""A bounded run of scripts/fuzz_fold.py, the constant-folding oracle: random integer
expressions over every type, as ``const`` (folded), ``config`` (.rodata) and run-time
locals, give the same value on the interpreter and with BPF_PROG_TEST_RUN."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from support.paths import ROOT

SCRIPT = ROOT / "scripts" / "fuzz_fold.py"


def _script():
    spec = importlib.util.spec_from_file_location("fuzz_fold", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.kernel
def test_folding_agrees_with_the_kernel_and_the_interpreter():
    f = _script()
    rep = f.campaign(seed=2024, count=600, batch=40)
    assert rep.findings == [], "\n".join(rep.findings[:5])
    assert rep.compared == 600
    assert rep.runs == {"interp": 45, "kernel": 45}  # 15 programs x 3 ways, each engine


def test_folding_agrees_with_the_interpreter():
    f = _script()
    rep = f.campaign(seed=11, count=200, batch=40, with_kernel=False)
    assert rep.findings == [], "\n".join(rep.findings[:5])
    assert rep.compared == 200 and rep.runs == {"interp": 15}


def test_the_oracle_sees_a_wrong_fold(monkeypatch):
    """Folding with the old rule (a signed constant widened by zero-extension) must be
    reported, or the campaign above proves nothing."""
    f = _script()
    from bpfdsl.lang.sema import ops as sema_ops

    def zero_extend(v, frm, to):
        return v & ((1 << to.bits) - 1) if hasattr(to, "bits") and not to.be else v

    monkeypatch.setattr(sema_ops, "const_convert", zero_extend)
    rep = f.campaign(seed=11, count=80, batch=40, with_kernel=False)
    assert any(x.startswith("differ") for x in rep.findings)
