"""`m.contains(k)` results combined with `||`, `&&` or `!=` load in the kernel and give the
right verdict: LLVM merged `a.contains(x) || b` (b another contains, kept in a local) into
an OR of the two map-value pointers, which the verifier refuses ("pointer |= pointer
prohibited"; found by tests/fuzz/programs.py).  Runs on both engines."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source

SRC = """license "GPL"
map hs: hash<u32, u64>(max_entries: 8)
map other: hash<u32, u64>(max_entries: 8)
xdp fn f(ctx) {
    let a: bool = hs.contains(1)
    let b: bool = other.contains(2)
    let either: bool = hs.contains(3) || b
    let differ: bool = hs.contains(4) != other.contains(4)
    if hs.contains(2) || a { return XDP_DROP }
    if either && differ { return XDP_TX }
    if either || differ { return XDP_ABORTED }
    return XDP_PASS
}
"""


@pytest.mark.parametrize(
    "hs,other,verdict",
    [
        ([], [], "XDP_PASS"),
        ([1], [], "XDP_DROP"),
        ([2], [], "XDP_DROP"),
        ([3, 4], [], "XDP_TX"),
        ([], [2, 4], "XDP_TX"),
        ([], [4], "XDP_ABORTED"),
        ([3], [], "XDP_ABORTED"),
        ([4], [], "XDP_ABORTED"),
        ([3, 4], [4], "XDP_ABORTED"),
    ],
)
def test_combined_contains(bpf_program, hs: list[int], other: list[int], verdict: str) -> None:
    prog = bpf_program(compile_source(SRC, "contains.bpfd").obj)
    for k in hs:
        prog.maps["hs"].set(k, 1)
    for k in other:
        prog.maps["other"].set(k, 1)
    assert prog.run(bytes(64)).verdict == verdict
