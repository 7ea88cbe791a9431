"""`if m.contains(k)` branches on the lookup's pointer (as C's `if (!bpf_map_lookup_elem(..))`,
no 0/1 value in between), and a map key that is a field of a struct in the program's stack
(`fib.ifindex`) is passed as a pointer into that struct, not copied to a slot of its own.
Both give the verdicts a user expects, alone and combined with `!`, `&&`, `||`, on both
engines; the router's devmap check is the C twin's instruction shape."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

SRC = """license "GPL"
struct pair { a: u32, b: u32 }
map hs: hash<u32, u64>(max_entries: 8)
map other: hash<u32, u64>(max_entries: 8)
xdp fn f(ctx) {
    let p = pair(a: 5, b: 6)
    if !hs.contains(p.b) && !other.contains(p.a) { return XDP_PASS }
    if hs.contains(p.b) && other.contains(p.a) { return XDP_TX }
    if !(other.contains(p.a) || !hs.contains(7)) { return XDP_ABORTED }
    if hs.contains(p.b) { return XDP_DROP }
    return XDP_REDIRECT
}
"""


@pytest.mark.parametrize(
    "hs,other,verdict",
    [
        ([], [], "XDP_PASS"),
        ([6], [5], "XDP_TX"),
        ([6, 7], [], "XDP_ABORTED"),
        ([6], [], "XDP_DROP"),
        ([5], [5], "XDP_REDIRECT"),
        ([7], [5], "XDP_REDIRECT"),
    ],
)
def test_contains_as_a_condition(bpf_program, hs: list[int], other: list[int], verdict: str):
    prog = bpf_program(compile_source(SRC, "contains.bpfd").obj)
    for k in hs:
        prog.maps["hs"].set(k, 1)
    for k in other:
        prog.maps["other"].set(k, 1)
    assert prog.run(bytes(64)).verdict == verdict


def _insns(src: str):
    spec = read_object(compile_source(src, "f.bpfd").obj)
    (prog,) = spec.programs.values()
    return prog.insns


def test_condition_branches_on_the_pointer_and_key_is_the_field():
    """`if !m.contains(s.b)`: r2 = fp - N (the field's own bytes: the struct is at fp - 8,
    b at + 4), call, `if r0 == 0` -- no key copy, no 0/1 value before the branch."""
    src = """license "GPL"
struct pair { a: u32, b: u32 }
map hs: hash<u32, u64>(max_entries: 8)
xdp fn f(ctx) {
    let p = pair(a: ctx.rx_queue_index, b: ctx.ingress_ifindex)
    if !hs.contains(p.b) { return XDP_PASS }
    return XDP_DROP
}
"""
    insns = _insns(src)
    call = next(i for i, x in enumerate(insns) if x.is_helper_call)
    after = insns[call + 1 :]
    jumps = [x for x in after if x.is_cond_jump]
    assert len(jumps) == 1 and jumps[0].imm == 0  # the one branch: lookup result vs NULL
    before_jump = after[: after.index(jumps[0])]
    copies_r0 = {x.dst for x in before_jump if x.opcode == 0xBF and x.src == 0}  # rX = r0
    assert jumps[0].dst in {0} | copies_r0  # on the pointer itself, not a 0/1 made of it
    assert len(before_jump) <= 2  # (the copy, the verdict's mov)
    stores = [x for x in insns[:call] if x.is_store]
    assert len(stores) == 2  # p.a and p.b, no third copy of p.b as the key
