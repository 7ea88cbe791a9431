"""The kernel's rewrite of a verified program, and the jump range the rewrite must keep.

After do_check accepts a program, Linux 6.18's ``bpf_check`` rewrites it before the JIT
(kernel/bpf/verifier.c, in this order; root, i.e. ``env->bpf_capable``, and x86-64):

1. ``opt_hard_wire_dead_code_branches``: a conditional jump whose fall-through the walk
   never reached becomes ``goto`` its target; one whose target it never reached becomes
   ``ja 0`` (a nop).
2. ``opt_remove_dead_code``: every insn the walk never reached (``aux->seen``) is removed.
3. ``opt_remove_nops``: every ``ja 0`` (``BPF_JMP_IMM(BPF_JA, 0, 0, 0)``) left is removed
   (a goto whose target is the next live insn became one).  Without privilege (not
   modelled for refusals) dead code is overwritten (``sanitize_dead_code``), not removed.
4. ``convert_ctx_accesses``: each load/store through the context becomes the program
   type's ``convert_ctx_access`` sequence (net/core/filter.c ``xdp_convert_ctx_access``,
   ``sk_msg_convert_ctx_access``, ``sock_ops_convert_ctx_access``; :data:`CTX_SIZES`), a
   sign-extending load (BPF_MEMSX) one more (the ``movsx``).
5. ``do_misc_fixups``: div/mod by a register is wrapped in a zero check (:func:`_div_size`);
   ``bpf_map_lookup_elem`` of a map whose ``map_gen_lookup`` exists is inlined
   (kernel/bpf/arraymap.c ``array_map_gen_lookup``, ``percpu_array_map_gen_lookup``,
   ``array_of_map_gen_lookup``; kernel/bpf/hashtab.c ``htab_map_gen_lookup``,
   ``htab_lru_map_gen_lookup``, ``htab_percpu_map_gen_lookup``, ``htab_of_map_gen_lookup``;
   net/xdp/xskmap.c ``xsk_map_gen_lookup``; :data:`GEN_LOOKUP_SIZES`) unless the call
   site saw two maps (``bpf_map_ptr_poisoned``); ``bpf_tail_call`` stays one insn for root
   (a constant key becomes a direct jump, ``poke_tab``, any other key is bounded by the JIT:
   the bound check and index mask, +2, are only for unprivileged loaders,
   ``bpf_map_ptr_unpriv``; measured on 6.18, progs/xdp_dispatch.bpfd);
   ``bpf_get_smp_processor_id`` (x86-64,
   ``verifier_inlines_helper_call``) and ``bpf_jiffies64`` become 3 insns.

Every rewrite of one insn into ``len`` goes through ``bpf_patch_insn_data`` ->
``bpf_patch_insn_single`` (kernel/bpf/core.c): once the program would exceed S16_MAX
insns, ``bpf_adj_branches`` first probes every jump that crosses the patch, and when its
offset no longer fits (``bpf_adj_delta_to_off``: s16 ``off``; ``BPF_JMP32 | BPF_JA``, gotol,
uses its s32 ``imm``) the patch fails with -ERANGE and the verifier logs
``insn N cannot be patched due to 16-bit range`` (N the original index of the insn being
patched); ``convert_ctx_accesses`` / ``do_misc_fixups`` then return -ENOMEM, the errno the
load fails with.  A jump grows by the patches strictly between it and a forward target,
or from a backward target up to it (the target itself included); patches are applied in
insn order, ctx conversions first.

:func:`patch_range_fault` finds the first patch, in the kernel's order, that pushes a
jump out of range, and :func:`patched_length` is the model's ``xlated_prog_len / 8``.

The sizes are those of the kernel functions named; tests/checker/test_checker_fixups.py
checks the whole model against 6.18's own ``xlated_prog_len`` (progs/ and programs holding
each rewrite above) and the 16-bit boundary against 6.18's refusal.  Not checked there:
mod by a register (LLVM writes ``a % b`` as div, mul, sub), the signed div/mod forms, the
map-in-map and xskmap lookups.

What is not modelled (each counted as one insn, so the model can only under-estimate the
growth and never refuses a program for it): ctx fields outside :data:`CTX_SIZES` (narrow
ctx loads' shift/mask, sock_ops fields other than those listed, tc/skb programs'
``gen_prologue``), socket-pointer field loads (``bpf_sock_convert_ctx_access``),
``bpf_loop`` inlining (``optimize_bpf_loop``), ``may_goto``, LD_ABS/LD_IND, kfunc
rewrites, the storage-get helpers' extra argument, and the unprivileged rewrites
(Spectre masks, ``index_mask`` of array lookups, ``sanitize_dead_code``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from bpfdsl.abi.flags import BPF_F_INNER_MAP
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.insn import Insn
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import (
    BPF_ALU64,
    BPF_CALL,
    BPF_DIV,
    BPF_EXIT,
    BPF_JA,
    BPF_JMP,
    BPF_JMP32,
    BPF_LDX,
    BPF_MEMSX,
    BPF_MOD,
    BPF_X,
)
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import domain as D
from bpfdsl.checker.env import Env, Fault

PATCH_RANGE: Final = "patch-range"
S16_MAX: Final = 32767
S16_MIN: Final = -32768

# Env.call_maps value of a call site that saw two different maps (kernel BPF_MAP_PTR_POISON)
POISON: Final = "poisoned"

_LOOKUP: Final = HELPERS["map_lookup_elem"].id
_TAIL_CALL: Final = HELPERS["tail_call"].id
_SMP_ID: Final = HELPERS["get_smp_processor_id"].id
_JIFFIES: Final = HELPERS["jiffies64"].id if "jiffies64" in HELPERS else -1

# insns ``map_gen_lookup`` emits for a map created by root (map->bypass_spec_v1: no
# index_mask AND) on x86-64 (bpf_jit_supports_percpu_insn); a map type not listed has no
# map_gen_lookup and its lookup stays one call.
GEN_LOOKUP_SIZES: Final[dict[int, int]] = {
    MapType.ARRAY: 7,  # add, ldx w, jge, lsh|mul, add, ja, mov 0
    MapType.PERCPU_ARRAY: 9,  # ... ldx dw, mov64_percpu
    MapType.ARRAY_OF_MAPS: 9,  # ... ldx dw, jeq 0
    MapType.HASH: 3,  # call __htab_map_lookup_elem, jeq 0, add
    MapType.LRU_HASH: 6,  # ... ldxb ref, jne, stb ref
    MapType.PERCPU_HASH: 5,  # ... ldx dw, mov64_percpu
    MapType.HASH_OF_MAPS: 4,  # ... ldx dw
    MapType.XSKMAP: 8,
}

# (program type, ctx field offset) -> insns of the converted load (store: the same unless
# noted in the function); from the convert_ctx_access functions of net/core/filter.c.
_FULLSOCK_FIELD = -1  # SOCK_OPS_GET_FIELD: 4 insns, 8 when dst_reg == src_reg
CTX_SIZES: Final[dict[tuple[int, int], int]] = {
    # struct xdp_md: data, data_end, data_meta, ingress_ifindex (rxq->dev->ifindex),
    # rx_queue_index (rxq->queue_index), egress_ifindex (txq->dev->ifindex)
    (ProgramType.XDP, 0): 1,
    (ProgramType.XDP, 4): 1,
    (ProgramType.XDP, 8): 1,
    (ProgramType.XDP, 12): 3,
    (ProgramType.XDP, 16): 2,
    (ProgramType.XDP, 20): 3,
    # struct sk_msg_md: data, data_end, family, remote_ip4, local_ip4, remote_ip6[4],
    # local_ip6[4], remote_port (+ lsh 16), local_port, size, sk
    (ProgramType.SK_MSG, 0): 1,
    (ProgramType.SK_MSG, 8): 1,
    (ProgramType.SK_MSG, 16): 2,
    (ProgramType.SK_MSG, 20): 2,
    (ProgramType.SK_MSG, 24): 2,
    **{(ProgramType.SK_MSG, 28 + 4 * k): 2 for k in range(8)},
    (ProgramType.SK_MSG, 60): 3,
    (ProgramType.SK_MSG, 64): 2,
    (ProgramType.SK_MSG, 68): 1,
    (ProgramType.SK_MSG, 72): 1,
    # struct bpf_sock_ops: op, args/reply/replylong, family, remote_ip4, local_ip4,
    # remote_ip6[4], local_ip6[4], remote_port (+ lsh 16), local_port, is_fullsock, then
    # the tcp_sock fields read through is_fullsock (SOCK_OPS_GET_FIELD), state (2)
    (ProgramType.SOCK_OPS, 0): 1,
    **{(ProgramType.SOCK_OPS, 4 + 4 * k): 1 for k in range(4)},
    (ProgramType.SOCK_OPS, 20): 2,
    (ProgramType.SOCK_OPS, 24): 2,
    (ProgramType.SOCK_OPS, 28): 2,
    **{(ProgramType.SOCK_OPS, 32 + 4 * k): 2 for k in range(8)},
    (ProgramType.SOCK_OPS, 64): 3,
    (ProgramType.SOCK_OPS, 68): 2,
    (ProgramType.SOCK_OPS, 72): 1,
    (ProgramType.SOCK_OPS, 76): _FULLSOCK_FIELD,  # snd_cwnd
    (ProgramType.SOCK_OPS, 80): _FULLSOCK_FIELD,  # srtt_us
    (ProgramType.SOCK_OPS, 84): _FULLSOCK_FIELD,  # bpf_sock_ops_cb_flags
    (ProgramType.SOCK_OPS, 88): 2,  # state
}


def _ctx_size(prog_type: int, x: Insn) -> int:
    """Insns of the converted context access ``x`` (1 when not known)."""
    n = CTX_SIZES.get((prog_type, x.off), 1)
    if n == _FULLSOCK_FIELD:
        n = 8 if x.dst == x.src else 4
    if x.cls == BPF_LDX and x.mode == BPF_MEMSX:
        n += 1
    return n


def _div_size(x: Insn) -> int:
    """Insns do_misc_fixups makes of a div/mod by a register ("Make divide-by-zero and
    divide-by-minus-one exceptions impossible"): div 4, mod 2 (32-bit mod 4: the upper half
    is zeroed), sdiv 8, smod 7 (32-bit 9)."""
    is64 = x.cls == BPF_ALU64
    if x.op == BPF_DIV:
        return 8 if x.off == 1 else 4
    if x.off == 1:
        return 7 if is64 else 9
    return 2 if is64 else 4


@dataclass(slots=True)
class Patch:
    """One insn the kernel rewrites: list index ``idx``, the ``size`` it becomes, the pass
    (``ctx``: convert_ctx_accesses, ``misc``: do_misc_fixups) and what it is."""

    idx: int
    size: int
    phase: str
    what: str


@dataclass(slots=True)
class Layout:
    """The program as the kernel leaves it: ``kept`` list indexes of the insns still there
    after dead-code and nop removal, in order; ``patches`` by pass; ``length`` the
    insns (slots) of the rewritten program (the kernel's ``xlated_prog_len / 8``)."""

    kept: list[int]
    ctx: list[Patch] = field(default_factory=list)
    misc: list[Patch] = field(default_factory=list)
    length: int = 0


def _target(insns: Sequence[Insn], slots: Sequence[int], at_slot: dict[int, int], i: int) -> int:
    """List index of the jump target of insns[i] (-1 when it is not an insn start)."""
    x = insns[i]
    off = x.imm if x.cls == BPF_JMP32 and x.op == BPF_JA else x.off
    return at_slot.get(slots[i] + 1 + off, -1)


def _is_cond_jump(x: Insn) -> bool:
    """kernel insn_is_cond_jump."""
    if x.cls == BPF_JMP32:
        return x.op != BPF_JA
    return x.cls == BPF_JMP and x.op not in (BPF_JA, BPF_EXIT, BPF_CALL)


def _is_branch(x: Insn) -> bool:
    """A jump whose offset bpf_adj_delta_to_off adjusts (not call, not exit)."""
    return x.cls in (BPF_JMP, BPF_JMP32) and x.op not in (BPF_EXIT, BPF_CALL)


def layout(
    env: Env, insns: Sequence[Insn], slots: Sequence[int], visits: Sequence[int]
) -> tuple[Layout, dict[int, int]]:
    """The kernel's rewrite of the walked program (module docstring, steps 1-5); also the
    jump target (list index) of each kept jump, after hard-wiring."""
    n = len(insns)
    at_slot = {s: i for i, s in enumerate(slots)}
    seen = [v > 0 for v in visits] if len(visits) == n else [True] * n
    targets: dict[int, int] = {}
    nop = [False] * n
    ja = [False] * n  # an unconditional goto (BPF_JMP | BPF_JA, regs and imm 0)
    for i, x in enumerate(insns):
        if not _is_branch(x):
            continue
        t = _target(insns, slots, at_slot, i)
        if t < 0:
            continue
        targets[i] = t
        ja[i] = x.cls == BPF_JMP and x.op == BPF_JA and not (x.dst or x.src or x.imm)
        if env.privileged and _is_cond_jump(x) and seen[i]:
            if i + 1 < n and not seen[i + 1]:
                ja[i] = True  # opt_hard_wire_dead_code_branches: always taken
            elif not seen[t]:
                nop[i] = True  # never taken: ja 0
    if env.privileged:
        live = [i for i in range(n) if seen[i] and not nop[i]]
    else:
        live = list(range(n))
    kept: list[int] = []
    for k, i in enumerate(live):
        # opt_remove_nops, in order: a goto to the next live insn is ja 0 (removing it
        # shortens no goto before it, whose target lies after)
        if env.privileged and ja[i] and k + 1 < len(live) and targets.get(i) == live[k + 1]:
            continue
        kept.append(i)
    lay = Layout(kept)
    for i in kept:
        x = insns[i]
        if x.is_load or x.is_store:
            if env.ptr_type_at.get(i) == D.CTX and not x.is_atomic:
                size = _ctx_size(env.prog_type, x)
                if size > 1:
                    lay.ctx.append(Patch(i, size, "ctx", "context field access"))
        elif (x.is_alu or x.is_alu64) and x.op in (BPF_DIV, BPF_MOD) and x.source == BPF_X:
            name = "division" if x.op == BPF_DIV else "modulo"
            lay.misc.append(Patch(i, _div_size(x), "misc", f"{name} by a register"))
        elif x.is_helper_call:
            p = _call_patch(env, i, x.imm)
            if p is not None:
                lay.misc.append(p)
    sizes = {p.idx: p.size for p in lay.ctx}
    for p in lay.misc:
        sizes[p.idx] = sizes.get(p.idx, 1) + p.size - 1
    lay.length = sum(sizes.get(i, insns[i].width) for i in kept)
    live_set = set(kept)
    return lay, {i: t for i, t in targets.items() if i in live_set}


def _call_patch(env: Env, i: int, helper_id: int) -> Patch | None:
    if helper_id == _LOOKUP:
        m = env.call_maps.get(i)
        if m is None or isinstance(m, str):  # not walked, or two maps: a plain call
            return None
        mt = getattr(m, "map_type", -1)
        size = GEN_LOOKUP_SIZES.get(mt, 1)
        if size == 1 or getattr(m, "map_flags", 0) & BPF_F_INNER_MAP:
            return None
        return Patch(i, size, "misc", f"{MapType(mt).name.lower()} lookup inlined")
    if helper_id == _TAIL_CALL and not env.privileged:
        return Patch(i, 3, "misc", "bpf_tail_call index mask")
    if helper_id == _SMP_ID:
        return Patch(i, 3, "misc", "bpf_get_smp_processor_id inlined")
    if helper_id == _JIFFIES:
        return Patch(i, 3, "misc", "bpf_jiffies64 inlined")
    return None


def patched_length(
    env: Env, insns: Sequence[Insn], slots: Sequence[int], visits: Sequence[int]
) -> int:
    """Insns (slots) of the program as the kernel rewrites it: its xlated_prog_len / 8."""
    return layout(env, insns, slots, visits)[0].length


def patch_range_fault(
    env: Env, insns: Sequence[Insn], slots: Sequence[int], visits: Sequence[int]
) -> tuple[int, Fault] | None:
    """The first patch, in the kernel's order, that leaves a jump's offset out of its
    16-bit range (list index of the patched insn, and the kernel's refusal), or None."""
    lay, targets = layout(env, insns, slots, visits)
    return range_fault(lay, targets, insns, slots)


def range_fault(
    lay: Layout, targets: dict[int, int], insns: Sequence[Insn], slots: Sequence[int]
) -> tuple[int, Fault] | None:
    """:func:`patch_range_fault` of a :func:`layout` already made."""
    if lay.length <= S16_MAX:
        return None  # bpf_patch_insn_single probes only above S16_MAX insns
    pos = {i: k for k, i in enumerate(lay.kept)}  # position after dead code / nops
    nk = len(lay.kept)
    at = [0] * (nk + 1)  # slot of each kept insn after dead code / nops (ld_imm64: 2)
    for k, i in enumerate(lay.kept):
        at[k + 1] = at[k] + insns[i].width
    phases: list[tuple[list[int], list[Patch]]] = []
    for patches in (lay.ctx, lay.misc):
        delta = [0] * nk
        for p in patches:
            delta[pos[p.idx]] += p.size - 1
        cum = [0] * (nk + 1)
        for k in range(nk):
            cum[k + 1] = cum[k] + delta[k]
        phases.append((cum, patches))
    best: tuple[int, int, int, int] | None = None  # (phase, position, jump, target)
    for a, t in targets.items():
        x = insns[a]
        if x.cls == BPF_JMP32 and x.op == BPF_JA:
            continue  # gotol: s32 imm
        # a jump to a removed nop lands on the next insn kept (bpf_remove_insns)
        ka, kt = pos[a], bisect_left(lay.kept, t)
        if kt > ka:
            lo, hi, room = ka + 1, kt, S16_MAX - (at[kt] - at[ka] - 1)
        else:
            lo, hi, room = kt, ka, -S16_MIN - (at[ka] - at[kt] + 1)
        for ph, (cum, _) in enumerate(phases):
            grow = cum[hi] - cum[lo]
            if grow > room:
                j = bisect_right(cum, cum[lo] + room, lo + 1, hi + 1)
                hit = (ph, j - 1, a, t)
                if best is None or hit[:2] < best[:2]:
                    best = hit
                break
            room -= grow
    if best is None:
        return None
    ph, k, a, t = best
    i = lay.kept[k]
    patches = lay.ctx if ph == 0 else lay.misc
    kinds: dict[str, int] = {}
    for p in (*lay.ctx, *lay.misc):
        kinds[p.what] = kinds.get(p.what, 0) + 1
    made = ", ".join(f"{c} x {w}" for w, c in sorted(kinds.items(), key=lambda kv: -kv[1]))
    what = next((p.what for p in patches if p.idx == i), "rewrite")
    jump = "the goto" if insns[a].op == BPF_JA else "the jump"
    return i, Fault(
        PATCH_RANGE,
        f"insn {slots[i]} cannot be patched due to 16-bit range",
        f"after verification the kernel rewrites instructions ({made}): the program grows "
        f"to {lay.length:,} insns, and the {what} here moves {jump} to insn {slots[t]} "
        f"at insn {slots[a]} past the 16-bit offset a BPF jump has (the load fails "
        "with ENOMEM). Compile with --mcpu v4 (LLVM then writes long jumps as gotol, "
        "whose offset is 32-bit), or split the program (tail calls) or do fewer inlined "
        "map lookups between the jump and its target",
        at=(slots[a],),
    )
