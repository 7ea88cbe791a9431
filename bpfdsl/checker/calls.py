"""Helper calls checked against their prototypes (kernel check_helper_call/check_func_arg).

Prototypes come from the one helper table, bpfdsl.abi.helpers (argument kinds, return kind,
program types, map types, pkt_changing, pkt_access).  Memory arguments are checked for bounds and
initialization; packet-changing helpers invalidate every packet pointer.
"""

from __future__ import annotations

from bpfdsl.abi.helpers import (
    HELPERS_BY_ID,
    PROTOTYPES,
    ArgKind,
    RetKind,
    helper_allowed,
    helper_may_access_packet,
    kernel_helper_name,
    kernel_refuses_helper,
    map_fits_helper,
    may_update_sockmap,
)
from bpfdsl.abi.kfuncs import BY_NAME as KFUNCS_BY_NAME
from bpfdsl.abi.map_types import MapType, is_array, is_map_in_map, is_sockmap
from bpfdsl.checker import domain as D
from bpfdsl.checker import features as F
from bpfdsl.checker import refs as R
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.fixups import POISON
from bpfdsl.checker.mem import check_access, ringbuf_mem
from bpfdsl.checker.stack import check_bounds, stack_range_readable, stack_range_written
from bpfdsl.checker.state import State

A = ArgKind
UNMODELLED = "unmodelled-helper"  # a kernel helper the checker has no model of
_MEM_TYPES = (D.STACK, D.PKT, D.PKT_META, D.MAP_VALUE, D.RINGBUF_MEM, D.MEM)
# the kernel's list of ARG_PTR_TO_MEM's register types in "R2 type=... expected=..."
MEM_EXPECTED = "fp, pkt, pkt_meta, map_key, map_value, mem, ringbuf_mem, buf, trusted_ptr_"


def _type_err(regno: int, r: D.Reg, expected: str, explain: str) -> Fault:
    return Fault(
        "helper-arg",
        f"R{regno} type={D.TYPE_NAMES[r.t]} expected={expected}",
        explain,
        (regno,),
    )


def check_mem(env: Env, st: State, regno: int, size: int, write: bool, what: str) -> None:
    """``size`` bytes at register ``regno`` are memory a helper (or a global function) may
    read (``write``: write): stack (initialized for reads), packet or map value in bounds."""
    r = st.regs[regno]
    if r.t not in _MEM_TYPES:
        if r.t == D.NOT_INIT:
            raise Fault(
                "uninit-reg", f"R{regno} !read_ok", f"r{regno} ({what}) is not set", (regno,)
            )
        raise _type_err(regno, r, "fp, pkt, pkt_meta, map_value", f"pass a pointer to the {what}")
    if size == 0 and r.t != D.STACK:
        return
    if r.t == D.STACK:  # a zero size too: the kernel checks the first byte's bounds
        stack_range_readable(env, st, regno, size, what) if not write else None
        if write:
            # bounds only; the helper initializes the bytes
            check_bounds(
                regno, r, r.off, size, True, f"the {what} must lie inside the 512-byte stack"
            )
            stack_range_written(st, regno, size)
        return
    # packet / map value: the whole range must be accessible
    if r.tn[1] == 0:
        check_access(env, st, regno, 0, size, write, None) if size <= 8 else None
        if size > 8:
            _check_wide(env, st, regno, size, write)
    else:
        _check_wide(env, st, regno, size, write)


def _check_wide(env: Env, st: State, regno: int, size: int, write: bool) -> None:
    r = st.regs[regno]
    if r.t in D.PACKET_TYPES:
        full = r.off
        if r.smin < 0 or full < 0 or full + size > r.rng:
            raise Fault(
                "pkt-bounds",
                f"invalid access to packet, off={full} size={size}, R{regno}(id={r.id},off={full},r={r.rng})",
                f"check that {size} bytes are inside the packet before passing the pointer",
                (regno,),
            )
        return
    if r.t == D.RINGBUF_MEM:
        ringbuf_mem(regno, r, 0, size, write)
        return
    if r.t == D.MEM:
        lo = r.off + (r.smin if r.tn[1] else D.s64(r.tn[0]))
        hi = r.off + (r.umax if r.tn[1] else D.s64(r.tn[0]))
        if lo < 0 or hi + size > r.rng:
            raise Fault(
                "mem-bounds",
                f"invalid access to memory, mem_size={r.rng} off={lo} size={size}",
                "the memory passed on must fit inside the argument's type",
                (regno,),
            )
        return
    if r.t == D.MAP_VALUE:
        vs = r.map.value_size
        lo = r.off + (r.smin if r.tn[1] else D.s64(r.tn[0]))
        hi = r.off + (r.umax if r.tn[1] else D.s64(r.tn[0]))
        if lo < 0 or hi + size > vs:
            raise Fault(
                "map-bounds",
                f"invalid access to map value, value_size={vs} off={lo} size={size}",
                "the memory passed to the helper must fit inside the map value",
                (regno,),
            )
        R.lock_field_access(regno, r, 0, size)


def check_helper_call(env: Env, st: State, helper_id: int, idx: int) -> None:
    """Check a ``call`` of helper ``helper_id`` and apply its effects to ``st`` in place."""
    R.calls_locked(env, st, helper_id)  # kernel do_check_insn, before check_helper_call
    refused = kernel_refuses_helper(helper_id, env.prog_type)  # before anything else
    if refused is not None:
        if refused.startswith("invalid func"):
            raise Fault(
                "unknown-helper",
                refused,
                f"this kernel has no helper #{helper_id} (enum bpf_func_id ends at "
                f"{len(PROTOTYPES) - 1}): the object is for another kernel, or corrupt",
            )
        raise Fault(
            "helper-prog-type",
            refused,
            f"{kernel_helper_name(helper_id) or 'this helper'} is not available to "
            f"{env.prog_type.name.lower()} programs",
        )
    h = HELPERS_BY_ID.get(helper_id)
    if h is None:
        raise Fault(
            UNMODELLED,
            f"cannot check: helper {kernel_helper_name(helper_id)} (#{helper_id}) is not "
            "modelled by bpfdsl check",
            "the kernel knows this helper; load the object to let the kernel verify it "
            "(bpfdsl check models the helpers of bpfdsl.abi.helpers only)",
        )
    if not helper_allowed(h, env.prog_type):
        raise Fault(
            "helper-prog-type",
            f"program of this type cannot use helper bpf_{h.name}#{helper_id}",
            f"bpf_{h.name} is not available to {env.prog_type.name.lower()} programs",
        )
    if h.name in F.HELPER_MIN:
        env.need(F.HELPER_MIN[h.name], f"bpf_{h.name}")
    key_const = None  # the map key, when it is a known constant (get_constant_map_key)
    regs = st.regs
    map_obj = None
    last_mem: int | None = None
    assert h.args is not None  # HELPERS_BY_ID holds the modelled helpers
    alloc_size = 0
    released = 0
    map_fault: Fault | None = None
    for k, kind in enumerate(h.args):
        regno = k + 1
        r = regs[regno]
        if r.t == D.NOT_INIT:
            raise Fault(
                "uninit-reg",
                f"R{regno} !read_ok",
                f"argument {regno} of bpf_{h.name} is not set",
                (regno,),
            )
        if kind == A.ANYTHING:
            continue
        if r.t in D.PACKET_TYPES and not helper_may_access_packet(h, env.prog_type):
            # kernel check_func_arg: before the argument's type is looked at
            raise Fault(
                "helper-pkt-access",
                "helper access to the packet is not allowed",
                f"argument {regno} of bpf_{h.name} points into the packet, which "
                + (
                    f"{env.prog_type.name.lower()} programs may not pass to any helper"
                    if h.pkt_access
                    else f"bpf_{h.name} may not read (the kernel's proto has no pkt_access)"
                )
                + ": copy the bytes to the stack or a map value first and pass that pointer",
                (regno,),
            )
        if kind == A.CONST_MAP_PTR:
            if r.t != D.MAP_PTR:
                raise _type_err(
                    regno, r, "map_ptr", f"argument {regno} of bpf_{h.name} must be a map"
                )
            map_obj = r.map
            try:
                mt: MapType | None = MapType(map_obj.map_type)
            except ValueError:  # a type newer than abi.map_types.MapType: not checked here
                mt = None
            if mt is not None and (
                not map_fits_helper(mt, h.name)
                or (is_sockmap(mt) and not may_update_sockmap(env.prog_type, h.name))
            ):
                # kernel check_map_func_compatibility runs after every argument is checked
                map_fault = Fault(
                    "map-helper",
                    f"cannot pass map_type {int(map_obj.map_type)} into func bpf_{h.name}#{helper_id}",
                    f"map '{getattr(map_obj, 'name', '?')}' ({mt.name.lower()}) cannot be used with bpf_{h.name}",
                    (regno,),
                )
        elif kind == A.PTR_TO_CTX:
            if r.t != D.CTX:
                raise _type_err(
                    regno, r, "ctx", f"pass the program's context (r1 at entry) to bpf_{h.name}"
                )
            if r.off or r.tn != (0, 0):
                raise Fault(
                    "modified-ctx",
                    f"dereference of modified ctx ptr R{regno} off={r.off} disallowed",
                    "pass the unmodified context pointer",
                    (regno,),
                )
        elif kind in (A.PTR_TO_MAP_KEY, A.PTR_TO_MAP_VALUE):
            if map_obj is None:
                raise Fault("helper-arg", "invalid map_ptr to access map->key", "", (regno,))
            if kind == A.PTR_TO_MAP_VALUE and is_sockmap(map_obj.map_type):
                # kernel resolve_map_arg_type: a sockmap's value is
                # ARG_PTR_TO_BTF_ID_SOCK_COMMON (compatible_reg_types: sock_common_types)
                if r.t not in (D.SOCK_COMMON, D.SOCKET, D.XDP_SOCK):
                    raise _type_err(
                        regno,
                        r,
                        "sock_common, sock, tcp_sock, xdp_sock, ptr_, trusted_ptr_",
                        f"a {MapType(map_obj.map_type).name.lower()} stores sockets: pass a "
                        "socket pointer checked for NULL (e.g. from bpf_sk_lookup_tcp)",
                    )
                continue
            size = map_obj.key_size if kind == A.PTR_TO_MAP_KEY else map_obj.value_size
            check_mem(
                env, st, regno, size, False, "map key" if kind == A.PTR_TO_MAP_KEY else "map value"
            )
            if kind == A.PTR_TO_MAP_KEY and env.privileged and is_array(map_obj.map_type):
                key = constant_key(st, r, map_obj.key_size)  # kernel get_constant_map_key
                if key is not None:
                    key_const, slot = key
                    if slot is not None:  # a spilled constant: its value must stay exact
                        env.want_slots.append(slot)
        elif kind in (A.PTR_TO_MEM, A.PTR_TO_UNINIT_MEM, A.PTR_TO_MEM_OR_NULL):
            last_mem = regno
            if kind == A.PTR_TO_MEM_OR_NULL and r.t == D.SCALAR and r.is_const and r.value == 0:
                continue  # NULL with size 0 (checked with the size)
            if r.t not in _MEM_TYPES:  # kernel compatible_reg_types: mem_types
                raise _type_err(
                    regno,
                    r,
                    MEM_EXPECTED,
                    f"argument {regno} of bpf_{h.name} must point to memory"
                    + (" (it may not be NULL)" if r.t == D.SCALAR else ""),
                )
        elif kind in (A.CONST_SIZE, A.CONST_SIZE_OR_ZERO):
            if r.t != D.SCALAR:
                raise _type_err(regno, r, "scalar", "the size must be a number")
            if r.smin < 0:
                raise Fault(
                    "size-negative",
                    f"R{regno} min value is negative, either use unsigned or 'var &= const'",
                    "bound the size with `&=` or an unsigned comparison",
                    (regno,),
                )
            if r.umin == 0 and kind == A.CONST_SIZE:
                raise Fault(
                    "size-zero",
                    f"R{regno} invalid zero-sized read",
                    "the size must be at least 1",
                    (regno,),
                )
            if r.umax >= 1 << 29:
                raise Fault(
                    "size-unbounded",
                    f"R{regno} unbounded memory access, use 'var &= const' or 'if (var < const)'",
                    "bound the size before the call",
                    (regno,),
                )
            env.precise(regno)  # kernel check_mem_size_reg: mark_chain_precision
            if last_mem is not None:
                mr = regs[last_mem]
                write = h.args[last_mem - 1] == A.PTR_TO_UNINIT_MEM
                if mr.t == D.SCALAR:
                    if r.umax != 0:  # kernel check_helper_mem_access: a NULL pointer
                        raise _type_err(last_mem, mr, "fp", "a NULL pointer needs size 0")
                else:
                    check_mem(env, st, last_mem, r.umax, write, "buffer")
        elif kind == A.CONST_ALLOC_SIZE_OR_ZERO:
            if r.t != D.SCALAR or not r.is_const:
                raise Fault(
                    "size-not-const",
                    f"R{regno} is not a known constant'",
                    f"the size bpf_{h.name} allocates must be a constant (the record's size)",
                    (regno,),
                )
            alloc_size = r.value
            env.precise(regno)  # kernel check_func_arg: mark_chain_precision of the size
        elif kind == A.PTR_TO_RINGBUF_MEM:
            if r.t != D.RINGBUF_MEM:
                raise _type_err(
                    regno,
                    r,
                    "ringbuf_mem",
                    f"bpf_{h.name} takes what bpf_ringbuf_reserve returned, checked for NULL"
                    + (" and not submitted or discarded yet" if "released" in r.note else ""),
                )
            if r.off or r.tn != (0, 0):
                raise Fault(
                    "release-offset",
                    f"R{regno} must have zero offset when passed to release func",
                    "pass the pointer bpf_ringbuf_reserve returned, not one into the record",
                    (regno,),
                )
            if r.ref not in st.refs:
                raise Fault(
                    "release-twice",
                    f"R{regno} reference id={r.ref} is not acquired",
                    "a reservation is submitted or discarded once",
                    (regno,),
                )
            released = r.ref
        elif kind == A.PTR_TO_SOCKET:
            if r.t != D.SOCKET:
                raise _type_err(regno, r, "sock", "pass a socket pointer checked for NULL")
        elif kind == A.PTR_TO_BTF_ID_SOCK_COMMON:  # OBJ_RELEASE
            released = R.release_arg(st, regno, r, f"bpf_{h.name}")
        elif kind == A.PTR_TO_SPIN_LOCK:
            if r.t != D.MAP_VALUE:  # compatible_reg_types: spin_lock_types
                raise _type_err(
                    regno,
                    r,
                    "map_value, ptr_",
                    f"pass bpf_{h.name} &value->lock of a map value checked for NULL",
                )
            R.spin_lock(env, st, regno, r, h.name == "spin_lock", idx)
    if map_fault is not None:
        raise map_fault
    if map_obj is not None:  # kernel record_func_map (the rewrite's inlined lookup needs one)
        seen_map = env.call_maps.setdefault(env.cur_idx, map_obj)
        if seen_map is not map_obj:
            env.call_maps[env.cur_idx] = POISON
    if helper_id == 1 and map_obj is not None and map_obj.map_type in F.LOOKUP_MIN:
        kind_name = MapType(map_obj.map_type).name.lower()
        env.need(F.LOOKUP_MIN[map_obj.map_type], f"bpf_map_lookup_elem on a {kind_name}", (1,))
    if h.name == "redirect_map" and regs[3].t == D.SCALAR and regs[3].is_const:
        if regs[3].value == 0:  # __bpf_xdp_redirect_map: an empty slot returns flags & 3
            env.warn(
                "redirect-fallback-aborted",
                "bpf_redirect_map flags 0: an empty slot returns XDP_ABORTED (the frame is "
                "dropped and counted as an error)",
                "pass XDP_PASS or XDP_DROP as the flags' fallback action, or keep 0 if "
                "aborting is meant",
                (3,),
            )
    if h.name == "tail_call":  # kernel check_helper_call: check_resource_leak
        leak = R.leak_fault(env, st, "tail_call")
        if leak is not None:
            raise leak
    if h.name == "tail_call" and map_obj is not None:
        # kernel record_func_key: a constant index within the prog_array is relied on
        # exactly (the JIT may patch a direct jump to that slot)
        index_reg = st.regs[3]
        if index_reg.t == D.SCALAR and index_reg.is_const and index_reg.value < map_obj.max_entries:
            env.precise(3)
    # effects
    if h.pkt_changing:
        _invalidate_packet(st, f"packet pointer invalidated by bpf_{h.name} at insn {idx}")
    if released:  # kernel release_reference: every copy of the pointer becomes unusable
        what = "socket" if h.name == "sk_release" else "ringbuf reservation"
        R.release(st, released, f"{what} released by bpf_{h.name} at insn {idx}", env.privileged)
    for regno in range(1, 6):
        regs[regno] = D.NOT_INIT_REG
    if h.ret == RetKind.PTR_TO_RINGBUF_MEM_OR_NULL:
        rid = R.acquire(env, st, idx, f"bpf_{h.name}")
        regs[0] = D.Reg(D.RINGBUF_MEM_OR_NULL, id=rid, rng=alloc_size, map=map_obj, ref=rid)
    elif h.ret in (RetKind.PTR_TO_SOCKET_OR_NULL, RetKind.PTR_TO_SOCK_COMMON_OR_NULL):
        rid = R.acquire(env, st, idx, f"bpf_{h.name}")
        t = D.SOCKET_OR_NULL if h.ret == RetKind.PTR_TO_SOCKET_OR_NULL else D.SOCK_COMMON_OR_NULL
        regs[0] = D.Reg(t, id=rid, ref=rid)
    elif h.ret == RetKind.PTR_TO_MAP_VALUE_OR_NULL:
        if map_obj is None:
            regs[0] = D.unknown()
        elif is_sockmap(map_obj.map_type):
            # kernel is_acquire_function: a sockmap/sockhash lookup takes a reference on
            # the socket (released with bpf_sk_release)
            rid = R.acquire(env, st, idx, f"bpf_{h.name} on sockmap '{map_obj.name}'")
            regs[0] = D.Reg(D.MAP_VALUE_OR_NULL, id=rid, map=map_obj, ref=rid)
        elif (
            helper_id == 1
            and is_array(map_obj.map_type)
            and key_const is not None
            and key_const < map_obj.max_entries
        ):
            # kernel 6.x: in-range constant key; a value with a bpf_spin_lock gets an id
            # (the lock's identity, process_spin_lock)
            lock_id = env.new_id() if R.spin_lock_off(map_obj) >= 0 else 0
            regs[0] = D.ptr(D.MAP_VALUE, map=map_obj, id=lock_id)
        else:
            regs[0] = D.Reg(D.MAP_VALUE_OR_NULL, id=env.new_id(), map=map_obj)
    elif h.name == "get_smp_processor_id" and env.nr_cpus:
        regs[0] = D.urange(0, env.nr_cpus - 1)  # kernel do_refine_retval_range: nr_cpu_ids
    else:
        regs[0] = D.unknown()


_OUT_SIZES = {"u16": 2, "be16": 2, "u32": 4, "u64": 8}  # bytes each kfunc output takes


def check_kfunc_call(env: Env, st: State, name: str | None, idx: int) -> None:
    """A call of kernel function ``name`` (abi.kfuncs, from the object's relocation): r1 the
    context, r2.. writable memory of the sizes of its outputs; r0 an unknown int (0 or a
    negative errno), r1-r5 clobbered.  The device-bound rule is the kernel's to check."""
    R.calls_locked(env, st, -1)
    k = KFUNCS_BY_NAME.get(name or "")
    if k is None:
        raise Fault(
            "kfunc",
            f"call of kernel function {name or '#?'} the checker does not model",
            "the checker knows the XDP metadata kfuncs: " + ", ".join(sorted(KFUNCS_BY_NAME)),
        )
    regs = st.regs
    if regs[1].t != D.CTX or regs[1].off:
        raise _type_err(1, regs[1], "ctx", f"{k.name} takes the program's context first")
    for regno, (what, tname) in enumerate(k.outs, 2):
        check_mem(env, st, regno, _OUT_SIZES[tname], True, what)
    for regno in range(1, 6):
        regs[regno] = D.NOT_INIT_REG
    regs[0] = D.unknown()


def _invalidate_packet(st: State, note: str) -> None:
    st.update_regs(lambda r: D.unknown(note) if r.t in (D.PKT, D.PKT_META, D.PKT_END) else None)


def nonnull_type(r: D.Reg) -> int:
    """Type a *_OR_NULL register takes on its non-NULL branch (mark_ptr_or_null_reg)."""
    if r.t == D.MAP_VALUE_OR_NULL and r.map is not None:
        mt = r.map.map_type
        if mt == MapType.XSKMAP:
            return D.XDP_SOCK
        if is_sockmap(mt):
            return D.SOCKET
        if is_map_in_map(mt):
            return D.MAP_PTR  # the inner map (map->inner_map_meta)
        return D.MAP_VALUE
    return D.NULLABLE[r.t]


def nonnull_map(r: D.Reg) -> object:
    """The map a *_OR_NULL register refers to on its non-NULL branch: a map-in-map lookup's
    result is the inner map (kernel mark_ptr_or_null_reg: reg->map_ptr =
    map->inner_map_meta, the object's inner map definition), any other keeps its map."""
    if r.t == D.MAP_VALUE_OR_NULL and r.map is not None and is_map_in_map(r.map.map_type):
        return getattr(r.map, "inner", None)
    return r.map


def constant_key(st: State, r: D.Reg, key_size: int) -> tuple[int, tuple | None] | None:
    """The map key's value when it is a constant on the stack (kernel get_constant_map_key):
    ``key_size`` zero bytes, or a scalar spilled with exactly ``key_size`` bytes; with the
    (frame, slot) of the spill (None for zero bytes, which are exact by slot type)."""
    if r.t != D.STACK or r.tn[1] != 0:
        return None
    frame = st.frames[r.map] if isinstance(r.map, int) and r.map < len(st.frames) else st.cur
    a = r.off + D.s64(r.tn[0])
    k, j = (-a - 1) // 8, a % 8
    s = frame.stack.get(k)
    if s is None:
        return None
    zeros = len(s.types[j:]) - len(s.types[j:].lstrip("z"))
    if zeros >= key_size:
        return 0, None
    if s.spill is None or s.spill.t != D.SCALAR or j != 0:
        return None
    spill = len(s.types) - len(s.types.lstrip("s"))
    if spill != key_size or not s.spill.is_const:
        return None
    fr = r.map if isinstance(r.map, int) and r.map < len(st.frames) else len(st.frames) - 1
    return s.spill.value, (fr, k)
