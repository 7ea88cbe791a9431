#!/usr/bin/env python3
"""Constant-folding oracle: random integer expressions computed three ways must agree.

With a fixed seed, generates random expressions over every integer type (u8..u64,
i8..i64): leaves, casts, ``+ - * / % << >> & | ^``, unary ``-``/``~``, untyped literals
and comparisons.  Each expression is compiled in three programs that differ only in where
the leaves come from:

- ``const``: ``const`` declarations, so sema folds the expression (``bpfdsl.abi.intops``);
- ``config``: ``config`` declarations (load-time ``.rodata``), never folded by bpfdsl;
- ``runtime``: locals read from an array map filled before the run.

Every program writes its results (``(e) as u64``, or 0/1 for a comparison) into a map
value; each object runs on the userspace interpreter and, as root, with
BPF_PROG_TEST_RUN on the kernel.  All results of one expression must be equal; a
difference, or a program one way refuses and another accepts, is a finding.  Divisors
are never zero (``x | 1`` or a non-zero literal) and shift counts are below the width, so
the three ways compute the same C-defined value; signed ``MIN / -1`` is in (BPF's rule).

Usage: scripts/fuzz_fold.py [--seed N] [--count N] [--batch N] [--no-kernel] [--show N]
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

from bpfdsl.compiler import compile_source  # noqa: E402
from bpfdsl.diagnostics import DiagnosticError  # noqa: E402
from bpfdsl.obj.collection import read_object  # noqa: E402

TYPES = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64")
VARIANTS = ("const", "config", "runtime")
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


@dataclass
class Item:
    """One generated expression: ``text`` of type ``ty`` (``bool`` for a comparison)."""

    text: str
    ty: str
    index: int = 0


@dataclass
class Report:
    """Counts of one campaign; ``findings`` holds one description per difference."""

    seed: int = 0
    expressions: int = 0
    compared: int = 0
    programs: int = 0
    runs: dict[str, int] = field(default_factory=dict)
    findings: list[str] = field(default_factory=list)
    seconds: float = 0.0


class Gen:
    """Random well-typed expressions over a pool of leaves ``v_<type>_<k>``."""

    def __init__(self, rnd: random.Random, max_depth: int = 4):
        self.r = rnd
        self.max_depth = max_depth

    def value(self, ty: str) -> int:
        """A value of ``ty``, biased to the edges (0, ±1, MIN, MAX and neighbours)."""
        lo, hi = type_range(ty)
        r = self.r.random()
        if r < 0.5:
            edges = [0, 1, 2, hi, hi - 1, lo, lo + 1] + ([-1, -2] if signed(ty) else [])
            return self.r.choice(edges)
        if r < 0.7:
            return self.r.randint(max(lo, -300), min(hi, 300))
        return self.r.randint(lo, hi)

    def leaves(self) -> dict[str, tuple[str, int]]:
        return {f"v_{t}_{k}": (t, self.value(t)) for t in TYPES for k in range(LEAVES_PER_TYPE)}

    def leaf(self, ty: str) -> str:
        if self.r.random() < 0.12:  # a literal converted with `as` (may wrap)
            src = self.r.choice(TYPES)
            return f"({self.literal(self.value(src))} as {ty})"
        return f"v_{ty}_{self.r.randrange(LEAVES_PER_TYPE)}"

    def literal(self, v: int) -> str:
        return f"({v})" if v < 0 else str(v)

    def operand(self, ty: str, d: int) -> str:
        """The other operand of a binary operator whose result type is ``ty``."""
        r = self.r.random()
        if r < 0.12:
            return self.literal(self.value(ty))  # untyped: takes ``ty``
        if r < 0.3 and narrower(ty):
            return self.expr(self.r.choice(narrower(ty)), d)
        return self.expr(ty, d)

    def expr(self, ty: str, d: int = 0) -> str:
        r = self.r
        if d >= self.max_depth or r.random() < 0.22:
            return self.leaf(ty)
        d += 1
        k = r.choices(["cast", "unary", "arith", "shift", "div"], [2, 1, 5, 2, 2])[0]
        if k == "cast":
            return f"({self.expr(r.choice(TYPES), d)} as {ty})"
        if k == "unary":
            return f"({r.choice('-~')}{self.expr(ty, d)})"
        if k == "arith":
            op = r.choice(["+", "-", "*", "&", "|", "^"])
            a, b = self.expr(ty, d), self.operand(ty, d)
            return f"({a} {op} {b})" if r.random() < 0.7 else f"({b} {op} {a})"
        if k == "shift":
            op = r.choice(["<<", ">>"])
            n = bits_of(ty)
            if r.random() < 0.6:
                cnt = str(r.randrange(n))
            else:
                ct = r.choice([ty, *narrower(ty)])
                cnt = f"({self.expr(ct, d)} & {n - 1})"
            return f"({self.expr(ty, d)} {op} {cnt})"
        op = r.choice(["/", "%"])
        if r.random() < 0.4:
            v = 0
            while v == 0:
                v = self.value(ty)
            div = self.literal(v)
        else:
            dt = r.choice([ty, *narrower(ty)])
            div = f"({self.expr(dt, d)} | 1)"
        return f"({self.expr(ty, d)} {op} {div})"

    def item(self) -> Item:
        ty = self.r.choice(TYPES)
        if self.r.random() < 0.25:
            op = self.r.choice(["==", "!=", "<", "<=", ">", ">="])
            a, b = self.expr(ty, 1), self.operand(ty, 1)
            return Item(f"{a} {op} {b}", "bool")
        return Item(self.expr(ty), ty)


def render(items: list[Item], leaves: dict[str, tuple[str, int]], variant: str):
    """Source of one program; returns (text, {line: item index})."""
    names = list(leaves)
    out = ['license "GPL"']
    if variant in ("const", "config"):
        for n, (t, v) in leaves.items():
            out.append(f"{variant} {n}: {t} = {v}")
    out.append(f"map inp: array<u32, [u64; {len(names)}]>(max_entries: 1)")
    out.append(f"map out: array<u32, [u64; {max(1, len(items))}]>(max_entries: 1)")
    out.append("xdp fn fold(ctx) {")
    out.append("    let o = out.lookup(0) else { return XDP_ABORTED }")
    if variant == "runtime":
        out.append("    let iv = inp.lookup(0) else { return XDP_ABORTED }")
        for k, n in enumerate(names):
            out.append(f"    let {n} = iv[{k}] as {leaves[n][0]}")
    lines: dict[int, int] = {}
    for k, it in enumerate(items):
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


def _engines(with_kernel: bool) -> list[str]:
    if not with_kernel:
        return ["interp"]
    from bpfdsl.testing.pytest_plugin import kernel_unavailable_reason

    return ["interp"] if kernel_unavailable_reason() else ["interp", "kernel"]


def run_object(obj: bytes, engine: str, inputs: bytes, n_out: int) -> list[int]:
    """Run the program once on ``engine``; the ``n_out`` u64 results it wrote."""
    from bpfdsl.testing.pytest_plugin import BpfProgram

    prog = BpfProgram(engine, read_object(obj), "fold", None)
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


def compile_batch(items, leaves, report) -> dict[str, bytes] | None:
    """Compile the three variants, dropping items that a variant refuses (a finding when
    another variant accepts them, as every item is valid by construction).  None when
    the batch cannot be compiled at all."""
    for _attempt in range(len(items) + 1):
        objs, refused = {}, {}
        for v in VARIANTS:
            src, lines = render(items, leaves, v)
            try:
                # check=False: the kernel verifier loads every object anyway, and the
                # checker's walk of the many comparison branches dominates the time
                objs[v] = compile_source(src, f"fold_{v}.bpfd", mcpu="v4", check=False).obj
            except DiagnosticError as e:
                for d in e.diagnostics:
                    k = lines.get(d.span.line) if d.span is not None else None
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
    seed: int, count: int, batch: int = 40, with_kernel: bool = True, max_depth: int = 4
) -> Report:
    """Generate ``count`` expressions from ``seed`` and compare the ways of computing them."""
    t0 = time.monotonic()
    rnd = random.Random(seed)
    gen = Gen(rnd, max_depth)
    report = Report(seed=seed)
    engines = _engines(with_kernel)
    made = 0
    while made < count:
        n = min(batch, count - made)
        items = [gen.item() for _ in range(n)]
        for k, it in enumerate(items):
            it.index = made + k
        made += n
        report.expressions += n
        leaves = gen.leaves()
        inputs = b"".join(
            struct.pack("<Q", v & MASK64 & ((1 << bits_of(t)) - 1)) for t, v in leaves.values()
        )
        objs = compile_batch(items, leaves, report)
        if objs is None:
            continue
        results: dict[str, list[int]] = {}
        for v in VARIANTS:
            report.programs += 1
            for eng in engines:
                try:
                    results[f"{v}/{eng}"] = run_object(objs[v], eng, inputs, len(items))
                except Exception as e:  # a load or run failure is a finding, not a crash
                    report.findings.append(f"{v}/{eng}: {type(e).__name__}: {e}")
                report.runs[eng] = report.runs.get(eng, 0) + 1
        if not results:
            continue
        for k, it in enumerate(items):
            got = {way: vals[k] for way, vals in results.items()}
            report.compared += 1
            if len(set(got.values())) > 1:
                shown = ", ".join(f"{w}={x:#x}" for w, x in got.items())
                report.findings.append(
                    f"differ #{it.index}: {it.text} ({it.ty})\n    {shown}\n    leaves: "
                    + _leaves_of(it.text, leaves)
                )
    report.seconds = time.monotonic() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=1, help="generator seed (default 1)")
    ap.add_argument("--count", type=int, default=2000, help="expressions (default 2000)")
    ap.add_argument("--batch", type=int, default=40, help="expressions per program")
    ap.add_argument("--depth", type=int, default=4, help="maximum expression depth")
    ap.add_argument("--no-kernel", action="store_true", help="interpreter only")
    ap.add_argument("--show", type=int, default=10, help="findings to print (default 10)")
    a = ap.parse_args(argv)
    rep = campaign(a.seed, a.count, a.batch, not a.no_kernel, a.depth)
    runs = ", ".join(f"{k} {v}" for k, v in sorted(rep.runs.items()))
    print(
        f"seed {rep.seed}: expressions {rep.expressions}, compared {rep.compared}, "
        f"programs {rep.programs} (runs: {runs or 'none'}), findings {len(rep.findings)}, "
        f"{rep.seconds:.1f} s"
    )
    for f in rep.findings[: a.show]:
        print(f)
    return 1 if rep.findings else 0


if __name__ == "__main__":
    sys.exit(main())
