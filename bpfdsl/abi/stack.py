"""The kernel's stack rules, in one place: how deep one function's frame goes, and what every
call chain of a program adds up to (kernel/bpf/verifier.c ``round_up_stack_depth`` and
``check_max_stack_depth_subprog``).

Two users, one rule: the back end (:mod:`bpfdsl.backend.stackchain`) walks the program's
calls as the source names them, with the frame sizes of the object LLVM wrote
(:func:`frame_depth`), to give a located ``stack-limit`` error before anything loads; the
checker (:func:`bpfdsl.checker.subprog.check_call_graph`) walks the object's call
instructions with the frame sizes its walk found (the kernel's ``stack_depth``, recorded on
the paths the verifier takes), to say what the kernel says.  Both hand their call graph to
:func:`check_max_stack_depth`, which finds the chain the kernel refuses first.

The kernel's rules, per call chain from the program's start (calls and ``bpf_loop``
callback references alike, in instruction order, depth first):

* at most :data:`~bpfdsl.abi.limits.MAX_CALL_FRAMES` (8) frames ("the call stack of N
  frames is too deep !");
* the frames' stack, each rounded up to 16 bytes (with a JIT: :func:`round_up_stack_depth`),
  at most :data:`~bpfdsl.abi.limits.MAX_BPF_STACK` (512) bytes together ("combined stack
  size of N calls is M. Too large");
* a subprogram other than the program that tail-calls is entered with less than
  :data:`~bpfdsl.abi.limits.TAIL_CALL_STACK` (256) bytes of its callers' stack ("tail_calls
  are not allowed when call stack of previous frames is N bytes. Too large"); and none
  entered through a callback tail-calls ("cannot tail call within callback").
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from bpfdsl.abi.helpers import BPF_FUNC_TAIL_CALL
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.limits import MAX_BPF_STACK, MAX_CALL_FRAMES, TAIL_CALL_STACK
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_K,
    BPF_LD,
    BPF_LDX,
    BPF_MOV,
    BPF_ST,
    BPF_STX,
    BPF_X,
)

K = TypeVar("K", bound=Hashable)  # what names a subprogram: a symbol, an insn index
S = TypeVar("S")  # what names a call site: a source span, an insn index

STACK_ALIGN = 16  # bytes: round_up_stack_depth with a JIT (every kernel bpfdsl loads into)


def round_up_stack_depth(depth: int) -> int:
    """Bytes a frame of ``depth`` bytes takes on a call chain: ``depth`` rounded up to 16
    (kernel round_up_stack_depth when the program is JITed; interpreted it is 32, at least
    one, which bpfdsl does not model: every kernel it targets JITs)."""
    return (depth + STACK_ALIGN - 1) & -STACK_ALIGN


_MOV64_X = BPF_ALU64 | BPF_MOV | BPF_X
_ADD64_K = BPF_ALU64 | BPF_ADD | BPF_K


def frame_depth(insns: Iterable[Insn]) -> int:
    """Deepest stack byte one function's instructions touch, in bytes below r10: memory
    accesses through r10 or through a register holding ``r10 + const`` (copies tracked
    through ``rX = rY`` and ``rX += imm``, which counts on its own: a stack address handed
    to a helper; forgotten when overwritten, r0-r5 at calls).  Every instruction counts,
    reached or not, so this is at least the depth the kernel records on the paths it walks
    (its ``stack_depth``, which the checker computes the kernel's way)."""
    depth = 0
    fp: dict[int, int] = {}  # register -> its offset from r10 (a frame pointer copy)
    for x in insns:
        c = x.cls
        base = x.src if c == BPF_LDX else x.dst if c in (BPF_ST, BPF_STX) else None
        if base == 10:
            depth = max(depth, -x.off)
        elif base in fp:
            depth = max(depth, -(fp[base] + x.off))
        if x.opcode == _MOV64_X and (x.src == 10 or x.src in fp):  # r_dst = r10 (or a copy)
            fp[x.dst] = 0 if x.src == 10 else fp[x.src]
        elif x.opcode == _ADD64_K and x.dst in fp:  # r_dst += imm
            fp[x.dst] += x.imm
            depth = max(depth, -fp[x.dst])
        elif c in (BPF_LD, BPF_LDX, BPF_ALU, BPF_ALU64) and x.dst in fp:  # dst written
            del fp[x.dst]
        elif x.is_call:  # a call clobbers r0-r5
            fp = {r: o for r, o in fp.items() if r > 5}
    return depth


def has_tail_call(insns: Iterable[Insn]) -> bool:
    """Does the function call ``bpf_tail_call`` (kernel subprog_info ``has_tail_call``)?"""
    return any(x.is_helper_call and x.imm == BPF_FUNC_TAIL_CALL for x in insns)


@dataclass(frozen=True, slots=True)
class Subprog(Generic[K, S]):
    """One function of a call graph: ``depth``, the bytes of its own frame (unrounded);
    ``calls``, (call site, callee) of each BPF-to-BPF call and callback reference in it,
    in instruction order (the order the kernel walks them); ``tail_call``: it calls
    bpf_tail_call; ``callback``: a callback's address is taken of it (kernel ``is_cb``)."""

    depth: int
    calls: Sequence[tuple[S, K]] = ()
    tail_call: bool = False
    callback: bool = False


class Rule(Enum):
    """The rule a call chain breaks (the kernel's message each stands for)."""

    FRAMES = "frames"  # the call stack of N frames is too deep !
    TAIL_CALL_IN_CALLBACK = "tail-call-in-callback"  # cannot tail call within callback
    TAIL_CALL_STACK = "tail-call-stack"  # tail_calls are not allowed when call stack of ...
    COMBINED_STACK = "combined-stack"  # combined stack size of N calls is M. Too large


@dataclass(frozen=True, slots=True)
class ChainFault(Generic[K, S]):
    """The first call chain the kernel refuses: ``chain``, the subprograms from the
    program's start to the one where ``rule`` fails (``len(chain)`` frames); ``sites``, the
    call that entered each of ``chain[1:]``; ``stack``, in bytes: for COMBINED_STACK the
    stack of the whole chain (each frame rounded up to 16), else that of the frames above
    the last (for TAIL_CALL_STACK the kernel's figure)."""

    rule: Rule
    chain: tuple[K, ...]
    sites: tuple[S, ...]
    stack: int


def check_max_stack_depth(graph: Mapping[K, Subprog[K, S]], entry: K) -> ChainFault[K, S] | None:
    """The first call chain from ``entry`` that breaks a rule of the module doc, in the
    order the kernel walks them (depth first, each function's calls in instruction order:
    so the chain and figures are the kernel's), or None when every chain keeps them.

    ``graph``: every function reachable from ``entry`` (a callee missing from it raises
    KeyError).  The cost is the graph's edges times the 8 frame levels, not the number of
    chains (which grows as the fan-out to the 8th power): for each (function, frame level,
    under a callback) it computes once the least stack above it at which a walk from it
    fails, then follows the first call whose threshold the chain reaches.  A call cycle
    (the kernel's walk refuses recursion before this check) is a chain that runs into the
    frame limit."""
    memo: dict[tuple[K, int, bool], int] = {}

    def threshold(fn: K, frames: int, under_cb: bool) -> int:
        """Least stack above ``fn`` (entered as frame ``frames``, 1 for the program) at
        which the kernel's walk from ``fn`` fails (there is one: at 513 - its own frame
        the frame alone passes 512)."""
        key = (fn, frames, under_cb)
        hit = memo.get(key)
        if hit is not None:
            return hit
        if frames > MAX_CALL_FRAMES:
            memo[key] = 0
            return 0
        sp = graph[fn]
        under_cb = under_cb or sp.callback
        if under_cb and sp.tail_call:
            memo[key] = 0
            return 0
        own = round_up_stack_depth(sp.depth)
        least = MAX_BPF_STACK + 1 - own
        if fn != entry and sp.tail_call:
            least = min(least, TAIL_CALL_STACK)
        for _site, callee in sp.calls:
            least = min(least, threshold(callee, frames + 1, under_cb) - own)
        least = max(least, 0)
        memo[key] = least
        return least

    if threshold(entry, 1, False) > 0:
        return None
    chain: list[K] = [entry]
    sites: list[S] = []
    fn, above, under_cb = entry, 0, False
    while True:
        if len(chain) > MAX_CALL_FRAMES:
            return ChainFault(Rule.FRAMES, tuple(chain), tuple(sites), above)
        sp = graph[fn]
        under_cb = under_cb or sp.callback
        if under_cb and sp.tail_call:
            return ChainFault(Rule.TAIL_CALL_IN_CALLBACK, tuple(chain), tuple(sites), above)
        if fn != entry and sp.tail_call and above >= TAIL_CALL_STACK:
            return ChainFault(Rule.TAIL_CALL_STACK, tuple(chain), tuple(sites), above)
        depth = above + round_up_stack_depth(sp.depth)
        if depth > MAX_BPF_STACK:
            return ChainFault(Rule.COMBINED_STACK, tuple(chain), tuple(sites), depth)
        site, fn = next(
            (site, callee)
            for site, callee in sp.calls
            if depth >= threshold(callee, len(chain) + 1, under_cb)
        )  # one exists: this function's threshold is at most ``above``
        chain.append(fn)
        sites.append(site)
        above = depth
