"""Transfer functions for ALU, loads, stores, atomics and ld_imm64 (kernel do_check's body).

Each ``do_*`` checks one instruction against the state (raising env.Fault, kernel
wording) and updates the state in place: ``check_alu_op``/``adjust_reg_min_max_vals``/
``adjust_ptr_min_max_vals`` for ALU, ``check_mem_access`` (mem.py, stack.py) for memory,
``check_atomic_rmw`` for atomics.  Conditional jumps live in branch.py.
"""

from __future__ import annotations

from typing import Final

from bpfdsl.abi.insn import ALU_OP_NAMES, Insn
from bpfdsl.abi.limits import BPF_MAX_VAR_OFF
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU64,
    BPF_AND,
    BPF_ARSH,
    BPF_ATOMIC,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_END,
    BPF_FETCH,
    BPF_LSH,
    BPF_MEM,
    BPF_MEMSX,
    BPF_MOD,
    BPF_MOV,
    BPF_NEG,
    BPF_OR,
    BPF_PSEUDO_FUNC,
    BPF_PSEUDO_MAP_FD,
    BPF_PSEUDO_MAP_VALUE,
    BPF_RSH,
    BPF_ST,
    BPF_SUB,
    BPF_TO_BE,
    BPF_X,
    BPF_XCHG,
    BPF_XOR,
)
from bpfdsl.checker import alu as ALU
from bpfdsl.checker import domain as D
from bpfdsl.checker import features as F
from bpfdsl.checker import tnum as T
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.mem import check_access
from bpfdsl.checker.refs import same_insn_pointer
from bpfdsl.checker.state import State

_VALID_ALU: Final = set(range(0x00, 0xD1, 0x10))
_DIV_MOD: Final = frozenset((BPF_DIV, BPF_MOD))
_SHIFTS: Final = frozenset((BPF_LSH, BPF_RSH, BPF_ARSH))


def read_reg(st: State, regno: int) -> D.Reg:
    if regno > 10:
        raise Fault("bad-reg", f"R{regno} is invalid", "register numbers go from r0 to r10")
    r = st.frames[-1].regs[regno]
    if r.t == D.NOT_INIT:
        raise Fault(
            "uninit-reg", f"R{regno} !read_ok", f"r{regno} is read before being set", (regno,)
        )
    return r


def _dst(regno: int) -> None:
    if regno > 10:
        raise Fault("bad-reg", f"R{regno} is invalid", "register numbers go from r0 to r10")
    if regno == 10:
        raise Fault("fp-readonly", "frame pointer is read only", "r10 cannot be written")


def reserved_fields(what: str) -> Fault:
    return Fault(
        "reserved-fields",
        f"{what} uses reserved fields",
        "the instruction has fields set that must be zero (bad encoding)",
    )


# ---- ALU ----


def do_alu(env: Env, st: State, x: Insn) -> None:
    op, is64, src_x = x.op, x.cls == BPF_ALU64, x.source == BPF_X
    regs = st.frames[-1].regs
    if op == BPF_NEG or op == BPF_END:
        if op == BPF_NEG:
            if src_x or x.src or x.off or x.imm:
                raise reserved_fields("BPF_NEG")
        elif x.src or x.off or x.imm not in (16, 32, 64) or (is64 and src_x):
            raise reserved_fields("BPF_END")
        r = read_reg(st, x.dst)
        _dst(x.dst)
        if op == BPF_END and is64:
            env.need(F.CPU_V4_MIN, "unconditional byte swap (bswap)")
        if r.is_ptr:
            _ptr_leak_warn(env, x.dst, r, "byte swap" if op == BPF_END else "negation")
            regs[x.dst] = D.unknown()
            return
        if op == BPF_NEG:
            regs[x.dst] = ALU.neg(r, is64)
        else:
            regs[x.dst] = ALU.swap(r, x.imm, x.source == BPF_TO_BE, is64)
        return
    if op == BPF_MOV:
        if src_x:
            allowed = (0, 8, 16, 32) if is64 else (0, 8, 16)
            if x.off not in allowed or x.imm:
                raise reserved_fields("BPF_MOV")
            s = read_reg(st, x.src)
            _dst(x.dst)
            if x.off:
                env.need(F.CPU_V4_MIN, "sign-extending move (movsx)")
            if is64:
                if x.off == 0:
                    # copies share an id so a later bounds check refines both
                    regs[x.dst] = id_before_mov(env, regs, x.src, s)
                elif s.is_ptr:
                    regs[x.dst] = D.unknown()
                else:
                    regs[x.dst] = _movsx_linked(env, regs, x, s, True)
            else:
                if s.is_ptr:
                    _ptr_leak_warn(env, x.src, s, "32-bit move")
                    if not env.privileged:
                        raise Fault(
                            "ptr-leak",
                            f"R{x.src} partial copy of pointer",
                            "pointers are 64-bit; do not copy them with 32-bit moves",
                            (x.src,),
                        )
                    regs[x.dst] = D.zext32(D.unknown())
                elif x.off:
                    regs[x.dst] = _movsx_linked(env, regs, x, s, False)
                elif s.t == D.SCALAR and s.umax <= D.M32:
                    # kernel: a value that fits in 32 bits is copied whole, linked to its
                    # source (assign_scalar_id_before_mov), across calls too
                    regs[x.dst] = id_before_mov(env, regs, x.src, s)
                else:
                    regs[x.dst] = D.zext32(s)
        else:
            if x.src or x.off:
                raise reserved_fields("BPF_MOV")
            _dst(x.dst)
            regs[x.dst] = D.known(x.imm if is64 else x.imm & D.M32)
        return
    if op not in _VALID_ALU:
        raise Fault("bad-opcode", f"invalid BPF_ALU opcode {op:x}", "unknown ALU operation")
    if src_x:
        if x.imm or x.off not in (0, 1) or (x.off == 1 and op not in (BPF_DIV, BPF_MOD)):
            raise reserved_fields("BPF_ALU")
        s = read_reg(st, x.src)
    else:
        if x.src or x.off not in (0, 1) or (x.off == 1 and op not in (BPF_DIV, BPF_MOD)):
            raise reserved_fields("BPF_ALU")
        s = D.known(x.imm if is64 else x.imm & D.M32)
    d = read_reg(st, x.dst)
    if x.off == 1:
        env.need(F.CPU_V4_MIN, "signed division (sdiv/smod)")
    if op in _DIV_MOD and not src_x and x.imm == 0:
        raise Fault(
            "div-by-zero",
            "div by zero",
            "division by the constant 0; note that the kernel defines x / 0 == 0 and "
            "x % 0 == x at run time for a register divisor",
        )
    if op in _SHIFTS and not src_x:
        if x.imm < 0 or x.imm >= (64 if is64 else 32):
            raise Fault("bad-shift", f"invalid shift {x.imm}", "shift counts must be 0..width-1")
    _dst(x.dst)
    s_ptr, d_ptr = s.t > D.SCALAR, d.t > D.SCALAR  # Reg.is_ptr
    if src_x and s_ptr and d_ptr:
        if op == BPF_SUB and env.privileged:
            if not is64:
                _ptr_leak_warn(env, x.dst, d, "32-bit subtraction")
            regs[x.dst] = D.unknown() if is64 else D.zext32(D.unknown())
            return
        raise Fault(
            "ptr-ptr",
            f"R{x.dst} pointer {ALU_OP_NAMES[op]} pointer prohibited",
            "only pointer - pointer (giving a length) is allowed between two pointers",
            (x.dst, x.src),
        )
    if d_ptr or (src_x and s_ptr):
        if src_x:
            # the scalar's range becomes the pointer's offset (kernel
            # adjust_reg_min_max_vals: mark_chain_precision of the scalar operand)
            env.precise(x.src if d_ptr else x.dst)
        ptr_reg, ptr_no = (d, x.dst) if d_ptr else (s, x.src)
        off_reg = s if d_ptr else d
        regs[x.dst] = _ptr_alu(env, x, op, is64, ptr_reg, ptr_no, off_reg, d_ptr)
        return
    r = ALU.scalar_alu(op, d, s, is64, signed_div=bool(x.off))
    if (op == BPF_ADD or op == BPF_SUB) and d.id and env.privileged:
        r = link_delta(x, is64, d, s, r)
    regs[x.dst] = r


def id_before_mov(env: Env, regs: list[D.Reg], regno: int, s: D.Reg) -> D.Reg:
    """kernel assign_scalar_id_before_mov, for a copy of ``s`` (register ``regno``) about to
    be made: a scalar already ``base + delta`` (BPF_ADD_CONST) loses that link (one delta per
    register); a non-constant scalar without an id gets a new one, so the copy and the
    source share it.  Returns the source's value, also stored in ``regs[regno]``."""
    if s.t != D.SCALAR:
        return s
    r = s
    if r.id & D.ADD_CONST:
        r = r.replace(id=0, off=0)
    if not r.id and r.tn[1]:
        r = r.replace(id=env.new_id())
    if r is not s:
        regs[regno] = r
    return r


def link_delta(x: Insn, is64: bool, d: D.Reg, s: D.Reg, r: D.Reg) -> D.Reg:
    """``r``, the result of ``dst += s`` / ``dst -= s`` on ``d`` (a scalar with an id, a
    bpf_capable loader), linked to ``d``'s copies with the delta when the kernel keeps the
    link: Linux 6.18 adjust_reg_min_max_vals with the 2026 stable backports (negative
    offsets, BPF_SUB and alu32: BPF_ADD_CONST64 for a 64-bit constant of S32_MIN..S32_MAX,
    BPF_ADD_CONST32 for a 32-bit constant when ``d``'s value fits in 32 bits; not for
    ``rX += rX``, not twice).  Otherwise ``r`` as it is (no id)."""
    if x.source == BPF_X and x.src == x.dst:
        return r
    if is64:
        if s.tn[1]:
            return r
        off = D.s64(s.tn[0])
        if off < D.S32_MIN or off > D.S32_MAX:
            return r
        flag = D.ADD_CONST64
    else:
        if s.tn[1] & D.M32 or d.umax > D.M32:
            return r
        off = D.s32(s.tn[0])
        flag = D.ADD_CONST32
    if x.op == BPF_SUB:
        if off == D.S32_MIN:
            return r
        off = -off
    if d.id & D.ADD_CONST:
        return r
    return r.replace(id=d.id | flag, off=off)


def _movsx_linked(env: Env, regs: list[D.Reg], x: Insn, s: D.Reg, is64: bool) -> D.Reg:
    """``dst = (sN) src``: ALU.movsx's value; when src's sign bit cannot be set (its umax
    below 2**(N-1)) the copy stays linked to src (the kernel's no_sext:
    assign_scalar_id_before_mov, then the copy keeps the id)."""
    r = ALU.movsx(s, x.off, is64)
    if s.t != D.SCALAR or s.umax >= 1 << (x.off - 1):
        return r
    s = id_before_mov(env, regs, x.src, s)
    if not s.id:
        return r
    return D.rebound(s, r.tn, r.bounds())


def fork_scalars(st: State, x: Insn) -> State | None:
    """The kernel's maybe_fork_scalars (6.18 and the stable kernels since 2026-01): an
    AND or OR of a constant into a scalar that is either 0 or -1 (``s>> 63`` /
    ``s>> 31`` as LLVM emits for ``c ? m : 0``) walks the two values apart.  ``st``'s
    destination becomes -1 (all 64 bits, or the low 32 when only the 32-bit range is
    [-1, 0]); the returned copy has 0 there and runs the same instruction again (the
    kernel pushes it at this insn).  None when the instruction is not of that form."""
    if x.op != BPF_AND and x.op != BPF_OR:
        return None
    regs = st.frames[-1].regs
    d = regs[x.dst]
    if d.t != D.SCALAR:
        return None
    if x.source == BPF_X and (x.src > 10 or regs[x.src].t != D.SCALAR or regs[x.src].tn[1]):
        return None
    if d.smin == -1 and d.smax == 0:
        minus, zero = D.known(D.M64), D.known(0)
    elif d.s32min == -1 and d.s32max == 0:
        b = (d.smin, d.smax, d.umin, d.umax)
        # __mark_reg32_known: the low half known, the 64-bit bounds left as they are
        minus = D.rebound(d, T.with_subreg(d.tn, (D.M32, 0)), (*b, -1, -1, D.M32, D.M32))
        zero = D.rebound(d, T.with_subreg(d.tn, (0, 0)), (*b, 0, 0, 0, 0))
    else:
        return None
    other = st.copy()
    other.frames[-1].regs[x.dst] = zero
    regs[x.dst] = minus
    return other


def _ptr_leak_warn(env: Env, regno: int, r: D.Reg, what: str) -> None:
    env.warn(
        "ptr-alu32",
        f"{what} on pointer R{regno} ({D.TYPE_NAMES[r.t]}) turns it into an unknown number",
        "pointer arithmetic must be 64-bit; compute `end - start` in 64 bits and only "
        "truncate the resulting scalar (FIELD-BUGS B04)",
        (regno,),
    )


def _ptr_alu(
    env: Env, x: Insn, op: int, is64: bool, p: D.Reg, pno: int, o: D.Reg, ptr_is_dst: bool
) -> D.Reg:
    name = D.TYPE_NAMES[p.t]
    if not is64:
        if op == BPF_SUB and env.privileged:
            _ptr_leak_warn(env, pno, p, "32-bit subtraction")
            return D.zext32(D.unknown())
        raise Fault(
            "ptr-alu32",
            f"R{x.dst} 32-bit pointer arithmetic prohibited",
            "pointer arithmetic must use 64-bit instructions (FIELD-BUGS B04)",
            (x.dst,),
        )
    if p.t in D.NULLABLE:
        raise Fault(
            "ptr-null-arith",
            f"R{x.dst} pointer arithmetic on {name} prohibited, null-check it first",
            "compare the lookup result with 0 before computing addresses from it",
            (x.dst,),
        )
    known = o.is_const
    if p.t == D.MAP_PTR and known and o.value == 0 and op == BPF_ADD:
        return p
    if p.t not in (D.CTX, D.MAP_VALUE, D.STACK, D.PKT, D.PKT_META, D.RINGBUF_MEM, D.MEM):
        raise Fault(
            "ptr-arith",
            f"R{x.dst} pointer arithmetic on {name} prohibited",
            "data_end may only be compared with; write `pkt + N > data_end`, never "
            "arithmetic on data_end (FIELD-BUGS B06)"
            if p.t == D.PKT_END
            else f"addresses cannot be computed from a {name}",
            (x.dst,),
        )
    if op == BPF_SUB and not ptr_is_dst:
        raise Fault(
            "ptr-arith",
            f"R{x.dst} tried to subtract pointer from scalar",
            "subtract the number from the pointer, not the other way round",
            (x.dst,),
        )
    if op == BPF_SUB and p.t == D.STACK:
        raise Fault(
            "ptr-arith",
            f"R{x.dst} subtraction from stack pointer prohibited",
            "use `r += -N` to address the stack",
            (x.dst,),
        )
    if op in (BPF_AND, BPF_OR, BPF_XOR):
        raise Fault(
            "ptr-arith",
            f"R{x.dst} bitwise operator {ALU_OP_NAMES[op]} on pointer prohibited",
            "bit operations on pointers are not allowed",
            (x.dst,),
        )
    if op not in (BPF_ADD, BPF_SUB):
        raise Fault(
            "ptr-arith",
            f"R{x.dst} pointer arithmetic with {ALU_OP_NAMES.get(op, '?')} operator prohibited",
            "only + and - with a number are allowed on pointers",
            (x.dst,),
        )
    _sane(o, name, x.dst)
    _sane(p, name, x.dst)
    if known:
        v = D.s64(o.value)
        new_off = p.off + v if op == BPF_ADD else p.off - v
        if -(1 << 31) <= new_off < (1 << 31):
            out = p.replace(off=new_off)
            _sane(out, name, x.dst)
            return out
    # variable offset
    if op == BPF_ADD:
        tn = T.add(p.tn, o.tn)
        smin, smax = p.smin + o.smin, p.smax + o.smax
        umin, umax = p.umin + o.umin, p.umax + o.umax
    else:
        tn = T.sub(p.tn, o.tn)
        smin, smax = p.smin - o.smax, p.smax - o.smin
        umin, umax = p.umin - o.umax, p.umax - o.umin
    if smin < D.S64_MIN or smax > D.S64_MAX:
        smin, smax = D.S64_MIN, D.S64_MAX
    if umin < 0 or umax > D.M64:
        umin, umax = 0, D.M64
    b = (smin, smax, umin, umax) + D.UNKNOWN_BOUNDS[4:]
    out = D.sync(D.Reg(D.SCALAR, tn=tn, b=b))
    out = out.replace(t=p.t, off=p.off, id=p.id, rng=p.rng, map=p.map, ref=p.ref)
    if p.t in D.PACKET_TYPES:
        out = out.replace(id=env.new_id(), rng=0)
    _sane(out, name, x.dst)
    return out


def _sane(r: D.Reg, name: str, dst: int) -> None:
    if r.tn[1] == 0 and r.t == D.SCALAR:
        v = D.s64(r.tn[0])
        if v >= BPF_MAX_VAR_OFF or v <= -BPF_MAX_VAR_OFF:
            raise Fault(
                "ptr-oob",
                f"math between {name} pointer and {v} is not allowed",
                "the offset is far outside any object",
                (dst,),
            )
        return
    if r.off >= BPF_MAX_VAR_OFF or r.off <= -BPF_MAX_VAR_OFF:
        raise Fault("ptr-oob", f"{name} pointer offset {r.off} is not allowed", "", (dst,))
    if r.smin == D.S64_MIN:
        raise Fault(
            "ptr-unbounded",
            f"math between {name} pointer and register with unbounded min value is not allowed",
            "bound the number (e.g. `x &= 0xff` or `if x > N goto`) before adding it to a pointer",
            (dst,),
        )
    if r.smin >= BPF_MAX_VAR_OFF or r.smin <= -BPF_MAX_VAR_OFF:
        raise Fault("ptr-oob", f"value {r.smin} makes {name} pointer be out of bounds", "", (dst,))


# ---- loads / stores ----


def do_ldx(env: Env, st: State, x: Insn) -> None:
    if x.mode not in (BPF_MEM, BPF_MEMSX) or x.imm:
        raise reserved_fields("BPF_LDX")
    read_reg(st, x.src)
    _dst(x.dst)
    if x.mode == BPF_MEMSX:
        env.need(F.CPU_V4_MIN, "sign-extending load (ldsx)")
    t = st.regs[x.src].t
    v = check_access(env, st, x.src, x.off, x.size, False, None, x.mode == BPF_MEMSX)
    same_insn_pointer(env, t)
    if x.mode == BPF_MEMSX and v is not None and v.t == D.SCALAR:
        v = ALU.movsx(v, x.size * 8, True)
    st.regs[x.dst] = v if v is not None else D.unknown()


def do_store(env: Env, st: State, x: Insn) -> None:
    if x.cls == BPF_ST:
        if x.mode != BPF_MEM or x.src:
            raise reserved_fields("BPF_ST")
        read_reg(st, x.dst)
        check_access(env, st, x.dst, x.off, x.size, True, D.known(x.imm))
        same_insn_pointer(env, st.regs[x.dst].t)
        env.stored_zero = False
        return
    if x.mode == BPF_ATOMIC:
        do_atomic(env, st, x)
        return
    if x.mode != BPF_MEM or x.imm:
        raise reserved_fields("BPF_STX")
    v = stored = read_reg(st, x.src)
    d = read_reg(st, x.dst)
    if (
        v.t == D.SCALAR
        and env.privileged
        and d.t == D.STACK
        and d.tn[1] == 0
        and (d.off + x.off + D.s64(d.tn[0])) % 8 == 0
    ):
        # kernel check_stack_write_fixed_off: a scalar spilled whole gets an id first
        # (assign_scalar_id_before_mov), so what a branch learns of the register, the
        # stack copy learns too; a spill narrower than the value breaks the link
        if v.umax.bit_length() > 8 * x.size:
            if v.id:
                stored = v.replace(id=0, off=0)
        else:
            v = stored = id_before_mov(env, st.regs, x.src, v)
    check_access(env, st, x.dst, x.off, x.size, True, stored)
    same_insn_pointer(env, d.t)
    if env.stored_zero:  # kernel check_stack_write_fixed_off: STACK_ZERO from a register
        env.stored_zero = False
        env.precise(x.src)


_ATOMIC_OPS: Final = {BPF_ADD, BPF_AND, BPF_OR, BPF_XOR}


def do_atomic(env: Env, st: State, x: Insn) -> None:
    base = x.imm & ~BPF_FETCH
    if not (base in _ATOMIC_OPS or x.imm in (BPF_XCHG, BPF_CMPXCHG)):
        raise Fault("bad-atomic", f"BPF_ATOMIC uses invalid atomic opcode {x.imm:02x}", "")
    if x.size not in (4, 8):
        raise Fault("bad-atomic", "invalid atomic operand size", "atomics are 32 or 64 bit")
    if x.imm != BPF_ADD:
        env.need(F.ATOMIC_FETCH_MIN, "atomic and/or/xor/fetch/xchg/cmpxchg")
    read_reg(st, x.src)
    d = read_reg(st, x.dst)
    if x.imm == BPF_CMPXCHG:
        read_reg(st, 0)
    if d.t in (D.CTX, D.PKT, D.PKT_META, D.SOCKET, D.SOCK_COMMON, D.XDP_SOCK):
        raise Fault(
            "atomic-target",
            f"BPF_ATOMIC stores into R{x.dst} {D.TYPE_NAMES[d.t]} is not allowed",
            "atomic operations work on the stack and map values only",
            (x.dst,),
        )
    # kernel check_atomic_rmw order: read check, old value into the load register (which
    # may be the base register itself), then the write check through dst
    check_access(env, st, x.dst, x.off, x.size, False, None)
    loaded = D.unknown() if x.size == 8 else D.urange(0, D.M32)
    if x.imm == BPF_CMPXCHG:
        st.regs[0] = loaded
    elif x.imm & BPF_FETCH:
        st.regs[x.src] = loaded
    check_access(env, st, x.dst, x.off, x.size, True, D.unknown())
    env.hist_slot, env.stored_zero = None, False  # not a spill or fill (kernel insn_flags 0)


def do_ld(env: Env, st: State, i: int, x: Insn) -> None:
    if x.is_ld_imm64:
        _dst(x.dst)
        if x.off:
            raise Fault("bad-ldimm64", "invalid bpf_ld_imm64 insn", "")
        ref = env.map_refs.get(i)
        if x.src == BPF_PSEUDO_FUNC:  # a callback's address (bpf_loop)
            if env.has_func_info is False:
                raise Fault(
                    "missing-func-info",
                    "missing btf func_info",
                    "a function address (a bpf_loop callback) needs BTF func info: build "
                    "the object with debug info (-g)",
                )
            st.regs[x.dst] = D.ptr(D.FUNC, off=env.func_refs[i])
            return
        if x.src == 0 and ref is None:
            st.regs[x.dst] = D.known(x.imm)
            return
        if x.src in (BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE) or ref is not None:
            if ref is None:
                raise Fault(
                    "bad-map",
                    f"fd {x.imm & 0xFFFFFFFF} is not pointing to valid bpf_map",
                    "the map reference has no relocation to a map of this object",
                )
            if ref.value_off is None:
                st.regs[x.dst] = D.ptr(D.MAP_PTR, map=ref.map)
            else:
                if ref.value_off >= ref.map.value_size and ref.map.value_size:
                    raise Fault(
                        "bad-map",
                        f"invalid access to map value pointer, value_size={ref.map.value_size} off={ref.value_off}",
                        "",
                    )
                st.regs[x.dst] = D.ptr(D.MAP_VALUE, off=ref.value_off, map=ref.map)
            return
        raise Fault(
            "bad-ldimm64", "invalid bpf_ld_imm64 insn", f"unsupported pseudo source {x.src}"
        )
    raise Fault(
        "ld-abs",
        "BPF_LD_[ABS|IND] instructions not allowed for this program type",
        "use direct packet access (data/data_end) instead",
    )
