"""The stack of a call chain: at most 512 bytes together, each frame rounded up to 16.

One rule (bpfdsl.abi.stack.check_max_stack_depth) gives the compiler's located
``stack-limit`` error and the checker's ``combined stack size`` error; here both are held
against the kernel (BPF_PROG_LOAD) on programs whose chains stay shallow, reach 512 bytes
exactly, pass 512 only through the rounding, pass it plainly, and fail first on a chain
that is not the deepest: the same verdict, and for a refusal the same chain length and
byte count, from all three."""

from __future__ import annotations

import re

import pytest
from support.unchecked import emit_unchecked

from bpfdsl.abi.limits import MAX_BPF_STACK
from bpfdsl.abi.stack import round_up_stack_depth
from bpfdsl.backend.target import stack_depths
from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

FILE = "chain.bpfd"

# A call graph: fn -> (bytes of the struct it keeps on its stack, the fns it calls, in
# order).  "p" is the XDP program; the others are noinline fns (BPF-to-BPF calls), listed
# callers first.  LLVM's frame is the struct and 8 bytes more (the fn's argument kept
# across the map update), which the cases' guards below check.
Graph = dict[str, tuple[int, list[str]]]

CASES: dict[str, tuple[Graph, bool]] = {  # name -> (graph, the kernel refuses it)
    "shallow": ({"p": (8, ["f1"]), "f1": (16, ["f2"]), "f2": (24, [])}, False),
    # 168 + 168 + 160 bytes: 176 + 176 + 160 = 512 after rounding, the most there is
    "512 after rounding": ({"p": (160, ["f1"]), "f1": (160, ["f2"]), "f2": (152, [])}, False),
    # 168 * 3 = 504 bytes, under 512; rounded 176 * 3 = 528: refused for the rounding only
    "over 512 by the rounding": (
        {"p": (160, ["f1"]), "f1": (160, ["f2"]), "f2": (160, [])},
        True,
    ),
    "deep": ({"p": (400, ["f1"]), "f1": (200, [])}, True),
    # p -> a -> c (3 frames, 528 bytes) is walked before the deeper p -> b (624 bytes):
    # the kernel names the first chain that fails, and so must the compiler and checker
    "first chain, not the deepest": (
        {"p": (160, ["a", "b"]), "a": (160, ["c"]), "b": (440, []), "c": (160, [])},
        True,
    ),
}


def program(graph: Graph) -> str:
    """The .bpfd text of ``graph``: each fn stores a struct of its bytes into a map of its
    own, then returns the sum of its callees' results (called left to right)."""
    out = ['license "GPL"']
    for fn, (size, _calls) in graph.items():
        fields = ", ".join(f"w{i}: u64" for i in range(size // 8))
        out.append(f"struct s_{fn} {{ {fields} }}\nmap m_{fn}: array<u32, s_{fn}>(max_entries: 1)")
    for fn, (_size, calls) in reversed(graph.items()):
        if fn == "p":
            continue
        ret = " + ".join(f"{c}(x + {k})" for k, c in enumerate(calls, 1)) or "x + 1"
        out.append(
            f"noinline fn {fn}(x: u32) -> u32 {{\n    m_{fn}[0] = s_{fn}(w0: x as u64)\n"
            f"    return {ret}\n}}"
        )
    calls = " + ".join(f"{c}(ctx.rx_queue_index)" for c in graph["p"][1])
    out.append(
        "xdp fn p(ctx) {\n    m_p[0] = s_p(w0: ctx.rx_queue_index as u64)\n"
        f"    if {calls} == 0 {{ return XDP_DROP }}\n    return XDP_PASS\n}}"
    )
    return "\n".join(out) + "\n"


def _line_of_call(src: str, caller: str, callee: str) -> int:
    """1-based line of the first call of ``callee`` in the body of ``caller``."""
    lines = src.splitlines()
    head = "xdp fn p(" if caller == "p" else f"noinline fn {caller}("
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    return next(i for i in range(start, len(lines)) if f"{callee}(" in lines[i]) + 1


_KERNEL = re.compile(r"combined stack size of (\d+) calls is (\d+)\. Too large")


@pytest.mark.kernel
@pytest.mark.parametrize("case", CASES)
def test_compiler_checker_and_kernel_agree_on_the_call_chains_stack(case):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    graph, refused = CASES[case]
    src = program(graph)
    obj = emit_unchecked(src, FILE)
    depths = stack_depths(obj)
    # the case tests what its name says: each frame is its struct and 8 bytes
    assert {fn: depths[fn] - 8 for fn in graph} == {fn: g[0] for fn, g in graph.items()}
    if case == "over 512 by the rounding":
        assert sum(depths.values()) <= MAX_BPF_STACK
        assert sum(map(round_up_stack_depth, depths.values())) > MAX_BPF_STACK

    spec = read_object(obj)
    try:
        load_collection(spec).close()
        kernel = None
    except VerifierError as e:
        m = _KERNEL.search(e.log)
        assert m, e.log[-2000:]
        kernel = (int(m.group(1)), int(m.group(2)))
    assert (kernel is not None) == refused, kernel

    checker = [e.message for p in check_object(spec).programs for e in p.errors]
    try:
        compile_source(src, FILE)
        compiled = None
    except DiagnosticError as e:
        compiled = e.diagnostics[0]
    if kernel is None:
        assert checker == [] and compiled is None, (checker, compiled)
        return
    calls, total = kernel
    assert checker == [f"combined stack size of {calls} calls is {total}. Too large"]
    assert compiled is not None and compiled.code == "stack-limit"
    chain = re.search(r"the call chain (.*) needs (\d+) bytes", compiled.message)
    assert chain, compiled.message
    names = chain.group(1).split(" -> ")
    assert (len(names), int(chain.group(2))) == (calls, total)
    # located: the call that enters the chain's last frame, its line shown, what to do
    assert compiled.span is not None and compiled.span.file == FILE
    line = _line_of_call(src, names[-2], names[-1])
    assert compiled.span.line == line
    text = DiagnosticError(compiled, source=src).render()
    assert f"{FILE}:{line}:{compiled.span.col}" in text
    assert src.splitlines()[line - 1].strip() in text
    assert compiled.hints and "map value" in compiled.hints[0]
