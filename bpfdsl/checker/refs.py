"""Acquired references and the sockets they are taken on (kernel/bpf/verifier.c, Linux 6.18).

A helper the kernel calls an acquire function (``is_acquire_function``: bpf_sk_lookup_tcp,
bpf_sk_lookup_udp, bpf_skc_lookup_tcp, bpf_ringbuf_reserve, bpf_map_lookup_elem on a
sockmap/sockhash) returns a pointer that may be NULL with a reference: ``acquire_reference``
gives it a fresh id, kept in ``State.refs`` (the kernel's ``refs[]`` of REF_TYPE_PTR) and in
the register's ``ref`` (``ref_obj_id``).  The NULL branch of the pointer's check drops the
reference (``mark_ptr_or_null_regs``); a release function (bpf_sk_release,
bpf_ringbuf_submit/discard: an OBJ_RELEASE argument) drops it and turns every copy of the
pointer into an unknown scalar (``release_reference`` -> ``mark_reg_invalid``, privileged);
a reference still held at the main program's exit or at a tail call is a leak
(``check_reference_leak``: "Unreleased reference id=N alloc_insn=K").  The reference set is
part of state equality (``refsafe``: the same number, ids mapped): state.states_equal.

Socket fields are read as the kernel's ``check_sock_access`` allows: ``struct bpf_sock``
(PTR_TO_SOCKET, ``bpf_sock_is_valid_access``), its sock_common part (PTR_TO_SOCK_COMMON,
``bpf_sock_common_is_valid_access``: no type..priority) and ``struct bpf_xdp_sock``
(PTR_TO_XDP_SOCK, ``bpf_xdp_sock_is_valid_access``: queue_id only); never written.
"""

from __future__ import annotations

from typing import Final

from bpfdsl.abi.limits import BPF_SOCK_SIZE
from bpfdsl.checker import domain as D
from bpfdsl.checker.env import Env, Fault
from bpfdsl.checker.state import State

# the register types ARG_PTR_TO_BTF_ID_SOCK_COMMON accepts that the checker models, and the
# kernel's list of them in its "R1 type=... expected=..." message (compatible_reg_types:
# sock_types)
SOCK_COMMON_TYPES: Final = (D.SOCK_COMMON, D.SOCKET, D.XDP_SOCK)
SOCK_COMMON_EXPECTED: Final = "sock_common, sock, tcp_sock, xdp_sock, ptr_, trusted_ptr_"

# struct bpf_sock (include/uapi/linux/bpf.h): byte offsets of its fields
_SOCK_NARROW: Final = frozenset(
    {4, 8, 12, 44, 72, 76}
)  # family type protocol src_port state rx_queue_mapping
_SOCK_NARROW_RANGES: Final = (
    (24, 28),
    (28, 44),
    (52, 56),
    (56, 72),
)  # src_ip4 src_ip6 dst_ip4 dst_ip6
_DST_PORT: Final = (48, 50)  # __be16 dst_port, then 16 bits of zero padding (50..51)
_SOCK_COMMON_HIDDEN: Final = (8, 24)  # type, protocol, mark, priority: not in sock_common


def acquire(env: Env, st: State, idx: int, what: str) -> int:
    """kernel acquire_reference for the result of the call at insn ``idx`` (``what``: the
    helper): a new reference id, recorded in ``st.refs``.  Two ids are taken, as the kernel
    does (``++id_gen`` for the _OR_NULL result, then the reference's own, which replaces
    it), so the ids in messages are the kernel's."""
    env.new_id()
    rid = env.new_id()
    env.ref_insn[rid] = (idx, what)
    st.refs = (*st.refs, rid)
    return rid


def release(st: State, rid: int, note: str, privileged: bool = True) -> None:
    """kernel release_reference: drop reference ``rid``; every register and spilled copy of
    the pointer becomes an unknown scalar saying ``note`` (mark_reg_invalid: with
    ``allow_ptr_leaks``, a privileged load; unset, NOT_INIT, otherwise)."""
    st.refs = tuple(x for x in st.refs if x != rid)
    gone = D.unknown(note) if privileged else D.NOT_INIT_REG
    st.update_regs(lambda r: gone if r.ref == rid else None)


def leak_fault(env: Env, st: State, prefix: str) -> Fault | None:
    """kernel check_reference_leak: the Fault for references still held where ``prefix``
    ("BPF_EXIT instruction in main prog", "tail_call") ends the program, or None."""
    held = [rid for rid in st.refs if env.ref_insn.get(rid, (0, ""))[1] != LOCK]
    if not held:
        return None
    where = []
    for rid in held:
        idx, what = env.ref_insn.get(rid, (-1, "?"))
        where.append(f"id={rid} from {what} at insn {idx}")
    rid = held[0]
    idx = env.ref_insn.get(rid, (-1, "?"))[0]
    return Fault(
        "unreleased-ref",
        f"Unreleased reference id={rid} alloc_insn={idx}: {prefix} would lead to reference leak",
        f"held: {'; '.join(where)}: release every socket "
        "a lookup returned (bpf_sk_release) and end every ring buffer reservation "
        "(bpf_ringbuf_submit or bpf_ringbuf_discard) on every path before it",
        at=tuple(env.ref_insn.get(r, (-1, "?"))[0] for r in held),
    )


def _sock_valid(off: int, size: int) -> bool:
    """kernel bpf_sock_is_valid_access (net/core/filter.c), for a read."""
    if off < 0 or off >= BPF_SOCK_SIZE or off % size:
        return False
    narrow = size <= 4 and size & (size - 1) == 0  # bpf_ctx_narrow_access_ok
    if off in _SOCK_NARROW or any(lo <= off < hi for lo, hi in _SOCK_NARROW_RANGES):
        return narrow
    if _DST_PORT[0] <= off < _DST_PORT[1]:
        field = 4 if size == 4 else 2
        return size <= field and size & (size - 1) == 0
    if _DST_PORT[1] <= off < 52:
        return False
    return size == 4


def sock_access(regno: int, r: D.Reg, off: int, size: int, write: bool) -> D.Reg:
    """kernel check_mem_access on a socket pointer (PTR_TO_SOCKET, PTR_TO_SOCK_COMMON,
    PTR_TO_XDP_SOCK): a read of ``size`` bytes at ``off`` gives an unknown value of that
    width; a write, or a field the kernel's ``*_is_valid_access`` refuses, is a Fault."""
    name = D.TYPE_NAMES[r.t]
    if write:
        raise Fault(
            "sock-access",
            f"R{regno} cannot write into {name}",
            "socket fields are read-only",
            (regno,),
        )
    full = off + r.off
    if r.t == D.XDP_SOCK:
        ok = full == 0 and size == 4
    elif r.t == D.SOCK_COMMON and _SOCK_COMMON_HIDDEN[0] <= full < _SOCK_COMMON_HIDDEN[1]:
        ok = False
    else:
        ok = _sock_valid(full, size)
    if not ok:
        raise Fault(
            "sock-access",
            f"R{regno} invalid {name} access off={full} size={size}",
            "only the queue_id (u32 at offset 0) of an xskmap lookup result may be read"
            if r.t == D.XDP_SOCK
            else "read a field of struct bpf_sock with its own width (or a narrower load "
            "at its start); bpf_skc_lookup_tcp's result has no type, protocol, mark or "
            "priority"
            if r.t == D.SOCK_COMMON
            else "read a field of struct bpf_sock with its own width (or a narrower load "
            "at its start)",
            (regno,),
        )
    return D.unknown() if size == 8 else D.urange(0, (1 << (8 * size)) - 1)


def release_arg(st: State, regno: int, r: D.Reg, helper: str) -> int:
    """The reference an ARG_PTR_TO_BTF_ID_SOCK_COMMON | OBJ_RELEASE argument releases
    (kernel check_func_arg: check_reg_type, then "must be referenced when passed to release
    function")."""
    if r.t not in SOCK_COMMON_TYPES:
        raise Fault(
            "helper-arg",
            f"R{regno} type={D.TYPE_NAMES[r.t]} expected={SOCK_COMMON_EXPECTED}",
            f"{helper} takes a socket a lookup returned, checked for NULL"
            + (" and not released yet" if "released" in r.note else ""),
            (regno,),
        )
    if not r.ref or r.ref not in st.refs:
        raise Fault(
            "release-unreferenced",
            f"R{regno} must be referenced when passed to release function",
            f"{helper} releases what a lookup acquired; this socket was not acquired "
            "by the program",
            (regno,),
        )
    return r.ref


def nonnull_id(r: D.Reg, nt: int) -> int:
    """The id a pointer keeps on the non-NULL branch of its check (kernel
    mark_ptr_or_null_reg): none, but for a map value that may hold a bpf_spin_lock."""
    return r.id if nt == D.MAP_VALUE and r.map is not None and spin_lock_off(r.map) >= 0 else 0


def spin_lock_off(m: object) -> int:
    """Byte offset of the ``struct bpf_spin_lock`` in a value of map ``m`` (-1: none)."""
    off = getattr(m, "spin_lock_off", -1)
    return off if isinstance(off, int) else -1


# pointer types one load/store insn may not mix with another (kernel reg_type_mismatch_ok:
# ctx and the socket kinds are converted per insn by convert_ctx_accesses)
_CONVERTED: Final = frozenset({D.CTX, D.SOCKET, D.SOCK_COMMON, D.XDP_SOCK})


def same_insn_pointer(env: Env, t: int) -> None:
    """kernel save_aux_ptr_type, after a load (its source) or store (its destination)
    through a pointer of type ``t`` at insn ``env.cur_idx``: every path must use the same
    type where one of them is a context or socket pointer."""
    prev = env.ptr_type_at.setdefault(env.cur_idx, t)
    if prev != t and (prev in _CONVERTED or t in _CONVERTED):
        raise Fault(
            "ptr-type-mismatch",
            "same insn cannot be used with different pointers",
            f"this load/store reaches a {D.TYPE_NAMES[prev]} on one path and a "
            f"{D.TYPE_NAMES[t]} on another; the kernel rewrites context and socket accesses "
            "per instruction: read the field on each path separately",
        )


# ---- bpf_spin_lock (kernel process_spin_lock; the lock is a REF_TYPE_LOCK entry of refs[]) ----

LOCK: Final = "bpf_spin_lock"  # what env.ref_insn records for a held lock's entry


def held_lock(env: Env, st: State) -> int:
    """The id of the lock ``st`` holds (the locked map value's register id), 0 for none.
    The lock is an entry of ``st.refs`` as in the kernel, and ``st.lock_id``/``lock_ptr``
    (active_lock_id, active_lock_ptr: refsafe compares them, ids mapped)."""
    return st.lock_id


def calls_locked(env: Env, st: State, helper_id: int) -> None:
    """kernel do_check_insn, BPF_CALL with active_locks: only bpf_spin_unlock (94) may be
    called (a helper or kfunc; ``helper_id`` -1 for a kfunc)."""
    if helper_id != 94 and held_lock(env, st):
        raise Fault(
            "call-locked",
            "function calls are not allowed while holding a lock",
            "call bpf_spin_unlock before any other helper (bpf_spin_lock included): "
            "only loads, stores and arithmetic may run while the lock is held",
        )


def exit_locked(env: Env, st: State) -> Fault | None:
    """kernel check_resource_leak at the main program's exit: the lock still held."""
    if not held_lock(env, st):
        return None
    idx = env.ref_insn[held_lock(env, st)][0]
    return Fault(
        "exit-locked",
        "BPF_EXIT instruction in main prog cannot be used inside bpf_spin_lock-ed region",
        f"the lock taken at insn {idx} is still held on this path: call bpf_spin_unlock "
        "on every path before returning",
        at=(idx,),
    )


def spin_lock(env: Env, st: State, regno: int, r: D.Reg, lock: bool, idx: int) -> None:
    """kernel process_spin_lock for argument ``regno`` of bpf_spin_lock (``lock``) or
    bpf_spin_unlock at insn ``idx``; ``r`` is a map value pointer (checked by the caller)."""
    fn = "bpf_spin_lock" if lock else "bpf_spin_unlock"
    if r.tn[1]:
        raise Fault(
            "spin-lock-arg",
            f"R{regno} doesn't have constant offset. bpf_spin_lock has to be at the constant offset",
            f"pass {fn} the address of the lock field itself, not a computed one",
            (regno,),
        )
    m = r.map
    name = getattr(m, "name", "?")
    if not getattr(m, "value_type_id", 0):
        raise Fault(
            "spin-lock-arg",
            f"map '{name}' has to have BTF in order to use bpf_spin_lock",
            "declare the map with BTF (__type(value, ...)) so its struct bpf_spin_lock is known",
            (regno,),
        )
    at = spin_lock_off(m)
    if at < 0:
        raise Fault(
            "spin-lock-arg",
            f"map '{name}' has no valid bpf_spin_lock",
            f"the value type of map '{name}' needs a struct bpf_spin_lock member",
            (regno,),
        )
    off = D.s64(r.tn[0]) + r.off
    if off != at:
        raise Fault(
            "spin-lock-arg",
            f"off {off} doesn't point to 'struct bpf_spin_lock' that is at {at}",
            f"pass &value->lock (offset {at} of the value) to {fn}",
            (regno,),
        )
    held = held_lock(env, st)
    if lock:
        if held:  # unreachable from a helper call (calls_locked refuses it first)
            raise Fault("spin-lock-twice", "Locking two bpf_spin_locks are not allowed", "")
        env.ref_insn[r.id] = (idx, LOCK)
        st.refs = (*st.refs, r.id)
        st.lock_id, st.lock_ptr = r.id, m  # kernel process_spin_lock: active_lock_id/ptr
        return
    if not held:
        raise Fault(
            "spin-unlock",
            "bpf_spin_unlock without taking a lock",
            "this path reaches bpf_spin_unlock without bpf_spin_lock before it",
            (regno,),
        )
    if held != r.id:
        raise Fault(
            "spin-unlock",
            "bpf_spin_unlock of different lock",
            f"the lock held was taken at insn {env.ref_insn[held][0]} through another "
            "map value pointer: unlock the value that was locked",
            (regno,),
            (env.ref_insn[held][0],),
        )
    st.refs = tuple(x for x in st.refs if x != held)
    st.lock_id, st.lock_ptr = 0, None


def lock_field_access(regno: int, r: D.Reg, off: int, size: int) -> None:
    """kernel check_map_access: no load, store or helper access of a map value may touch
    its struct bpf_spin_lock (``off`` the access's offset from the pointer, variable part
    included through ``r``'s bounds)."""
    at = spin_lock_off(r.map)
    if at < 0:
        return
    lo = r.off + off + (r.smin if r.tn[1] else D.s64(r.tn[0]))
    hi = r.off + off + (r.umax if r.tn[1] else D.s64(r.tn[0])) + size
    if lo < at + 4 and at < hi:
        raise Fault(
            "spin-lock-access",
            "bpf_spin_lock cannot be accessed directly by load/store",
            "the lock is only taken and released with bpf_spin_lock/bpf_spin_unlock; "
            "read and write the other fields",
            (regno,),
        )


def global_call_locked(env: Env, st: State, name: str) -> None:
    """kernel check_func_call: a global function (``name``) called with the lock held."""
    if held_lock(env, st):
        raise Fault(
            "call-locked",
            "global function calls are not allowed while holding a lock, use static function "
            "instead",
            f"{name}() is global (verified on its own, for any caller): unlock before the "
            "call, or make it static",
        )
