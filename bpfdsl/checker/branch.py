"""Conditional jumps: branch decisions and what each branch learns (kernel check_cond_jmp_op).

``do_cond_jump`` returns the fall-through and/or taken successor states.  Scalars are
narrowed as in ``reg_set_min_max`` (``is_branch_taken`` decides known outcomes), NULL
checks follow ``mark_ptr_or_null_regs`` (all copies with the same id), packet range
checks ``try_match_pkt_pointers``/``find_good_pkt_pointers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.limits import MAX_PACKET_OFF
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_JEQ,
    BPF_JGE,
    BPF_JGT,
    BPF_JLE,
    BPF_JLT,
    BPF_JMP32,
    BPF_JNE,
    BPF_JSET,
    BPF_JSGE,
    BPF_JSGT,
    BPF_JSLE,
    BPF_JSLT,
    BPF_K,
    BPF_X,
)
from bpfdsl.checker import alu as ALU
from bpfdsl.checker import domain as D
from bpfdsl.checker import features as F
from bpfdsl.checker import tnum as T
from bpfdsl.checker.calls import nonnull_map, nonnull_type
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.refs import nonnull_id
from bpfdsl.checker.state import AT_PKT_END, BEYOND_PKT_END, Slot, State
from bpfdsl.checker.transfer import read_reg, reserved_fields

# ---- jumps ----

# kernel reg_not_null: pointer types never NULL, so `if rX == 0` of one is decided (map
# values, sockets, a map; PTR_TO_MEM: a ring buffer reservation after its NULL check, a
# global function's pointer argument after its check)
NOT_NULL: Final = (D.MAP_VALUE, D.SOCKET, D.SOCK_COMMON, D.MAP_PTR, D.RINGBUF_MEM, D.MEM)

_NEG: Final[dict[int, int]] = {
    BPF_JEQ: BPF_JNE,
    BPF_JNE: BPF_JEQ,
    BPF_JGT: BPF_JLE,
    BPF_JLE: BPF_JGT,
    BPF_JGE: BPF_JLT,
    BPF_JLT: BPF_JGE,
    BPF_JSGT: BPF_JSLE,
    BPF_JSLE: BPF_JSGT,
    BPF_JSGE: BPF_JSLT,
    BPF_JSLT: BPF_JSGE,
}
_SWAP: Final[dict[int, int]] = {
    BPF_JEQ: BPF_JEQ,
    BPF_JNE: BPF_JNE,
    BPF_JGT: BPF_JLT,
    BPF_JLT: BPF_JGT,
    BPF_JGE: BPF_JLE,
    BPF_JLE: BPF_JGE,
    BPF_JSGT: BPF_JSLT,
    BPF_JSLT: BPF_JSGT,
    BPF_JSGE: BPF_JSLE,
    BPF_JSLE: BPF_JSGE,
    BPF_JSET: BPF_JSET,
}


def _view(r: D.Reg, is32: bool) -> tuple[tuple[int, int], int, int, int, int]:
    if is32:
        return T.subreg(r.tn), r.s32min, r.s32max, r.u32min, r.u32max
    return r.tn, r.smin, r.smax, r.umin, r.umax


def branch_taken(a: D.Reg, b: D.Reg, op: int, is32: bool) -> int:
    """1 always taken, 0 never, -1 unknown (kernel is_branch_taken) for two scalars."""
    at, asmin, asmax, aumin, aumax = _view(a, is32)
    bt, bsmin, bsmax, bumin, bumax = _view(b, is32)
    if op == BPF_JEQ or op == BPF_JNE:
        eq = -1
        if at[1] == 0 and bt[1] == 0:
            eq = int(at[0] == bt[0])
        elif aumin > bumax or aumax < bumin or asmin > bsmax or asmax < bsmin:
            eq = 0
        elif (at[0] ^ bt[0]) & ~(at[1] | bt[1]):
            eq = 0
        elif not is32 and (
            a.u32min > b.u32max or a.u32max < b.u32min or a.s32min > b.s32max or a.s32max < b.s32min
        ):
            eq = 0  # a 64-bit (in)equality the 32-bit ranges decide (as the kernel)
        if eq == -1:
            return -1
        return eq if op == BPF_JEQ else 1 - eq
    if op == BPF_JSET:
        if bt[1] == 0:
            if at[0] & bt[0]:
                return 1
            if not ((at[0] | at[1]) & bt[0]):
                return 0
        return -1
    if op == BPF_JGT:
        return 1 if aumin > bumax else 0 if aumax <= bumin else -1
    if op == BPF_JGE:
        return 1 if aumin >= bumax else 0 if aumax < bumin else -1
    if op == BPF_JLT:
        return 1 if aumax < bumin else 0 if aumin >= bumax else -1
    if op == BPF_JLE:
        return 1 if aumax <= bumin else 0 if aumin > bumax else -1
    if op == BPF_JSGT:
        return 1 if asmin > bsmax else 0 if asmax <= bsmin else -1
    if op == BPF_JSGE:
        return 1 if asmin >= bsmax else 0 if asmax < bsmin else -1
    if op == BPF_JSLT:
        return 1 if asmax < bsmin else 0 if asmin >= bsmax else -1
    if op == BPF_JSLE:
        return 1 if asmax <= bsmin else 0 if asmin > bsmax else -1
    return -1


def refine(a: D.Reg, b: D.Reg, op: int, is32: bool) -> tuple[D.Reg, D.Reg]:
    """Narrow scalars ``a`` and ``b`` assuming ``a op b`` holds (kernel regs_refine_cond_op)."""
    # A/B: [smin, smax, umin, umax] of the compared width
    if is32:
        A = [a.s32min, a.s32max, a.u32min, a.u32max]
        B = [b.s32min, b.s32max, b.u32min, b.u32max]
    else:
        A = [a.smin, a.smax, a.umin, a.umax]
        B = [b.smin, b.smax, b.umin, b.umax]
    ta, tb = a.tn, b.tn
    if op == BPF_JEQ:
        A[0] = B[0] = max(A[0], B[0])
        A[2] = B[2] = max(A[2], B[2])
        A[1] = B[1] = min(A[1], B[1])
        A[3] = B[3] = min(A[3], B[3])
        if is32:
            t = T.intersect(T.subreg(ta), T.subreg(tb))
            ta, tb = T.with_subreg(ta, t), T.with_subreg(tb, t)
        else:
            ta = tb = T.intersect(ta, tb)
    elif op == BPF_JNE:
        for x, y in ((A, b), (B, a)):
            if (y.tn[1] & D.M32 if is32 else y.tn[1]) == 0:
                c = (y.tn[0] & D.M32) if is32 else y.tn[0]
                sc = D.s32(c) if is32 else D.s64(c)
                if x[2] == c:
                    x[2] += 1
                elif x[3] == c:
                    x[3] -= 1
                if x[0] == sc:
                    x[0] += 1
                elif x[1] == sc:
                    x[1] -= 1
    elif op == BPF_JSET:
        if (T.subreg(b.tn) if is32 else b.tn)[1] == 0:
            c = b.tn[0] & (D.M32 if is32 else D.M64)
            if c and c & (c - 1) == 0:
                ta = T.or_(ta, (c, 0))
    elif op == BPF_JGT or op == BPF_JGE:
        d = 1 if op == BPF_JGT else 0
        A[2] = max(A[2], B[2] + d)
        B[3] = min(B[3], A[3] - d)
    elif op == BPF_JLT or op == BPF_JLE:
        d = 1 if op == BPF_JLT else 0
        A[3] = min(A[3], B[3] - d)
        B[2] = max(B[2], A[2] + d)
    elif op == BPF_JSGT or op == BPF_JSGE:
        d = 1 if op == BPF_JSGT else 0
        A[0] = max(A[0], B[0] + d)
        B[1] = min(B[1], A[1] - d)
    elif op == BPF_JSLT or op == BPF_JSLE:
        d = 1 if op == BPF_JSLT else 0
        A[1] = min(A[1], B[1] - d)
        B[0] = max(B[0], A[0] + d)
    na = D.resync(a, ta, _merge(a, A, is32)) if a.t == D.SCALAR else a
    nb = D.resync(b, tb, _merge(b, B, is32)) if b.t == D.SCALAR else b
    return na, nb


_REFINED: Final[dict[tuple, tuple | None]] = {}


def refine_possible(a: D.Reg, b: D.Reg, op: int, is32: bool) -> tuple[D.Reg, D.Reg] | None:
    """:func:`refine` for two scalars, None when the result is impossible (a bottom
    register: the branch is never taken).  Memoized on the operands' tnums and bounds;
    the results keep ``a``'s and ``b``'s other fields (id, note)."""
    key = (
        op,
        is32,
        a.tn,
        a.smin,
        a.smax,
        a.umin,
        a.umax,
        a.s32min,
        a.s32max,
        a.u32min,
        a.u32max,
        b.tn,
        b.smin,
        b.smax,
        b.umin,
        b.umax,
        b.s32min,
        b.s32max,
        b.u32min,
        b.u32max,
    )
    hit = _REFINED.get(key, _MISSING)
    if hit is _MISSING:
        na, nb = refine(a, b, op, is32)
        if D.is_bottom(na) or D.is_bottom(nb):
            hit = None
        else:
            hit = (na.tn, na.bounds(), nb.tn, nb.bounds())
        if len(_REFINED) >= 8192:
            _REFINED.clear()
        _REFINED[key] = hit
        return None if hit is None else (na, nb)
    if hit is None:
        return None
    assert isinstance(hit, tuple)  # not _MISSING: handled above
    return D.rebound(a, hit[0], hit[1]), D.rebound(b, hit[2], hit[3])


_MISSING: Final = object()


def scalar_outcome(
    d: D.Reg, s: D.Reg, op: int, is32: bool
) -> tuple[int, tuple | None, tuple | None]:
    """What :func:`scalar_jump` decides for scalars ``d`` and ``s`` and a comparison other
    than JSET, as a pure function of their tnums and bounds: (branch_taken, then when it
    is -1 the fall-through's and the taken branch's refined ``d`` as (tnum, bounds), None
    for a branch no value can take)."""
    bt = branch_taken(d, s, op, is32)
    if bt >= 0:
        return bt, None, None
    fall = refine_possible(d, s, _NEG[op], is32)
    taken = refine_possible(d, s, op, is32)
    return (
        -1,
        None if fall is None else (fall[0].tn, fall[0].bounds()),
        None if taken is None else (taken[0].tn, taken[0].bounds()),
    )


def _merge(r: D.Reg, part: list[int], is32: bool) -> tuple[int, ...]:
    """r's eight bounds with the compared width's four replaced by ``part``."""
    if is32:
        return (r.smin, r.smax, r.umin, r.umax, *part)
    return (*part, r.s32min, r.s32max, r.u32min, r.u32max)


def _mark_ids(st: State, reg_id: int, fn: Callable[[D.Reg], D.Reg]) -> None:
    st.update_regs(lambda r: fn(r) if r.id == reg_id and r.t != D.SCALAR else None)


def _synced(known: D.Reg, r: D.Reg) -> D.Reg | None:
    """What scalar ``r``, linked to ``known`` (the same base id), becomes once ``known`` is
    refined; None when it stays (kernel sync_linked_regs: a link of a 32-bit delta with a
    64-bit one does not hold).  Without deltas, or with the same delta, ``r`` becomes
    ``known`` itself; else ``known + (r.off - known.off)``, zero-extended when either went
    through a 32-bit add (BPF_ADD_CONST32), keeping ``r``'s id and delta."""
    kid, rid = known.id, r.id
    if (kid ^ rid) & D.ADD_CONST == D.ADD_CONST:
        return None
    if not (kid | rid) & D.ADD_CONST or r.off == known.off:
        return known
    delta = D.known(r.off - known.off)
    if (kid | rid) & D.ADD_CONST32:
        # 64-bit add then zext_32_to_64: the 32-bit add, zero-extended
        out = ALU.scalar_alu(BPF_ADD, known, delta, False)
    else:
        out = ALU.scalar_alu(BPF_ADD, known, delta, True)
    return out.replace(id=rid, off=r.off)


def _mark_scalar_ids(st: State, reg: D.Reg, at: tuple[int, int], linked: list) -> None:
    """The registers and slots of ``linked`` (collect_linked's locations) holding copies of
    scalar ``reg`` (same base id; ``reg`` itself at ``at`` = (frame, regno)) learn its
    refined bounds, shifted by their deltas (kernel sync_linked_regs)."""
    rid = reg.id
    if not rid or reg.t != D.SCALAR:
        return
    base = rid & ~D.ADD_CONST
    frames = st.frames
    for loc in linked:
        if loc == at:
            continue
        f = frames[loc[0]]
        k = loc[1]
        if k >= 0:
            r = f.regs[k]
            if r.t == D.SCALAR and r.id & ~D.ADD_CONST == base:
                n = _synced(reg, r)
                if n is not None:
                    f.regs[k] = n
        else:
            sl = f.stack.get(-1 - k)
            sp = sl.spill if sl is not None else None
            if sp is not None and sp.t == D.SCALAR and sp.id & ~D.ADD_CONST == base:
                n = _synced(reg, sp)
                if n is not None and n is not sp:
                    f.stack[-1 - k] = Slot(sl.types, n)


MAX_LINKED_REGS: Final = 6  # kernel include/linux/bpf_verifier.h


def collect_linked(env: Env, st: State, i: int, ids: tuple[int, int]) -> list[tuple[int, int]]:
    """kernel collect_linked_regs for a conditional jump at insn ``i``: for each of ``ids``
    (the source's, then the destination's; 0: none), the scalars of that base id (the id
    without the BPF_ADD_CONST flags) in every frame, newest first -- the registers live
    there (before ``i``, a caller's before its call; Linux 6.18 stable: dead registers are
    not linked) in order, then the spilled slots -- as (frame, regno) / (frame, -1 - slot).
    At most MAX_LINKED_REGS; the ones past that lose their id, in ``st``."""
    out: list[tuple[int, int]] = []
    frames = st.frames
    cur = len(frames) - 1
    live_in = env.live_in
    for rid in ids:
        if not rid:
            continue
        base = rid & ~D.ADD_CONST
        for fr in range(cur, -1, -1):
            f = frames[fr]
            live = live_in[i if fr == cur else frames[fr + 1].callsite] if live_in else 0x3FF
            regs = f.regs
            for r in range(10):
                v = regs[r]
                if live >> r & 1 and v.t == D.SCALAR and v.id and v.id & ~D.ADD_CONST == base:
                    if len(out) < MAX_LINKED_REGS:
                        out.append((fr, r))
                    else:
                        regs[r] = v.replace(id=0)
            stack = f.stack
            for k in sorted(stack):
                sl = stack[k]
                sp = sl.spill
                if sp is not None and sp.t == D.SCALAR and sp.id and sp.id & ~D.ADD_CONST == base:
                    if len(out) < MAX_LINKED_REGS:
                        out.append((fr, -1 - k))
                    else:
                        stack[k] = Slot(sl.types, sp.replace(id=0))
    return out


def _pkt_end_taken(d: D.Reg, s: D.Reg, op: int) -> int:
    """kernel is_pkt_ptr_branch_taken: a packet pointer known to be at or beyond
    data_end (range AT/BEYOND_PKT_END) decides a later comparison with data_end."""
    if s.t == D.PKT_END:
        pkt = d
    elif d.t == D.PKT_END:
        pkt, op = s, _SWAP[op]
    else:
        return -1
    if pkt.t != D.PKT or pkt.rng >= 0:
        return -1
    if op in (BPF_JLE, BPF_JGT) and pkt.rng == BEYOND_PKT_END:
        return int(op == BPF_JGT)
    if op in (BPF_JLT, BPF_JGE):
        return int(op == BPF_JGE)
    return -1


def _mark_pkt_end(st: State, regno: int, beyond: bool) -> None:
    """kernel mark_pkt_end: the branch where packet pointer ``regno`` is past data_end
    (``beyond``) or at least at it."""
    r = st.regs[regno]
    if r.t == D.PKT:
        st.regs[regno] = r.replace(rng=BEYOND_PKT_END if beyond else AT_PKT_END)


def _good_pkt(st: State, dst: D.Reg, right_open: bool) -> None:
    if dst.off < 0 or (dst.off == 0 and right_open):
        return
    if dst.umax > MAX_PACKET_OFF or dst.umax + dst.off > MAX_PACKET_OFF:
        return
    new = dst.off + (1 if right_open else 0)
    t, rid = dst.t, dst.id
    st.update_regs(
        lambda r: r.replace(rng=new) if r.t == t and r.id == rid and r.rng < new else None
    )


def _init_pkt(r: D.Reg, t: int) -> bool:
    return r.t == t and r.off == 0 and r.tn == (0, 0)


def _pkt_compare(x: Insn, d: D.Reg, s: D.Reg, fall: State, taken: State) -> bool:
    """try_match_pkt_pointers; ``fall`` = condition false, ``taken`` = condition true."""
    if x.source != BPF_X or x.cls == BPF_JMP32:
        return False
    op = x.op
    d_lo = (d.t == D.PKT and s.t == D.PKT_END) or (d.t == D.PKT_META and _init_pkt(s, D.PKT))
    s_lo = (d.t == D.PKT_END and s.t == D.PKT) or (_init_pkt(d, D.PKT) and s.t == D.PKT_META)
    if not (d_lo or s_lo):
        return False
    # kernel try_match_pkt_pointers: the in-bounds side learns the range, the other
    # side's pointer is marked at/beyond data_end
    if op == BPF_JGT:
        if d_lo:
            _good_pkt(fall, d, False)
            _mark_pkt_end(taken, x.dst, True)
        else:
            _good_pkt(taken, s, True)
            _mark_pkt_end(fall, x.src, False)
    elif op == BPF_JLT:
        if d_lo:
            _good_pkt(taken, d, True)
            _mark_pkt_end(fall, x.dst, False)
        else:
            _good_pkt(fall, s, False)
            _mark_pkt_end(taken, x.src, True)
    elif op == BPF_JGE:
        if d_lo:
            _good_pkt(fall, d, True)
            _mark_pkt_end(taken, x.dst, False)
        else:
            _good_pkt(taken, s, False)
            _mark_pkt_end(fall, x.src, True)
    elif op == BPF_JLE:
        if d_lo:
            _good_pkt(taken, d, False)
            _mark_pkt_end(fall, x.dst, True)
        else:
            _good_pkt(fall, s, True)
            _mark_pkt_end(taken, x.src, False)
    else:
        return False
    return True


def do_cond_jump(
    env: Env, st: State, i: int, x: Insn, target: int
) -> list[tuple[int, State]] | None:
    """Successor states of a conditional jump; None = only the fall-through, same state."""
    op, is32 = x.op, x.cls == BPF_JMP32
    if is32:
        env.need(F.JMP32_MIN, "32-bit conditional jump (jmp32)")
    if op not in _SWAP:
        raise Fault("bad-opcode", f"invalid BPF_JMP/JMP32 opcode {op:x}", "unknown jump operation")
    if x.source == BPF_X:
        if x.imm:
            raise reserved_fields("BPF_JMP/JMP32")
        s = read_reg(st, x.src)
    else:
        if x.src:
            raise reserved_fields("BPF_JMP/JMP32")
        s = D.known(x.imm if not is32 else x.imm & D.M32)
    d = read_reg(st, x.dst)
    # pointer vs NULL
    d_ptr = d.t > D.SCALAR  # not NOT_INIT (0) nor SCALAR (1): Reg.is_ptr
    if d_ptr or s.t > D.SCALAR:
        pr, other, p_no = (d, s, x.dst) if d_ptr else (s, d, x.src)
        if other.t == D.SCALAR and other.is_const and other.value == 0 and op in (BPF_JEQ, BPF_JNE):
            # kernel: only `if rX ==/!= 0` (immediate, 64-bit, pointer in dst) is a NULL check
            if pr.t in D.NULLABLE and not is32 and x.source == BPF_K and d_ptr:
                null_st, nn_st = st, st.copy()
                if op == BPF_JNE:
                    taken, fall = nn_st, null_st
                else:
                    taken, fall = null_st, nn_st
                nt = nonnull_type(pr)
                _mark_ids(null_st, pr.id, lambda r: D.known(0))
                if pr.ref:  # NULL: nothing was acquired (kernel release_reference_state)
                    null_st.refs = tuple(x for x in null_st.refs if x != pr.ref)
                _mark_ids(
                    nn_st,
                    pr.id,
                    lambda r: r.replace(
                        t=nonnull_type(r) if r.t in D.NULLABLE else r.t,
                        id=nonnull_id(r, nt),
                        map=nonnull_map(r),
                    ),
                )
                return [(i + 1, fall), (target, taken)]
            if pr.t in NOT_NULL:
                # kernel reg_not_null: these pointers are never NULL (not fp/ctx/pkt)
                taken_now = op == BPF_JNE
                if x.source == BPF_X and s.t == D.SCALAR:
                    env.precise(x.src)  # the outcome rests on the scalar being 0
                return [(target, st)] if taken_now else [(i + 1, st)]
        known = _pkt_end_taken(d, s, op) if x.source == BPF_X and not is32 else -1
        if known >= 0:
            return [(target, st)] if known else [(i + 1, st)]
        taken = st.copy()
        if (
            x.source == BPF_X
            and not is32
            and op in (BPF_JEQ, BPF_JNE)
            and d_ptr
            and s.t > D.SCALAR
            and (d.t in D.NULLABLE) != (s.t in D.NULLABLE)
        ):
            # kernel: a maybe-NULL pointer equal to a pointer that is not NULL is not
            # NULL either (mark_ptr_not_null_reg, that register only)
            eq = taken if op == BPF_JEQ else st
            no = x.src if s.t in D.NULLABLE else x.dst
            r = eq.regs[no]
            eq.regs[no] = r.replace(t=nonnull_type(r), map=nonnull_map(r))
        if _pkt_compare(x, d, s, st, taken):
            return [(i + 1, st), (target, taken)]
        if not env.privileged:
            raise Fault("ptr-compare", f"R{p_no} pointer comparison prohibited", "", (p_no,))
        return [(i + 1, st), (target, taken)]
    return scalar_jump(env, st, i, x, target, d, s)


def scalar_jump(
    env: Env, st: State, i: int, x: Insn, target: int, d: D.Reg, s: D.Reg
) -> list[tuple[int, State]] | None:
    """do_cond_jump once the operands are known to be scalars (or NOT_INIT-free non-
    pointers): ``d`` the destination register's value, ``s`` the source register's or
    the immediate's (kernel is_branch_taken, then reg_set_min_max on each branch)."""
    op, is32 = x.op, x.cls == BPF_JMP32
    bt = branch_taken(d, s, op, is32)
    if bt >= 0:
        # the outcome rests on the operands' ranges (kernel: mark_chain_precision)
        env.precise(x.dst)
        if x.source == BPF_X:
            env.precise(x.src)
        return [(target, st)] if bt else None  # None: falls through, same state
    linked: list[tuple[int, int]] = []
    if (x.source == BPF_X and s.id) or d.id:
        linked = collect_linked(env, st, i, (s.id if x.source == BPF_X else 0, d.id))
        if len(linked) > 1:
            env.hist_linked = tuple(linked)
        # the registers collection unlinked (past MAX_LINKED_REGS) as they now are
        d = st.regs[x.dst]
        if x.source == BPF_X:
            s = st.regs[x.src]
    taken = st.copy()
    out = []
    for state, cond, nxt in ((st, _NEG.get(op), i + 1), (taken, op, target)):
        if cond is None:  # JSET false branch: bits of a const mask are clear
            nd = d
            if s.is_const:
                # kernel regs_refine_cond_op: forget the ranges, then clear the bits
                m = s.value & (D.M32 if is32 else D.M64)
                nd = D.resync(d, T.and_(d.tn, (~m & D.M64, 0)), D.UNKNOWN_BOUNDS)
            ns = s
            if D.is_bottom(nd) or D.is_bottom(ns):
                env.inexact += 1
                continue
        else:
            both = refine_possible(d, s, cond, is32)
            if both is None:
                # the operands' bounds and known bits leave no value for this branch; the
                # kernel, which only drops branches is_branch_taken decides, walks it
                env.inexact += 1
                continue
            nd, ns = both
        # kernel check_cond_jmp_op: both registers set, then the source's links synced,
        # then the destination's (the destination as the source's sync left it)
        cur = len(state.frames) - 1
        state.regs[x.dst] = nd
        if x.source == BPF_X:
            state.regs[x.src] = ns
            _mark_scalar_ids(state, ns, (cur, x.src), linked)
            nd = state.regs[x.dst]
        _mark_scalar_ids(state, nd, (cur, x.dst), linked)
        out.append((nxt, state))
    return out
