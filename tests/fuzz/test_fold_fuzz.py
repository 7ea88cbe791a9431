"""A bounded run of scripts/fuzz_fold.py, the constant-folding oracle: random integer
expressions over every type, with edge values and zero divisors, computed by the rules
(``abi/intops.py``), as ``const`` (folded by sema), ``config`` (set at load time), run-time
locals from a map and locals bound to literals (seen by LLVM), give the same value on the
interpreter and with BPF_PROG_TEST_RUN."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from llvmlite import ir
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
    assert rep.compared == 600 and rep.zero_divisors > 30
    assert rep.runs == {"interp": 60, "kernel": 60}  # 15 programs x 4 ways, each engine


@pytest.mark.kernel
def test_unsigned_folding_agrees_at_v3():
    """--mcpu v3 (no signed division insn: no signed / or % generated): ALU32 divisions."""
    f = _script()
    rep = f.campaign(seed=7, count=200, batch=40, mcpu="v3")
    assert rep.findings == [], "\n".join(rep.findings[:5])
    assert rep.compared == 200 and rep.zero_divisors > 0


def test_folding_agrees_with_the_interpreter():
    f = _script()
    rep = f.campaign(seed=11, count=200, batch=40, with_kernel=False)
    assert rep.findings == [], "\n".join(rep.findings[:5])
    assert rep.compared == 200 and rep.runs == {"interp": 20}


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


def test_the_oracle_sees_a_division_llvm_may_call_undefined(monkeypatch):
    """The lowering before issue #23 (LLVM's udiv/urem of an opaque copy of the divisor,
    the result LLVM's to reason about: ``100 / d == 0`` became ``d > 100``) must be
    reported, in the config and run-time ways too."""
    f = _script()
    from bpfdsl.backend.codegen.expr import ExprGen

    def old_div(self, op, a, b, signed):
        ty = a.type
        i64 = ir.IntType(64)
        if ty.width < 64:
            a, b = self.b.zext(a, i64), self.b.zext(b, i64)
        d = self._pure_opaque(b)
        q = self.b.udiv(a, d) if op == "/" else self.b.urem(a, d)
        return self.b.trunc(q, ty) if ty.width < 64 else q

    monkeypatch.setattr(ExprGen, "bpf_div", old_div)
    monkeypatch.setattr(f.Gen, "item", lambda self: self.quotient_test(
        self.r.choice(["u8", "u16", "u32", "u64"])))  # fmt: skip
    rep = f.campaign(seed=3, count=200, batch=50, with_kernel=False)
    ways = " ".join(x for x in rep.findings if x.startswith("differ"))
    assert "config/interp" in ways and "runtime/interp" in ways, rep.findings[:3]
