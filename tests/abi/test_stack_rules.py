"""bpfdsl.abi.stack.check_max_stack_depth finds the chain the kernel's
check_max_stack_depth_subprog refuses first.  The kernel walks every chain, depth first, in
instruction order; the function computes a threshold per (function, frame level) instead,
so that a wide call graph costs its calls, not its chains.  Here it is held against that
walk written out (:func:`kernel_walk`, kernel/bpf/verifier.c's loop as a recursion) on
random call graphs with frames, tail calls and callbacks near every limit; the kernel
itself is the oracle of tests/backend/test_call_chain_stack.py."""

from __future__ import annotations

import random

import pytest

from bpfdsl.abi.limits import MAX_BPF_STACK, MAX_CALL_FRAMES, TAIL_CALL_STACK
from bpfdsl.abi.stack import ChainFault, Rule, Subprog, check_max_stack_depth, round_up_stack_depth


def kernel_walk(graph: dict[int, Subprog[int, int]], entry: int) -> ChainFault | None:
    """Every chain from ``entry`` in the kernel's order; the first fault, as the kernel
    checks them on entering a function: frames, a tail call under a callback, the stack
    above a tail-calling subprogram, the combined stack."""

    def visit(fn: int, above: int, chain: tuple[int, ...], sites: tuple[int, ...], cb: bool):
        if len(chain) > MAX_CALL_FRAMES:
            return ChainFault(Rule.FRAMES, chain, sites, above)
        sp = graph[fn]
        cb = cb or sp.callback
        if cb and sp.tail_call:
            return ChainFault(Rule.TAIL_CALL_IN_CALLBACK, chain, sites, above)
        if fn != entry and sp.tail_call and above >= TAIL_CALL_STACK:
            return ChainFault(Rule.TAIL_CALL_STACK, chain, sites, above)
        depth = above + round_up_stack_depth(sp.depth)
        if depth > MAX_BPF_STACK:
            return ChainFault(Rule.COMBINED_STACK, chain, sites, depth)
        for site, callee in sp.calls:
            hit = visit(callee, depth, (*chain, callee), (*sites, site), cb)
            if hit is not None:
                return hit
        return None

    return visit(entry, 0, (entry,), (), False)


def random_graph(rng: random.Random, n: int) -> dict[int, Subprog[int, int]]:
    """``n`` functions, 0 the program; function k calls only later ones (no cycles), 0-3
    call sites each, mostly to the next two; frames mostly of 0-24 bytes (long chains run into the frame limit),
    some of up to 200 (any multiple of 8, so the rounding matters)."""
    graph = {}
    site = 0
    for k in range(n):
        calls = []
        for _ in range(rng.randrange(4) if k < n - 1 else 0):
            near = rng.random() < 0.7  # mostly the next few: long chains
            calls.append((site, rng.randrange(k + 1, min(n, k + 3) if near else n)))
            site += 1
        graph[k] = Subprog(
            8 * rng.randrange(26 if rng.random() < 0.3 else 4),
            tuple(calls),
            tail_call=rng.random() < 0.1,
            callback=k > 0 and rng.random() < 0.05,
        )
    return graph


@pytest.mark.parametrize("seed", range(300))
def test_the_threshold_walk_finds_the_kernels_first_fault(seed):
    rng = random.Random(seed)
    graph = random_graph(rng, rng.randrange(2, 16))
    assert check_max_stack_depth(graph, 0) == kernel_walk(graph, 0)


def test_the_random_graphs_reach_every_rule():
    """The graphs above pass and fail each rule (so the comparison covers them all)."""
    seen = set()
    for seed in range(300):
        rng = random.Random(seed)
        hit = kernel_walk(random_graph(rng, rng.randrange(2, 16)), 0)
        seen.add(hit.rule if hit else None)
    assert seen == {None, *Rule}


def test_a_frame_takes_its_bytes_rounded_up_to_16():
    assert [round_up_stack_depth(d) for d in (0, 1, 8, 16, 17, 504, 512)] == [
        0, 16, 16, 16, 32, 512, 512,
    ]  # fmt: skip
