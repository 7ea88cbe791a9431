"""Memory access rules: loads, stores and atomics through ctx, stack, packet and map pointers.

Kernel reference: kernel/bpf/verifier.c ``check_mem_access`` and its parts
(``check_stack_read/write_fixed_off``, ``check_packet_access``, ``check_map_access``,
``check_ctx_access``, ``check_ptr_alignment``).  Messages use the kernel's wording.
"""

from __future__ import annotations

from bpfdsl.abi.flags import BPF_F_RDONLY_PROG, BPF_F_WRONLY_PROG
from bpfdsl.abi.limits import BPF_MAX_VAR_OFF
from bpfdsl.abi.map_types import MapType, is_devmap
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import domain as D
from bpfdsl.checker import tnum as T
from bpfdsl.checker.ctx import CTX_TABLES, ctx_access
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.refs import lock_field_access, sock_access
from bpfdsl.checker.stack import stack_access
from bpfdsl.checker.state import State


def _tn(r: D.Reg) -> str:
    return T.fmt(r.tn)


def check_access(
    env: Env,
    st: State,
    regno: int,
    off: int,
    size: int,
    write: bool,
    value: D.Reg | None,
    ldsx: bool = False,
) -> D.Reg | None:
    """Check one access of ``size`` bytes at ``regno + off``; return the loaded value for
    reads.  ``value`` is the stored register (None for BPF_ST immediates = unknown);
    ``ldsx``: a sign-extending load (BPF_MEMSX), which no ctx pointer field takes."""
    r = st.regs[regno]
    t = r.t
    if t == D.STACK:
        return stack_access(env, st, regno, r, off, size, write, value)
    if t in D.PACKET_TYPES:
        return _packet(env, regno, r, off, size, write)
    if t == D.MAP_VALUE:
        return _map_value(env, regno, r, off, size, write)
    if t == D.RINGBUF_MEM:
        return ringbuf_mem(regno, r, off, size, write)
    if t == D.MEM:
        return _mem(regno, r, off, size)
    if t == D.CTX:
        return _ctx(env, regno, r, off, size, write, ldsx)
    if t == D.XDP_SOCK or t == D.SOCKET or t == D.SOCK_COMMON:
        return sock_access(regno, r, off, size, write)
    if t == D.NOT_INIT:
        raise Fault(
            "uninit-reg", f"R{regno} !read_ok", f"r{regno} is used before being set", (regno,)
        )
    name = D.TYPE_NAMES[t]
    hint = {
        D.SCALAR: (
            f"{r.note}: re-read data/data_end from the context after the call and check the "
            "bounds again before using packet pointers (FIELD-BUGS B06)"
            if r.note.startswith("packet pointer invalidated")
            else "this register holds a number, not a pointer"
        ),
        D.MAP_VALUE_OR_NULL: "the map lookup result may be NULL: compare it with 0 first "
        "and only use it on the non-NULL branch",
        D.SOCKET_OR_NULL: "the socket may be NULL: compare it with 0 first",
        D.SOCK_COMMON_OR_NULL: "the socket may be NULL: compare it with 0 first",
        D.RINGBUF_MEM_OR_NULL: "bpf_ringbuf_reserve may return NULL (the ring is full): "
        "compare it with 0 first",
        D.MEM_OR_NULL: "a pointer argument of a global function may be NULL: the kernel "
        "verifies the function for any caller; compare it with 0 first",
        D.PKT_END: "data_end marks the end of the packet; it cannot be dereferenced",
        D.MAP_PTR: "a map reference cannot be dereferenced; use a lookup helper",
    }.get(t, "this pointer type cannot be dereferenced")
    raise Fault("invalid-mem", f"R{regno} invalid mem access '{name}'", hint, (regno,))


# ---- packet ----


def _packet(env: Env, regno: int, r: D.Reg, off: int, size: int, write: bool) -> D.Reg | None:
    pt = env.prog_type
    if write and pt not in (ProgramType.XDP, ProgramType.SK_MSG, ProgramType.SCHED_CLS):
        raise Fault(
            "pkt-write",
            "cannot write into packet",
            "this program type may only read the packet",
            (regno,),
        )
    if r.smin < 0:
        raise Fault(
            "negative-index",
            f"R{regno} min value is negative, either use unsigned index or do a if (index >=0) check.",
            "make the offset unsigned or check it is >= 0",
            (regno,),
        )
    full = off + r.off
    if full < 0 or full + size > r.rng:
        raise Fault(
            "pkt-bounds",
            f"invalid access to packet, off={full} size={size}, R{regno}(id={r.id},off={full},r={r.rng})",
            f"bytes {full}..{full + size - 1} past this pointer are not proven to be inside the "
            f"packet (checked: {r.rng}); compare `ptr + {full + size}` with data_end "
            "before the access",
            (regno,),
        )
    if write:
        return None
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


# ---- map value ----


def _map_value(env: Env, regno: int, r: D.Reg, off: int, size: int, write: bool) -> D.Reg | None:
    m = r.map
    flags = getattr(m, "map_flags", 0) or 0
    if is_devmap(m.map_type):
        flags |= BPF_F_RDONLY_PROG  # the kernel sets it on devmaps (dev_map_alloc)
    vs = m.value_size
    full = off + r.off
    if write and flags & BPF_F_RDONLY_PROG:
        raise Fault(
            "map-readonly",
            f"write into map forbidden, value_size={vs} off={full} size={size}",
            f"map '{getattr(m, 'name', '?')}' is read-only for programs",
            (regno,),
        )
    if not write and flags & BPF_F_WRONLY_PROG:
        raise Fault(
            "map-wronly",
            f"read from map forbidden, value_size={vs} off={full} size={size}",
            "",
            (regno,),
        )
    if r.smin < 0 and (r.smin + full < 0):
        raise Fault(
            "negative-index",
            f"R{regno} min value is negative, either use unsigned index or do a if (index >=0) check.",
            "make the index unsigned or check it is >= 0 before using it",
            (regno,),
        )
    lo = r.smin + full if r.tn[1] else D.s64(r.tn[0]) + full
    if lo < 0 or lo + size > vs:
        raise Fault(
            "map-bounds",
            f"invalid access to map value, value_size={vs} off={lo} size={size}",
            f"the access must stay inside the {vs}-byte value of map '{getattr(m, 'name', '?')}'",
            (regno,),
        )
    if r.tn[1]:
        if r.umax >= BPF_MAX_VAR_OFF:
            raise Fault(
                "unbounded-access",
                f"R{regno} unbounded memory access, make sure to bounds check any such access",
                "check the index against the value size before using it",
                (regno,),
            )
        if r.umax + full + size > vs:
            raise Fault(
                "map-bounds",
                f"R{regno} max value is outside of the allowed memory range",
                f"the largest possible offset {r.umax + full} + {size} exceeds the value size {vs}",
                (regno,),
            )
    lock_field_access(regno, r, off, size)
    if r.tn[1] == 0 and (lo % size) and write:
        env.warn(
            "misaligned-store",
            f"{size}-byte store at offset {lo} of map '{getattr(m, 'name', '?')}' value is not "
            "naturally aligned",
            "lay records out with natural alignment (an 8-byte member at a multiple of 8, "
            "FIELD-BUGS B07); x86 tolerates it, stricter architectures and BTF readers do not",
            (regno,),
        )
    if write:
        return None
    data = getattr(m, "data", None)
    if data and flags & BPF_F_RDONLY_PROG and r.tn[1] == 0 and m.map_type == MapType.ARRAY:
        a = D.s64(r.tn[0]) + full
        if 0 <= a and a + size <= len(data):
            return D.known(int.from_bytes(data[a : a + size], "little"))
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


# ---- ring buffer reservations ----


def ringbuf_mem(regno: int, r: D.Reg, off: int, size: int, write: bool) -> D.Reg | None:
    """A load or store in a ring buffer reservation of ``r.rng`` bytes (kernel
    check_mem_region_access); its bytes are not tracked, reads give unknown scalars."""
    full = off + r.off
    lo = full + (r.smin if r.tn[1] else D.s64(r.tn[0]))
    hi = full + (r.umax if r.tn[1] else D.s64(r.tn[0]))
    if r.tn[1] and (r.smin < 0 or r.umax >= BPF_MAX_VAR_OFF):
        raise Fault(
            "unbounded-access",
            f"R{regno} unbounded memory access, make sure to bounds check any such access",
            "check the index against the record size before using it",
            (regno,),
        )
    if lo < 0 or hi + size > r.rng:
        raise Fault(
            "mem-bounds",
            f"invalid access to memory, mem_size={r.rng} off={lo} size={size}",
            f"the access must stay inside the {r.rng}-byte ring buffer reservation",
            (regno,),
        )
    if write:
        return None
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


# ---- memory of a global function argument ----


def _mem(regno: int, r: D.Reg, off: int, size: int) -> D.Reg:
    """An access through a pointer argument of a global function: inside its ``rng``
    bytes (kernel check_mem_region_access, "invalid access to memory, mem_size=...")."""
    full = off + r.off
    lo = r.smin + full if r.tn[1] else D.s64(r.tn[0]) + full
    hi = r.umax + full if r.tn[1] else lo
    if lo < 0 or hi + size > r.rng or (r.tn[1] and r.umax >= BPF_MAX_VAR_OFF):
        raise Fault(
            "mem-bounds",
            f"invalid access to memory, mem_size={r.rng} off={lo} size={size}",
            f"the argument points to {r.rng} bytes (the size of its type); stay inside them",
            (regno,),
        )
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


# ---- ctx ----


def _ctx(
    env: Env, regno: int, r: D.Reg, off: int, size: int, write: bool, ldsx: bool = False
) -> D.Reg | None:
    if r.off or r.tn != (0, 0):
        raise Fault(
            "modified-ctx",
            f"dereference of modified ctx ptr R{regno} off={r.off} disallowed",
            "read context fields through the unmodified context pointer (r1 at entry)",
            (regno,),
        )
    if env.ctx not in CTX_TABLES:
        raise Fault(
            "ctx-unmodelled",
            f"context {env.ctx or '?'} of this program type is not modelled by the checker",
            "bpfdsl checks XDP, sk_msg and sock_ops programs; load it to let the kernel decide",
            (regno,),
        )
    f = ctx_access(env.ctx or "", off, size, write, env.attach_type)
    if f is not None and ldsx and f.loads_as != D.SCALAR:
        # net/core/filter.c xdp_is_valid_access / bpf_skb_is_valid_access: info->is_ldsx
        # on data, data_end, data_meta (the sign extension would corrupt the pointer)
        raise Fault(
            "ctx-access",
            f"invalid bpf_context access off={off} size={size}",
            f"{env.ctx}.{f.name} is a pointer: load it with an unsigned (zero-extending) "
            "load, not a sign-extending one",
            (regno,),
        )
    if f is None:
        what = "written" if write else "read"
        raise Fault(
            "ctx-access",
            f"invalid bpf_context access off={off} size={size}",
            f"{env.ctx} has no field at offset {off} that can be {what} with a {size}-byte access",
            (regno,),
        )
    if write:
        return None
    if f.loads_as == D.SCALAR:
        return D.urange(0, (1 << (8 * min(size, f.size))) - 1)
    if f.loads_as == D.SOCKET_OR_NULL:
        return D.ptr(D.SOCKET_OR_NULL, id=env.new_id())
    return D.ptr(f.loads_as)
