#!/usr/bin/env python3
"""Constant-folding oracle: random integer expressions computed five ways must agree.

With a fixed seed, generates random expressions over every integer type (u8..u64,
i8..i64): leaves, casts, ``+ - * / % << >> & | ^``, unary ``-``/``~``, untyped literals
and comparisons.  Leaves take edge values most of the time (0, 1, -1, MIN, MAX and their
neighbours), and divisors may be zero: ``x / 0 = 0``, ``x % 0 = x`` and signed
``MIN / -1 = MIN``, ``MIN % -1 = 0`` are the language's rule (the BPF ISA's), which LLVM
calls undefined.  Each expression is computed by

- ``model``: this script, with :mod:`bpfdsl.abi.intops` (the definition of the rules);
- ``const``: ``const`` declarations, so sema folds the expression (through intops too);
  an expression that divides by a constant 0 must be refused (``division-by-zero``, the
  rule for constant divisors), and is checked for that instead;
- ``config``: ``config`` declarations (``.rodata``), compiled with decoy values and set at
  load time to the leaf values (``--set``), never folded by bpfdsl nor by LLVM;
- ``runtime``: locals read from an array map filled before the run;
- ``local``: locals bound to the literal values, so LLVM (not sema) sees every value and
  would fold any undefined operation it is given.

Every program writes its results (``(e) as u64``, or 0/1 for a comparison) into a map
value; each object runs on the userspace interpreter and, as root, with
BPF_PROG_TEST_RUN on the kernel.  All results of one expression must be equal; a
difference, or a program one way refuses and another accepts, is a finding.  Shift counts
are below the width (a constant one past it is an error).  Many expressions (``--batch``)
share one program, so a campaign of 5,000 takes about a minute.  Below ``--mcpu v4`` there
is no signed division insn, so no signed ``/`` or ``%`` is generated.

Usage: scripts/fuzz_fold.py [--seed N] [--count N] [--batch N] [--mcpu v1..v4]
                            [--no-kernel] [--show N]
Prints the counts; exits 1 on any finding.
"""

from __future__ import annotations

import argparse
import random
import re
import struct
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpfdsl.abi import intops  # noqa: E402
from bpfdsl.compiler import compile_source, front_end  # noqa: E402
from bpfdsl.diagnostics import DiagnosticError  # noqa: E402
from bpfdsl.obj.collection import read_object  # noqa: E402

TYPES = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64")
VARIANTS = ("const", "config", "runtime", "local")
LEAVES_PER_TYPE = 3
MASK64 = (1 << 64) - 1


def bits_of(ty: str) -> int:
    return int(ty[1:])


def signed(ty: str) -> bool:
    return ty[0] == "i"


def type_range(ty: str) -> tuple[int, int]:
    b = bits_of(ty)
    return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if signed(ty) else (0, (1 << b) - 1)


def narrower(ty: str) -> list[str]:
    """Types that convert into ``ty`` keeping every value (what sema lets mix with it):
    narrower of the same signedness, or narrower unsigned into a signed ``ty``."""
    b = bits_of(ty)
    return [
        t
        for t in TYPES
        if bits_of(t) < b and (signed(t) == signed(ty) or (signed(ty) and not signed(t)))
    ]


def raw_of(v: int, ty: str) -> int:
    """The bits of value ``v`` (in ``ty``'s range, or an untyped literal taking ``ty``)."""
    return v & ((1 << bits_of(ty)) - 1)


def lit(v: int) -> str:
    return f"({v})" if v < 0 else str(v)


@dataclass
class Val:
    """A generated expression: its ``text``, its ``raw`` value by the rules (intops) and
    whether it divides by zero anywhere (``zdiv``: the ``const`` form is refused)."""

    text: str
    raw: int
    zdiv: bool = False
    lit: bool = False  # made of literals only: folded in every variant

    def of(self, text: str, raw: int) -> Val:
        """Another expression over this one (its flags)."""
        return Val(text, raw, self.zdiv, self.lit)


@dataclass
class Item:
    """One generated expression: ``text`` of type ``ty`` (``bool`` for a comparison);
    ``want``: its result as the program writes it (u64), ``zdiv`` as in :class:`Val`."""

    text: str
    ty: str
    want: int = 0
    zdiv: bool = False
    index: int = 0


@dataclass
class Report:
    """Counts of one campaign; ``findings`` holds one description per difference."""

    seed: int = 0
    expressions: int = 0
    compared: int = 0
    programs: int = 0
    runs: dict[str, int] = field(default_factory=dict)
    zero_divisors: int = 0  # expressions with a division by zero (run time or constant)
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Gen:
    """Random well-typed expressions over a pool of leaves ``v_<type>_<k>`` (their values
    fixed first: each expression is computed as it is generated)."""

    def __init__(self, rnd: random.Random, max_depth: int = 4, signed_div: bool = True):
        self.r = rnd
        self.max_depth = max_depth
        self.signed_div = signed_div
        self.vals: dict[str, tuple[str, int]] = {}
        self.zero_seen = False  # a division by zero happened in the current item

    def value(self, ty: str) -> int:
        """A value of ``ty``, biased to the edges (0, ±1, MIN, MAX and neighbours)."""
        lo, hi = type_range(ty)
        r = self.r.random()
        if r < 0.6:
            edges = [0, 1, 2, hi, hi - 1, lo, lo + 1] + ([-1, -2] if signed(ty) else [])
            return self.r.choice(edges)
        if r < 0.8:
            return self.r.randint(max(lo, -300), min(hi, 300))
        return self.r.randint(lo, hi)

    def leaves(self) -> dict[str, tuple[str, int]]:
        """New leaf values (type, value) for the next batch."""
        self.vals = {
            f"v_{t}_{k}": (t, self.value(t)) for t in TYPES for k in range(LEAVES_PER_TYPE)
        }
        return self.vals

    def leaf(self, ty: str) -> Val:
        if self.r.random() < 0.12:  # a literal converted with `as` (may wrap)
            v = self.value(self.r.choice(TYPES))
            return Val(f"({lit(v)} as {ty})", raw_of(v, ty), lit=True)
        n = f"v_{ty}_{self.r.randrange(LEAVES_PER_TYPE)}"
        return Val(n, raw_of(self.vals[n][1], ty))

    def conv(self, v: Val, frm: str, to: str) -> int:
        return intops.convert(v.raw, bits_of(frm), signed(frm), bits_of(to))

    def operand(self, ty: str, d: int) -> Val:
        """The other operand of a binary operator whose result type is ``ty``, as ``ty``."""
        r = self.r.random()
        if r < 0.12:
            v = self.value(ty)
            return Val(lit(v), raw_of(v, ty), lit=True)  # untyped: takes ``ty``
        if r < 0.3 and narrower(ty):
            t = self.r.choice(narrower(ty))
            e = self.expr(t, d)
            return e.of(e.text, self.conv(e, t, ty))
        return self.expr(ty, d)

    def binop(self, op: str, ty: str, a: Val, b: Val, text: str) -> Val:
        raw = intops.binop(op, a.raw, b.raw, bits_of(ty), signed(ty))
        return Val(text, raw, a.zdiv or b.zdiv, a.lit and b.lit)

    def expr(self, ty: str, d: int = 0) -> Val:
        r = self.r
        if d >= self.max_depth or r.random() < 0.22:
            return self.leaf(ty)
        d += 1
        k = r.choices(["cast", "unary", "arith", "shift", "div"], [2, 1, 5, 2, 3])[0]
        if k == "div" and signed(ty) and not self.signed_div:
            k = "arith"
        if k == "cast":
            t = r.choice(TYPES)
            e = self.expr(t, d)
            return e.of(f"({e.text} as {ty})", self.conv(e, t, ty))
        if k == "unary":
            op = r.choice("-~")
            e = self.expr(ty, d)
            return e.of(f"({op}{e.text})", intops.unop(op, e.raw, bits_of(ty)))
        if k == "arith":
            op = r.choice(["+", "-", "*", "&", "|", "^"])
            a, b = self.expr(ty, d), self.operand(ty, d)
            if r.random() < 0.7:
                return self.binop(op, ty, a, b, f"({a.text} {op} {b.text})")
            return self.binop(op, ty, b, a, f"({b.text} {op} {a.text})")
        if k == "shift":
            op = r.choice(["<<", ">>"])
            n = bits_of(ty)
            if r.random() < 0.6:
                c = r.randrange(n)
                cnt = Val(str(c), c, lit=True)
            else:
                ct = r.choice([ty, *narrower(ty)])
                e = self.expr(ct, d)
                raw = intops.binop("&", e.raw, n - 1, bits_of(ct), signed(ct))
                cnt = e.of(f"({e.text} & {n - 1})", raw)  # below n: any type's value
            a = self.expr(ty, d)
            return self.binop(op, ty, a, cnt, f"({a.text} {op} {cnt.text})")
        op = r.choice(["/", "%"])
        x = r.random()
        if x < 0.25:
            v = 0
            while v == 0:
                v = self.value(ty)
            div = Val(lit(v), raw_of(v, ty), lit=True)
        else:
            dt = r.choice([ty, *narrower(ty)])
            e = self.expr(dt, d)
            if x < 0.45 or (e.lit and e.raw == 0):  # never zero (a constant 0: an error)
                raw = intops.binop("|", e.raw, 1, bits_of(dt), signed(dt))
                e = e.of(f"({e.text} | 1)", raw)
            div = e.of(e.text, self.conv(e, dt, ty))
        a = self.expr(ty, d)
        out = self.binop(op, ty, a, div, f"({a.text} {op} {div.text})")
        if div.raw == 0:
            out.zdiv = True  # with consts: the division-by-zero error
        return out

    def quotient_test(self, ty: str) -> Item:
        """``(a / d) CMP x`` or ``(a % d) CMP x``, x one of 0, a literal, ``d`` or ``a``: where
        LLVM reasons about a quotient from its operands, assuming ``d != 0`` (issue #23:
        ``100 / d == 0`` became ``d > 100``)."""
        r = self.r
        op = r.choice(["/", "%"])
        a = self.operand(ty, 2) if r.random() < 0.6 else self.leaf(ty)
        d = self.leaf(ty) if r.random() < 0.7 else self.expr(ty, 2)
        if d.lit and d.raw == 0:
            d = d.of(f"({d.text} | 1)", 1)
        q = self.binop(op, ty, a, d, f"({a.text} {op} {d.text})")
        if d.raw == 0:
            q.zdiv = True
        v = self.value(ty)
        x = r.choice([Val("0", 0, lit=True), Val(lit(v), raw_of(v, ty), lit=True), d, a])
        cmp = r.choice(["==", "!=", "<", "<=", ">", ">="])
        got = intops.compare(cmp, q.raw, x.raw, bits_of(ty), signed(ty))
        return Item(f"{q.text} {cmp} {x.text}", "bool", int(got), q.zdiv or x.zdiv)

    def item(self) -> Item:
        ty = self.r.choice(TYPES)
        if self.r.random() < 0.1 and (self.signed_div or not signed(ty)):
            return self.quotient_test(ty)
        if self.r.random() < 0.25:
            op = self.r.choice(["==", "!=", "<", "<=", ">", ">="])
            a, b = self.expr(ty, 1), self.operand(ty, 1)
            got = intops.compare(op, a.raw, b.raw, bits_of(ty), signed(ty))
            return Item(f"{a.text} {op} {b.text}", "bool", int(got), a.zdiv or b.zdiv)
        e = self.expr(ty)
        want = intops.convert(e.raw, bits_of(ty), signed(ty), 64)
        return Item(e.text, ty, want, e.zdiv)


def decoy(t: str, v: int) -> int:
    """A value of ``t`` other than ``v``: what the ``config`` variant compiles in before
    the load sets ``v``."""
    return intops.value_of(raw_of(v, t) ^ 1, bits_of(t), signed(t))


def render(items: list[Item], leaves: dict[str, tuple[str, int]], variant: str):
    """Source of one program; returns (text, {line: item index}).  The ``const`` variant
    leaves out the items that divide by a constant 0 (its slot stays 0)."""
    names = list(leaves)
    out = ['license "GPL"']
    if variant == "const":
        out += [f"const {n}: {t} = {v}" for n, (t, v) in leaves.items()]
    if variant == "config":
        out += [f"config {n}: {t} = {decoy(t, v)}" for n, (t, v) in leaves.items()]
    out.append(f"map inp: array<u32, [u64; {len(names)}]>(max_entries: 1)")
    out.append(f"map out: array<u32, [u64; {max(1, len(items))}]>(max_entries: 1)")
    out.append("xdp fn fold(ctx) {")
    out.append("    let o = out.lookup(0) else { return XDP_ABORTED }")
    if variant == "runtime":
        out.append("    let iv = inp.lookup(0) else { return XDP_ABORTED }")
        for k, n in enumerate(names):
            out.append(f"    let {n} = iv[{k}] as {leaves[n][0]}")
    if variant == "local":
        out += [f"    let {n}: {t} = {lit(v)}" for n, (t, v) in leaves.items()]
    lines: dict[int, int] = {}
    for k, it in enumerate(items):
        if variant == "const" and it.zdiv:
            continue
        if it.ty == "bool":
            out.append(f"    o[{k}] = 0")
            lines[len(out) + 1] = k
            out.append(f"    if {it.text} {{ o[{k}] = 1 }}")
        else:
            lines[len(out) + 1] = k
            out.append(f"    o[{k}] = ({it.text}) as u64")
    out.append("    return XDP_PASS")
    out.append("}")
    return "\n".join(out) + "\n", lines


def check_zero_divisions(items: list[Item], leaves, report: Report) -> None:
    """The items that divide by a constant 0, over ``const`` leaves, must each be the
    ``division-by-zero`` error at their line (sema, no LLVM); a finding otherwise."""
    zitems = [it for it in items if it.zdiv]
    if not zitems:
        return
    src, lines = render([Item(it.text, it.ty) for it in zitems], leaves, "const")
    try:
        front_end(src, "fold_zero.bpfd")
        refused: dict[int, set[str]] = {}
    except DiagnosticError as e:
        refused = {}
        for d in e.diagnostics:
            k = lines.get(d.span.line) if d.span is not None else None
            refused.setdefault(-1 if k is None else k, set()).add(d.code)
    for k, it in enumerate(zitems):
        if refused.get(k) != {"division-by-zero"}:
            report.findings.append(
                f"const #{it.index}: {it.text} ({it.ty}) divides by a constant 0: expected "
                f"division-by-zero, got {sorted(refused.get(k, ())) or 'no error'}\n"
                "    leaves: " + _leaves_of(it.text, leaves)
            )
    if -1 in refused:
        report.findings.append(f"const: unlocated errors {sorted(refused[-1])}\n{src}")


def _engines(with_kernel: bool) -> list[str]:
    if not with_kernel:
        return ["interp"]
    from bpfdsl.testing.pytest_plugin import kernel_unavailable_reason

    return ["interp"] if kernel_unavailable_reason() else ["interp", "kernel"]


def run_object(
    obj: bytes, engine: str, inputs: bytes, n_out: int, config: dict[str, int] | None = None
) -> list[int]:
    """Run the program once on ``engine`` (``config``: values set at load time); the
    ``n_out`` u64 results it wrote."""
    from bpfdsl.testing.pytest_plugin import BpfProgram

    prog = BpfProgram(engine, read_object(obj), "fold", config)
    try:
        prog.maps["inp"].set(0, inputs)
        res = prog.run(bytes(64))
        if res.retval != 2:
            raise RuntimeError(f"program returned {res.retval} (XDP_PASS expected)")
        raw = prog.maps["out"].get(0)
    finally:
        prog.close()
    return list(struct.unpack(f"<{n_out}Q", raw[: 8 * n_out]))


_LINE = re.compile(r":(\d+):\d+")


class BatchTooBig(Exception):
    """A variant of the batch needs more than the kernel's 512-byte stack (the spills of
    many long expressions): the campaign runs the two halves instead."""


_TOO_BIG = ("stack-limit", "program-too-large")


def compile_batch(items, leaves, report, mcpu: str = "v4") -> dict[str, bytes] | None:
    """Compile the variants, dropping items that a variant refuses (a finding, as every
    item is valid by construction, but for the ``const`` form of a division by a constant
    0, which :func:`check_zero_divisions` checks).  None when the batch cannot be
    compiled at all; :class:`BatchTooBig` when a variant is too big for the kernel."""
    for _attempt in range(len(items) + 1):
        objs, refused = {}, {}
        for v in VARIANTS:
            src, lines = render(items, leaves, v)
            try:
                # check=False: the kernel verifier loads every object anyway, and the
                # checker's walk of the many comparison branches dominates the time
                objs[v] = compile_source(src, f"fold_{v}.bpfd", mcpu=mcpu, check=False).obj
            except DiagnosticError as e:
                for d in e.diagnostics:
                    k = lines.get(d.span.line) if d.span is not None else None
                    if k is None and d.code in _TOO_BIG and len(items) > 1:
                        raise BatchTooBig(d.message) from None
                    if k is None:
                        report.findings.append(
                            f"{v}: unlocated or non-item error {d.code}: {d.message}\n{src}"
                        )
                        return None
                    refused.setdefault(k, []).append(f"{v}: {d.code}: {d.message}")
        if not refused:
            return objs
        for k in sorted(refused, reverse=True):
            it = items[k]
            report.findings.append(
                f"refused #{it.index}: {it.text} ({it.ty})\n    "
                + "\n    ".join(refused[k])
                + "\n    leaves: "
                + _leaves_of(it.text, leaves)
            )
            del items[k]
        if not items:
            return None
    return None


def _leaves_of(text: str, leaves: dict[str, tuple[str, int]]) -> str:
    used = sorted(set(re.findall(r"v_[iu]\d+_\d", text)))
    return ", ".join(f"{n}: {leaves[n][0]} = {leaves[n][1]}" for n in used) or "none"


def campaign(
    seed: int,
    count: int,
    batch: int = 40,
    with_kernel: bool = True,
    max_depth: int = 4,
    mcpu: str = "v4",
) -> Report:
    """Generate ``count`` expressions from ``seed`` and compare the ways of computing them."""
    t0 = time.monotonic()
    rnd = random.Random(seed)
    gen = Gen(rnd, max_depth, signed_div=mcpu == "v4")
    report = Report(seed=seed)
    engines = _engines(with_kernel)
    made = 0
    while made < count:
        n = min(batch, count - made)
        leaves = gen.leaves()
        items = [gen.item() for _ in range(n)]
        for k, it in enumerate(items):
            it.index = made + k
        made += n
        report.expressions += n
        report.zero_divisors += sum(1 for it in items if it.zdiv)
        check_zero_divisions(items, leaves, report)
        run_batch(items, leaves, report, engines, mcpu)
    report.seconds = time.monotonic() - t0
    return report


def run_batch(items: list[Item], leaves, report: Report, engines: list[str], mcpu: str) -> None:
    """Compile, run and compare one batch (one program per variant); halves of it when
    it is too big for the kernel's stack."""
    try:
        objs = compile_batch(items, leaves, report, mcpu)
    except BatchTooBig:
        half = len(items) // 2
        run_batch(items[:half], leaves, report, engines, mcpu)
        run_batch(items[half:], leaves, report, engines, mcpu)
        return
    if objs is None:
        return
    inputs = b"".join(struct.pack("<Q", raw_of(v, t)) for t, v in leaves.values())
    config = {name: v for name, (_t, v) in leaves.items()}
    results: dict[str, list[int]] = {"model": [it.want for it in items]}
    for v in VARIANTS:
        report.programs += 1
        for eng in engines:
            try:
                cfg = config if v == "config" else None
                results[f"{v}/{eng}"] = run_object(objs[v], eng, inputs, len(items), cfg)
            except Exception as e:  # a load or run failure is a finding, not a crash
                report.findings.append(f"{v}/{eng}: {type(e).__name__}: {e}")
            report.runs[eng] = report.runs.get(eng, 0) + 1
    for k, it in enumerate(items):
        got = {
            way: vals[k]
            for way, vals in results.items()
            if not (it.zdiv and way.startswith("const/"))
        }
        report.compared += 1
        if len(set(got.values())) > 1:
            shown = ", ".join(f"{w}={x:#x}" for w, x in got.items())
            report.findings.append(
                f"differ #{it.index}: {it.text} ({it.ty})\n    {shown}\n    leaves: "
                + _leaves_of(it.text, leaves)
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    ap.add_argument("--count", type=int, default=2000, help="expressions (default 2000)")
    ap.add_argument("--batch", type=int, default=40, help="expressions per program")
    ap.add_argument("--depth", type=int, default=4, help="maximum expression depth")
    ap.add_argument("--mcpu", default="v4", choices=("v1", "v2", "v3", "v4"), help="BPF ISA level")
    ap.add_argument("--no-kernel", action="store_true", help="interpreter only")
    ap.add_argument("--show", type=int, default=10, help="findings to print (default 10)")
    a = ap.parse_args(argv)
    rep = campaign(a.seed, a.count, a.batch, not a.no_kernel, a.depth, a.mcpu)
    runs = ", ".join(f"{k} {v}" for k, v in sorted(rep.runs.items()))
    print(
        f"seed {rep.seed} (--mcpu {a.mcpu}): expressions {rep.expressions} "
        f"({rep.zero_divisors} dividing by 0), compared {rep.compared}, programs "
        f"{rep.programs} (runs: {runs or 'none'}), findings {len(rep.findings)}, "
        f"{rep.seconds:.1f} s"
    )
    for f in rep.findings[: a.show]:
        print(f)
    return 1 if rep.findings else 0


if __name__ == "__main__":
    sys.exit(main())
