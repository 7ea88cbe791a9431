"""Socket-level helpers of the userspace machine: sk_msg (redirect, apply/cork bytes,
pull/push/pop data) and sock_ops (sockmap/sockhash updates, socket cookie, callback
flags), as net/core/filter.c and net/core/sock_map.c implement them, in :data:`IMPLS`
(:mod:`bpfdsl.interp.machine` joins it with :data:`bpfdsl.interp.helpers.IMPLS`).
"""

from __future__ import annotations

import errno

from bpfdsl.abi.flags import BPF_F_INGRESS
from bpfdsl.abi.prog_types import BPF_SOCK_OPS_ALL_CB_FLAGS, SkAction
from bpfdsl.interp.ctx import SkMsgContext, SockOpsContext
from bpfdsl.interp.helpers import Impl, map_arg, mem_arg, neg_errno, registrar
from bpfdsl.interp.maps import Map, SlotMap
from bpfdsl.interp.memory import M32, M64, Fault
from bpfdsl.interp.state import RunState

IMPLS: dict[int, Impl] = {}
helper = registrar(IMPLS)


def _msg(m: RunState, name: str) -> SkMsgContext:
    if not isinstance(m.ctx, SkMsgContext):
        raise Fault(f"bpf_{name} needs an sk_msg context")
    return m.ctx


# ---- sk_msg ----


def _msg_redirect(m: RunState, mp: Map, key: bytes, flags: int, name: str) -> int:
    x = _msg(m, name)
    if flags & ~BPF_F_INGRESS:
        x.redirect, x.redirect_miss = None, (mp.name, key, flags, "flags")
        return SkAction.DROP
    assert isinstance(mp, SlotMap)
    sk = mp.target(key)
    if sk is None:
        x.redirect, x.redirect_miss = None, (mp.name, key, flags, "empty")
        return SkAction.DROP
    x.redirect, x.redirect_miss = (mp.name, key, sk, flags), None
    return SkAction.PASS


@helper("msg_redirect_map")
def _msg_redirect_map(m: RunState, r1: object, r2: object, r3: int, r4: int, *_: object) -> int:
    mp = map_arg(m, r2, "msg_redirect_map")
    return _msg_redirect(m, mp, (r3 & M32).to_bytes(4, "little"), r4, "msg_redirect_map")


@helper("msg_redirect_hash")
def _msg_redirect_hash(m: RunState, r1: object, r2: object, r3: object, r4: int, *_: object) -> int:
    mp = map_arg(m, r2, "msg_redirect_hash")
    key = mem_arg(r3, mp.key_size, "sockhash key")
    return _msg_redirect(m, mp, key, r4, "msg_redirect_hash")


@helper("msg_apply_bytes")
def _apply(m: RunState, r1: object, r2: int, *_: object) -> int:
    _msg(m, "msg_apply_bytes").apply_bytes = r2 & M32
    return 0


@helper("msg_cork_bytes")
def _cork(m: RunState, r1: object, r2: int, *_: object) -> int:
    _msg(m, "msg_cork_bytes").cork_bytes = r2 & M32
    return 0


@helper("msg_pull_data")
def _pull(m: RunState, r1: object, r2: int, r3: int, r4: int, *_: object) -> int:
    pk = _msg(m, "msg_pull_data").pkt
    pk.gen += 1
    start, end = r2 & M32, r3 & M32
    size = len(pk.buf)
    if r4 or end <= start or start >= size or end > size:
        return neg_errno(errno.EINVAL)
    pk.data = pk.lo = start
    pk.hi = end
    return 0


@helper("msg_push_data")
def _push(m: RunState, r1: object, r2: int, r3: int, r4: int, *_: object) -> int:
    pk = _msg(m, "msg_push_data").pkt
    pk.gen += 1
    start, n = r2 & M32, r3 & M32
    if r4 or start > len(pk.buf):
        return neg_errno(errno.EINVAL)
    if n:
        pk.buf[start:start] = bytes(n)
        pk.data = pk.lo = 0
        pk.hi = len(pk.buf)
    return 0


@helper("msg_pop_data")
def _pop(m: RunState, r1: object, r2: int, r3: int, r4: int, *_: object) -> int:
    pk = _msg(m, "msg_pop_data").pkt
    pk.gen += 1
    start, n = r2 & M32, r3 & M32
    if r4 or not n or start >= len(pk.buf) or start + n > len(pk.buf):
        return neg_errno(errno.EINVAL)
    del pk.buf[start : start + n]
    pk.data = pk.lo = 0
    pk.hi = len(pk.buf)
    return 0


# ---- sock_ops ----

_SOCK_MAP_OPS = (4, 5, 11)  # ACTIVE_ESTABLISHED_CB, PASSIVE_ESTABLISHED_CB, TCP_LISTEN_CB


def _sockops(m: RunState, name: str) -> SockOpsContext:
    if not isinstance(m.ctx, SockOpsContext):
        raise Fault(f"bpf_{name} needs a sock_ops context")
    return m.ctx


def _sock_update(m: RunState, mp: Map, key: bytes, flags: int, name: str) -> int:
    """``sock_map_update_common``/``sock_hash_update_common`` with the socket of the ctx."""
    x = _sockops(m, name)
    if x.op not in _SOCK_MAP_OPS:
        return neg_errno(errno.EOPNOTSUPP)
    assert isinstance(mp, SlotMap)
    return mp.update(key, x.sock, flags) & M64


@helper("sock_hash_update")
def _sock_hash_update(m: RunState, r1: object, r2: object, r3: object, r4: int, *_: object) -> int:
    mp = map_arg(m, r2, "sock_hash_update")
    return _sock_update(m, mp, mem_arg(r3, mp.key_size, "sockhash key"), r4, "sock_hash_update")


@helper("sock_map_update")
def _sock_map_update(m: RunState, r1: object, r2: object, r3: object, r4: int, *_: object) -> int:
    mp = map_arg(m, r2, "sock_map_update")
    return _sock_update(m, mp, mem_arg(r3, mp.key_size, "sockmap key"), r4, "sock_map_update")


@helper("get_socket_cookie")
def _cookie(m: RunState, *_: object) -> int:
    return _sockops(m, "get_socket_cookie").sock.cookie


@helper("sock_ops_cb_flags_set")
def _cb_flags(m: RunState, r1: object, r2: int, *_: object) -> int:
    x = _sockops(m, "sock_ops_cb_flags_set")
    x.cb_flags = r2 & BPF_SOCK_OPS_ALL_CB_FLAGS
    return (r2 & M32) & ~BPF_SOCK_OPS_ALL_CB_FLAGS


# ---- socket lookups (XDP, tc) ----
# The interpreter has no sockets to look a tuple up in: bpf_sk_lookup_tcp/udp and
# bpf_skc_lookup_tcp read the struct bpf_sock_tuple (a fault unless tuple_size bytes are
# readable there) and return NULL, the kernel's result when no socket matches
# (net/core/filter.c __bpf_sk_lookup); a program's "no socket" path is what runs.  Run it
# on the kernel engine to exercise the paths where a socket is found.


def _sk_lookup(m: RunState, r2: object, r3: int, name: str) -> int:
    mem_arg(r2, r3 & M32, f"bpf_{name} tuple")
    return 0


@helper("sk_lookup_tcp")
def _sk_lookup_tcp(m: RunState, r1: object, r2: object, r3: int, *_: object) -> int:
    return _sk_lookup(m, r2, r3, "sk_lookup_tcp")


@helper("sk_lookup_udp")
def _sk_lookup_udp(m: RunState, r1: object, r2: object, r3: int, *_: object) -> int:
    return _sk_lookup(m, r2, r3, "sk_lookup_udp")


@helper("skc_lookup_tcp")
def _skc_lookup_tcp(m: RunState, r1: object, r2: object, r3: int, *_: object) -> int:
    return _sk_lookup(m, r2, r3, "skc_lookup_tcp")


@helper("sk_release")
def _sk_release(m: RunState, *_: object) -> int:
    return 0  # bpf_sk_release returns 0 (the reference rule is the verifier's)
