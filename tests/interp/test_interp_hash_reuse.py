"""A hash map value pointer held across updates and deletes of the map reads what the kernel
gives: the kernel replaces elements (never writes one in place) and reuses their memory --
a preallocated map swaps in a spare element for an existing key (hashtab.c alloc_htab_elem,
htab->extra_elems) and takes new elements from a last-in-first-out free list.  The
interpreter wrote a fresh element each time (found by tests/fuzz/programs.py as a map
difference between the engines).  Runs on both engines."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source

REPLACE = """    let m = hs.lookup(1) else { return XDP_DROP }
    hs.update(1, 7, BPF_ANY)
    out[0] = m
    hs.update(1, 9, BPF_ANY)
    out[1] = m
    let n = hs.lookup(1) else { return XDP_DROP }
    out[2] = n
"""
DELETE = """    let m = hs.lookup(1) else { return XDP_DROP }
    hs.delete(1)
    hs.update(2, 9, BPF_ANY)
    out[0] = m
    hs.update(2, 11, BPF_ANY)
    out[1] = m
    hs.update(3, 13, BPF_ANY)
    out[2] = m
"""


def source(body: str, flags: str) -> str:
    return (
        'license "GPL"\n'
        f"map hs: hash<u32, u64>(max_entries: 8{flags})\n"
        "map out: array<u32, u64>(max_entries: 4)\n"
        "xdp fn f(ctx) {\n" + body + "    return XDP_PASS\n}\n"
    )


@pytest.mark.parametrize(
    "body,flags,want",
    [
        (REPLACE, "", [5, 9, 9]),  # the old element became the spare, then got 9
        (REPLACE, ", no_prealloc: 1", [5, 9, 9]),  # old freed, reused by the next update
        (DELETE, "", [9, 9, 9]),  # key 2 took the deleted element; its update, the spare
        (DELETE, ", no_prealloc: 1", [9, 9, 13]),  # freed elements are reused last first
    ],
    ids=["replace", "replace-no-prealloc", "delete", "delete-no-prealloc"],
)
def test_stale_value_pointer_reads_as_on_the_kernel(bpf_program, body, flags, want) -> None:
    prog = bpf_program(compile_source(source(body, flags), "reuse.bpfd").obj)
    prog.maps["hs"].set(1, 5)
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    assert [prog.maps["out"].total(i) for i in range(3)] == want
