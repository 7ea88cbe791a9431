"""``/`` and ``%`` give the language's values for every divisor, whatever LLVM knows of it:
x / 0 = 0, x % 0 = x, signed MIN / -1 = MIN and MIN % -1 = 0 (the BPF ISA's rule,
``bpfdsl/abi/intops.py``), otherwise C's truncating division.

A table over every integer type, both operators, ``--mcpu`` v1..v4 and the divisors 0, 1,
-1, MIN and MAX, with the divisor a config set at load time, a map value, a packet field, a
local bound to a literal (LLVM sees its value) and a ``const`` (folded by sema; never 0,
which is the ``division-by-zero`` error).  Each result is also used where LLVM reasons
about a quotient (``q == 0``, ``q < d``, ``q <= a``, ``q + d``): LLVM's ``udiv``/``urem``
by zero is undefined, and before the fix ``100 / d == 0`` with a config ``d`` compiled to
``d > 100`` (issue #23).  Every value comes from :func:`bpfdsl.abi.intops.binop` (what
constant folding computes), the interpreter and BPF_PROG_TEST_RUN alike."""

from __future__ import annotations

import functools
import struct

import pytest

from bpfdsl.abi import intops
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object
from bpfdsl.testing.pytest_plugin import BpfProgram

TYPES = ("u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64")
MCPUS = ("v1", "v2", "v3", "v4")
SOURCES = ("config", "map", "packet", "local", "const")


def _bits(ty: str) -> int:
    return int(ty[1:])


def _signed(ty: str) -> bool:
    return ty[0] == "i"


def edges(ty: str) -> list[int]:
    """The divisors of the table, raw: 0, 1, -1, MIN, MAX (of an unsigned type: -1 is MAX,
    MIN is 0, so 2 and MAX - 1 stand in for them)."""
    b = _bits(ty)
    m = (1 << b) - 1
    if _signed(ty):
        return [0, 1, m, 1 << (b - 1), m >> 1]
    return [0, 1, m, 2, m - 1]


def dividends(ty: str) -> list[int]:
    b = _bits(ty)
    m = (1 << b) - 1
    return [0, 100, m, 1 << (b - 1)]


def _lit(raw: int, ty: str) -> str:
    v = intops.value_of(raw, _bits(ty), _signed(ty))
    return f"({v})" if v < 0 else str(v)


# what each expression `e = a op d` feeds (the result's use LLVM may reason about)
USES = ("value", "eq0", "lt_d", "le_a", "plus_d")


def _uses(e: str, a: str, d: str, src: str) -> list[tuple[str, str]]:
    """The uses of ``e``: all five where the divisor is a config or a local (LLVM knows
    nothing, or everything, of it), the first two for the other sources."""
    return [
        ("value", f"({e}) as u64"),
        ("eq0", f"{e} == 0"),
        ("lt_d", f"{e} < {d}"),
        ("le_a", f"{e} <= {a}"),
        ("plus_d", f"({e} + {d}) as u64"),
    ][: 5 if src in ("config", "local") else 2]


def expected(ty: str, op: str, a: int, d: int) -> list[int]:
    """The results of :func:`_uses` by the fold's rules (intops)."""
    b, s = _bits(ty), _signed(ty)
    q = intops.binop(op, a, d, b, s)
    return [
        intops.convert(q, b, s, 64),
        int(q == 0),
        int(intops.compare("<", q, d, b, s)),
        int(intops.compare("<=", q, a, b, s)),
        intops.convert(intops.binop("+", q, d, b, s), b, s, 64),
    ]


def source(ty: str, sources=SOURCES) -> tuple[str, list[tuple[str, str, int, int, str]]]:
    """The program of one type and the cells it writes, in order: (source, op, dividend,
    divisor, use).  Dividends are configs ``a<i>`` (set at load time)."""
    b = _bits(ty)
    ds, ns = edges(ty), dividends(ty)
    out = ['license "GPL"']
    out += [f"config a{i}: {ty} = 0" for i in range(len(ns))]
    out += [f"config c{j}: {ty} = 0" for j in range(len(ds))]
    out += [f"const k{j}: {ty} = {_lit(d, ty)}" for j, d in enumerate(ds) if d]
    fields = ", ".join(f"f{j}: bit<{b}>" for j in range(len(ds)))
    out.append(f"header dv {{ {fields} }}")
    out.append(f"map inp: array<u32, [{ty}; {len(ds)}]>(max_entries: 1)")
    cells: list[tuple[str, str, int, int, str]] = []
    body: list[str] = []
    for src in sources:
        for j, d in enumerate(ds):
            if src == "const" and d == 0:
                continue
            dv = {
                "config": f"c{j}",
                "map": f"iv[{j}]",
                "packet": f"(pv.f{j} as {ty})",
                "local": f"l{j}",
                "const": f"k{j}",
            }[src]
            for i, a in enumerate(ns):
                for op in ("/", "%"):
                    for use, text in _uses(f"(a{i} {op} {dv})", f"a{i}", dv, src):
                        k = len(cells)
                        cells.append((src, op, a, d, use))
                        if text.endswith("as u64"):
                            body.append(f"    o[{k}] = {text}")
                        else:
                            body.append(f"    if {text} {{ o[{k}] = 1 }}")
    out.append(f"map out: array<u32, [u64; {len(cells)}]>(max_entries: 1)")
    out.append("xdp fn f(ctx) {")
    out.append("    let o = out.lookup(0) else { return XDP_ABORTED }")
    out.append("    let iv = inp.lookup(0) else { return XDP_ABORTED }")
    out.append("    let pv = parse dv else { return XDP_ABORTED }")
    out += [f"    let l{j}: {ty} = {_lit(d, ty)}" for j, d in enumerate(ds)]
    out += body
    out += ["    return XDP_PASS", "}"]
    return "\n".join(out) + "\n", cells


@functools.cache
def compiled(ty: str, mcpu: str) -> bytes:
    return compile_source(source(ty)[0], f"div_{ty}.bpfd", mcpu=mcpu).obj


def run_table(ty: str, mcpu: str, engine: str) -> None:
    text, cells = source(ty)
    ds, ns = edges(ty), dividends(ty)
    b = _bits(ty)
    config = {f"a{i}": intops.value_of(a, b, _signed(ty)) for i, a in enumerate(ns)}
    config |= {f"c{j}": intops.value_of(d, b, _signed(ty)) for j, d in enumerate(ds)}
    prog = BpfProgram(engine, read_object(compiled(ty, mcpu)), "f", config)
    try:
        prog.maps["inp"].set(0, b"".join(d.to_bytes(b // 8, "little") for d in ds))
        frame = b"".join(d.to_bytes(b // 8, "big") for d in ds) + bytes(64)
        assert prog.run(frame).retval == 2
        raw = prog.maps["out"].get(0)
    finally:
        prog.close()
    got = struct.unpack(f"<{len(cells)}Q", raw)
    want: dict[tuple, int] = {}
    for src, op, a, d, use in cells:
        want[(src, op, a, d, use)] = expected(ty, op, a, d)[USES.index(use)]
    wrong = [
        f"{src}: {_lit(a, ty)} {op} {_lit(d, ty)} {use}: got {g:#x}, want {want[c]:#x}"
        for c, g in zip(cells, got, strict=True)
        for src, op, a, d, use in [c]
        if g != want[c]
    ]
    assert not wrong, f"{ty} --mcpu {mcpu} on {engine}: {len(wrong)} wrong\n" + "\n".join(
        wrong[:40]
    )


def _cases():
    for ty in TYPES:
        for mcpu in MCPUS:
            if _signed(ty) and mcpu != "v4":
                continue  # signed run-time division needs sdiv/smod: the test below
            yield ty, mcpu


@pytest.mark.parametrize("ty,mcpu", list(_cases()))
def test_division_table_on_the_interpreter(ty, mcpu):
    run_table(ty, mcpu, "interp")


@pytest.mark.kernel
@pytest.mark.parametrize("ty,mcpu", list(_cases()))
def test_division_table_on_the_kernel(ty, mcpu):
    run_table(ty, mcpu, "kernel")


@pytest.mark.parametrize("ty", [t for t in TYPES if _signed(t)])
@pytest.mark.parametrize("mcpu", ["v1", "v2", "v3"])
@pytest.mark.parametrize("src", ["config", "map", "packet", "local"])
def test_signed_runtime_division_below_v4_is_a_located_error(ty, mcpu, src):
    text, _ = source(ty, sources=(src,))
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "div.bpfd", mcpu=mcpu)
    d = ei.value.diagnostics[0]
    assert d.code == "signed-division" and d.span is not None and d.span.line > 1


REPRO = """license "GPL"
config d: u64 = 0
xdp fn f(ctx) {
    if 100 / d == 0 { return XDP_DROP } else { return XDP_PASS }
}
"""


@pytest.mark.parametrize("mcpu", MCPUS)
def test_issue_23_quotient_of_a_zero_config(mcpu, bpf_engine):
    """100 / d with config d = 0 is 0: XDP_DROP (LLVM had made it `d > 100`: XDP_PASS);
    with d = 1 it is 100: XDP_PASS; d = 101: 0 again."""
    spec = read_object(compile_source(REPRO, "x.bpfd", mcpu=mcpu).obj)
    frame = bytes.fromhex("00000000000000000000000008004500")
    for d, verdict in ((0, "XDP_DROP"), (1, "XDP_PASS"), (101, "XDP_DROP")):
        prog = BpfProgram(bpf_engine, spec, "f", {"d": d})
        try:
            assert prog.run(frame).verdict == verdict, d
        finally:
            prog.close()


def test_signed_runtime_division_at_probe_is_a_located_error():
    """-mcpu probe: LLVM 19's host probe finds v3 at most (no sdiv), so a signed run-time
    division is the signed-division error there too, not LLVM's exit of the process."""
    text, _ = source("i32", sources=("config",))
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "div.bpfd", mcpu="probe")
    assert ei.value.diagnostics[0].code == "signed-division"


FOLDED_ZERO = """license "GPL"
config x: {ty} = 0
config y: {ty} = 0
map out: array<u32, [u64; 3]>(max_entries: 1)
xdp fn f(ctx) {{
    let o = out.lookup(0) else {{ return XDP_ABORTED }}
    o[0] = (x % (y % (-1))) as u64
    o[1] = (x / (y % (-1))) as u64
    if (x / (y % (-1))) == 0 {{ o[2] = 1 }}
    return XDP_PASS
}}
"""


@pytest.mark.parametrize("ty", [t for t in TYPES if _signed(t)])
def test_divisor_folded_to_zero_by_codegen(ty, bpf_engine):
    """`y % -1` is 0 whatever y is, and codegen makes it the constant 0 (BPF's MIN % -1
    rule, without LLVM's srem): a division by it is still by zero at run time, x % 0 = x
    and x / 0 = 0 (found by scripts/fuzz_fold.py: it was LLVM's `srem x, 0`, undefined)."""
    spec = read_object(compile_source(FOLDED_ZERO.format(ty=ty), "z.bpfd", mcpu="v4").obj)
    b = _bits(ty)
    for x in (-(1 << (b - 1)), -36, 0, 7, (1 << (b - 1)) - 1):
        prog = BpfProgram(bpf_engine, spec, "f", {"x": x, "y": -1})
        try:
            assert prog.run(bytes(64)).retval == 2
            got = struct.unpack("<3Q", prog.maps["out"].get(0))
        finally:
            prog.close()
        assert got == (x & ((1 << 64) - 1), 0, 1), x
