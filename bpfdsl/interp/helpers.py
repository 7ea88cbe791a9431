"""Helper functions of the userspace machine, keyed by the ids of :mod:`bpfdsl.abi.helpers`.

Each implementation takes the machine and r1..r5 and returns r0 as the kernel's helper
does (net/core/filter.c, kernel/bpf/helpers.c, net/core/sock_map.c, kernel/bpf/devmap.c):
negative errno values as 64-bit two's complement, XDP/SK actions for the redirect
helpers.  Packet-changing helpers (``pkt_changing`` in the helper table) bump the packet
region's generation, so pointers derived before the call fault like the verifier's
invalidation.  Helpers not listed here raise a Fault naming the helper.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
from collections.abc import Callable
from typing import Any

from bpfdsl.abi.fib import (
    AF_INET,
    AF_INET6,
    BPF_FIB_LOOKUP_SIZE,
    FIB_LOOKUP_FLAGS,
    FibLookupFlag,
    FibResult,
)
from bpfdsl.abi.flags import BPF_F_BROADCAST, BPF_F_EXCLUDE_INGRESS
from bpfdsl.abi.helpers import HELPERS, map_fits_helper
from bpfdsl.abi.limits import (
    BPF_MAX_LOOPS,
    MAX_TAIL_CALL_CNT,
    XDP_FRAME_SIZE,
    XDP_FRAME_STRUCT,
    XDP_METALEN_MAX,
    XDP_SHINFO_TAILROOM,
)
from bpfdsl.abi.map_types import MapType, is_devmap
from bpfdsl.abi.net import ETH_HLEN
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.interp.ctx import XdpContext
from bpfdsl.interp.maps import Map, ProgArrayMap, SlotMap
from bpfdsl.interp.memory import M32, M64, Fault, Ptr, s32
from bpfdsl.interp.state import FibRoute, FuncRef, RunState, TailCall

Impl = Callable[..., Any]


def neg_errno(e: int) -> int:
    return -e & M64


def registrar(table: dict[int, Impl]) -> Callable[[str], Callable[[Impl], Impl]]:
    """The decorator ``@helper(name)`` that enters an implementation in ``table`` under
    the id of helper ``name`` (bpfdsl.abi.helpers); each helper module has its table."""

    def helper(name: str) -> Callable[[Impl], Impl]:
        def deco(fn: Impl) -> Impl:
            table[HELPERS[name].id] = fn
            return fn

        return deco

    return helper


IMPLS: dict[int, Impl] = {}  # this module's helpers (bpfdsl.interp.machine joins the tables)
helper = registrar(IMPLS)


@functools.cache
def _fits(map_type: MapType, name: str) -> bool:
    return map_fits_helper(map_type, name)


def map_arg(m: RunState, v: object, name: str) -> Map:
    if not isinstance(v, Map):
        raise Fault(f"bpf_{name}: the map argument is not a map reference")
    if not _fits(v.map_type, name):
        raise Fault(f"bpf_{name}: map '{v.name}' of type {v.map_type.name} is not allowed")
    return v


def mem_arg(v: object, size: int, what: str) -> bytes:
    if type(v) is not Ptr:
        raise Fault(f"{what}: expected a pointer to {size} readable bytes, got a scalar")
    return v.region.read_bytes(v, size)


def _xdp(m: RunState, name: str) -> XdpContext:
    if not isinstance(m.ctx, XdpContext):
        raise Fault(f"bpf_{name} needs an XDP context")
    return m.ctx


# ---- maps ----


@helper("map_lookup_elem")
def _lookup(m: RunState, r1: object, r2: object, *_: object) -> int | Ptr:
    mp = map_arg(m, r1, "map_lookup_elem")
    r = mp.lookup(mem_arg(r2, mp.key_size, "map key"), m.env.cpu)
    return 0 if r is None else Ptr(r, 0, r.gen)


@helper("map_lookup_percpu_elem")
def _lookup_percpu(m: RunState, r1: object, r2: object, r3: int, *_: object) -> int | Ptr:
    mp = map_arg(m, r1, "map_lookup_percpu_elem")
    cpu = r3 & M32
    if cpu >= mp.ncpus:
        return 0
    r = mp.lookup(mem_arg(r2, mp.key_size, "map key"), cpu)
    return 0 if r is None else Ptr(r, 0, r.gen)


@helper("map_update_elem")
def _update(m: RunState, r1: object, r2: object, r3: object, r4: int, *_: object) -> int:
    mp = map_arg(m, r1, "map_update_elem")
    key = mem_arg(r2, mp.key_size, "map key")
    if isinstance(mp, SlotMap):
        raise Fault(f"map_update_elem on {mp.map_type.name} is not modelled")
    rc = mp.update(key, mem_arg(r3, mp.value_size, "map value"), r4, m.env.cpu)
    return rc & M64


@helper("map_delete_elem")
def _delete(m: RunState, r1: object, r2: object, *_: object) -> int:
    mp = map_arg(m, r1, "map_delete_elem")
    return mp.delete(mem_arg(r2, mp.key_size, "map key")) & M64


# ---- time, randomness, cpu ----


@helper("ktime_get_ns")
def _ktime(m: RunState, *_: object) -> int:
    return m.env.now_ns()


IMPLS[HELPERS["ktime_get_boot_ns"].id] = _ktime
IMPLS[HELPERS["ktime_get_coarse_ns"].id] = _ktime


@helper("jiffies64")
def _jiffies(m: RunState, *_: object) -> int:
    return m.env.now_ns() // 4_000_000  # CONFIG_HZ=250


@helper("get_prandom_u32")
def _prandom(m: RunState, *_: object) -> int:
    return m.env.rng.getrandbits(32)


@helper("get_smp_processor_id")
def _cpu(m: RunState, *_: object) -> int:
    return m.env.cpu


@helper("get_numa_node_id")
def _numa(m: RunState, *_: object) -> int:
    return 0


@helper("trace_printk")
def _printk(m: RunState, r1: object, r2: int, *_: object) -> int:
    text = mem_arg(r1, r2 & M32, "trace_printk format")
    m.trace.append(text.split(b"\0", 1)[0].decode("latin-1"))
    return len(text) & M64


# ---- checksums ----


def _sum32(data: bytes, seed: int) -> int:
    """x86_64 ``csum_partial``: 32-bit ones' complement sum of little-endian words."""
    s = seed + sum(int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data), 4))
    while s >> 32:
        s = (s & M32) + (s >> 32)
    return s


def _fold16(v: int) -> int:
    """``csum_from32to16``: the kernel folds bpf_csum_diff's result to 16 bits."""
    v = (v & 0xFFFF) + (v >> 16)
    return (v & 0xFFFF) + (v >> 16)


@helper("csum_diff")
def _csum_diff(m: RunState, r1: object, r2: int, r3: object, r4: int, r5: int) -> int:
    fsz, tsz, seed = r2 & M32, r4 & M32, r5 & M32
    if (fsz | tsz) & 3 or fsz > 512 or tsz > 512:
        return neg_errno(errno.EINVAL)
    frm = mem_arg(r1, fsz, "csum_diff from") if fsz else b""
    to = mem_arg(r3, tsz, "csum_diff to") if tsz else b""
    ret = seed
    if fsz and tsz:
        a, b = _sum32(to, seed), _sum32(frm, 0)
        ret = _sum32((~b & M32).to_bytes(4, "little"), a)
    elif tsz:
        ret = _sum32(to, seed)
    elif fsz:
        ret = ~_sum32(frm, ~seed & M32) & M32
    return _fold16(ret)


# ---- XDP ----


@helper("redirect")
def _redirect(m: RunState, r1: int, r2: int, *_: object) -> int:
    _xdp(m, "redirect")
    if r2:
        return XdpAction.ABORTED
    m.redirect = ("ifindex", r1 & M32, 0)
    return XdpAction.REDIRECT


@helper("redirect_map")
def _redirect_map(m: RunState, r1: object, r2: int, r3: int, *_: object) -> int:
    mp = map_arg(m, r1, "redirect_map")
    flags = r3
    extra = BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS if is_devmap(mp.map_type) else 0
    if flags & ~(3 | extra):
        m.redirect, m.redirect_miss = None, (mp.name, r2 & M32, flags, "flags")
        return XdpAction.ABORTED
    key = (r2 & M32).to_bytes(4, "little")
    assert isinstance(mp, SlotMap)
    if mp.target(key) is None and not flags & BPF_F_BROADCAST:
        m.redirect, m.redirect_miss = None, (mp.name, r2 & M32, flags, "empty")
        return flags & 3  # __bpf_xdp_redirect_map: the low bits of flags are the action
    m.redirect, m.redirect_miss = (mp.name, r2 & M32, flags), None
    return XdpAction.REDIRECT


# bpf_spin_lock / bpf_spin_unlock: one program runs at a time in the interpreter, so the
# lock is never contended; the rules of holding it are the verifier's (checker.refs)
@helper("spin_lock")
def _spin_lock(m: RunState, r1: object, *_: object) -> int:
    mem_arg(r1, 4, "bpf_spin_lock")  # struct bpf_spin_lock (a u32) in a map value
    return 0


@helper("spin_unlock")
def _spin_unlock(m: RunState, r1: object, *_: object) -> int:
    mem_arg(r1, 4, "bpf_spin_unlock")
    return 0


@helper("loop")
def _loop(m: RunState, r1: int, r2: object, r3: object, r4: int, *_: object) -> int:
    """bpf_loop (kernel/bpf/bpf_iter.c): call the callback with (i, ctx) for i = 0..n-1
    until it returns 1; the number of calls, -EINVAL for flags, -E2BIG past 8M loops."""
    if r4:
        return neg_errno(errno.EINVAL)
    n = r1 & M32
    if n > BPF_MAX_LOOPS:
        return neg_errno(errno.E2BIG)
    if not isinstance(r2, FuncRef):
        raise Fault("bpf_loop: the callback is not a function address (ld_imm64 func)")
    for i in range(n):
        ret = m.call_function(r2.target, i, r3)
        if type(ret) is not int:
            raise Fault("bpf_loop: the callback returned a pointer")
        if ret:
            return i + 1
    return n


@helper("tail_call")
def _tail_call(m: RunState, r1: object, r2: object, r3: int, *_: object) -> int:
    """bpf_tail_call: jump to the program in slot r3 of prog_array r2 (never returns);
    an empty slot, or MAX_TAIL_CALL_CNT tail calls made, fall through."""
    pa = map_arg(m, r2, "tail_call")
    assert isinstance(pa, ProgArrayMap)
    prog = pa.program(r3 & M32)
    if prog is None or m.tail_calls >= MAX_TAIL_CALL_CNT:
        return 0
    m.tail_calls += 1
    raise TailCall(prog)


@helper("xdp_adjust_head")
def _adjust_head(m: RunState, r1: object, r2: int, *_: object) -> int:
    x = _xdp(m, "xdp_adjust_head")
    pk = x.pkt
    pk.gen += 1
    off = s32(r2)
    metalen = pk.data - pk.lo
    new = pk.data + off
    if new < XDP_FRAME_STRUCT + metalen or new > pk.hi - ETH_HLEN:
        return neg_errno(errno.EINVAL)
    if metalen:
        pk.buf[pk.lo + off : pk.lo + off + metalen] = pk.buf[pk.lo : pk.data]
    pk.lo += off
    pk.data = new
    return 0


@helper("xdp_adjust_tail")
def _adjust_tail(m: RunState, r1: object, r2: int, *_: object) -> int:
    x = _xdp(m, "xdp_adjust_tail")
    pk = x.pkt
    pk.gen += 1
    off = s32(r2)
    if x.frags:
        return _frags_tail(x, off)
    new = pk.hi + off
    if new > XDP_FRAME_SIZE - XDP_SHINFO_TAILROOM or new < pk.data + ETH_HLEN:
        return neg_errno(errno.EINVAL)
    if off > 0:
        pk.buf[pk.hi : new] = bytes(off)
    pk.hi = new
    return 0


def _frags_tail(x: XdpContext, off: int) -> int:
    """bpf_xdp_frags_increase_tail / bpf_xdp_frags_shrink_tail (net/core/filter.c)."""
    if off >= 0:
        last = x.frags[-1]
        if off > XDP_FRAME_SIZE - len(last):  # frag tailroom: frag_size (a page) - size
            return neg_errno(errno.EINVAL)
        last += bytes(off)
        return 0
    shrink = -off
    if shrink > x.buff_len() - ETH_HLEN:
        return neg_errno(errno.EINVAL)
    while x.frags and shrink > 0:
        cut = min(shrink, len(x.frags[-1]))
        shrink -= cut
        if cut == len(x.frags[-1]):
            x.frags.pop()
        else:
            del x.frags[-1][len(x.frags[-1]) - cut :]
    if not x.frags:
        x.pkt.hi -= shrink
    return 0


@helper("xdp_adjust_meta")
def _adjust_meta(m: RunState, r1: object, r2: int, *_: object) -> int:
    x = _xdp(m, "xdp_adjust_meta")
    pk = x.pkt
    pk.gen += 1
    meta = pk.lo + s32(r2)
    metalen = pk.data - meta
    if meta < XDP_FRAME_STRUCT or meta > pk.data:
        return neg_errno(errno.EINVAL)
    if metalen & 3 or metalen > XDP_METALEN_MAX:
        return neg_errno(errno.EACCES)
    pk.lo = meta
    return 0


# ---- routing ----


def _fib_route(m: RunState, family: int, dst: bytes) -> FibRoute | None:
    """The longest prefix of ``m.env.fib_routes`` holding ``dst`` (4 or 16 bytes), or None."""
    addr = ipaddress.ip_address(dst)
    best = None
    for r in m.env.fib_routes:
        net = ipaddress.ip_network(r.prefix, strict=False)
        if net.version == addr.version and addr in net:
            if best is None or net.prefixlen > best[0]:
                best = (net.prefixlen, r)
    return None if best is None else best[1]


@helper("fib_lookup")
def _fib_lookup(m: RunState, r1: object, r2: Ptr, r3: int, r4: int, *_: object) -> int:
    """``bpf_xdp_fib_lookup`` (net/core/filter.c) against the routes of ``m.env``: -EINVAL
    for unknown flags or a short struct, -EAFNOSUPPORT for a family other than AF_INET(6);
    no route: BPF_FIB_LKUP_RET_NOT_FWDED; a route: ifindex, smac, dmac set and SUCCESS, or
    NO_NEIGH where the route has no neighbour (dmac None), as the kernel does."""
    if r4 & ~FIB_LOOKUP_FLAGS or (r3 & M32) < BPF_FIB_LOOKUP_SIZE:
        return neg_errno(errno.EINVAL)
    raw = bytearray(mem_arg(r2, BPF_FIB_LOOKUP_SIZE, "fib_lookup params"))
    family = raw[0]
    if family not in (AF_INET, AF_INET6):
        return neg_errno(errno.EAFNOSUPPORT)
    dst = bytes(raw[32:36] if family == AF_INET else raw[32:48])
    route = _fib_route(m, family, dst)
    if route is None:
        return FibResult.NOT_FWDED
    raw[8:12] = (route.ifindex & M32).to_bytes(4, "little")
    if not r4 & FibLookupFlag.SKIP_NEIGH:
        if route.dmac is None:
            r2.region.write_bytes(r2, bytes(raw))
            return FibResult.NO_NEIGH
        raw[52:58], raw[58:64] = route.smac, route.dmac
    r2.region.write_bytes(r2, bytes(raw))
    return FibResult.SUCCESS


@helper("xdp_get_buff_len")
def _buff_len(m: RunState, *_: object) -> int:
    return _xdp(m, "xdp_get_buff_len").buff_len()


def _xdp_span(m: RunState, name: str, r2: int, r4: int) -> tuple[XdpContext, int, int] | int:
    x = _xdp(m, name)
    off, n = r2 & M32, r4 & M32
    if off > 0xFFFF or n > 0xFFFF:
        return neg_errno(errno.EFAULT)
    if off + n > x.buff_len():
        return neg_errno(errno.EINVAL)
    return x, off, n


def _whole(x: XdpContext) -> bytearray:
    pk = x.pkt
    return pk.buf[pk.data : pk.hi] + b"".join(x.frags)


@helper("xdp_load_bytes")
def _load_bytes(m: RunState, r1: object, r2: int, r3: object, r4: int, *_: object) -> int:
    span = _xdp_span(m, "xdp_load_bytes", r2, r4)
    if isinstance(span, int):
        return span
    x, off, n = span
    if type(r3) is not Ptr:
        raise Fault("bpf_xdp_load_bytes: r3 is not a pointer")
    r3.region.write_bytes(r3, bytes(_whole(x)[off : off + n]))
    return 0


@helper("xdp_store_bytes")
def _store_bytes(m: RunState, r1: object, r2: int, r3: object, r4: int, *_: object) -> int:
    span = _xdp_span(m, "xdp_store_bytes", r2, r4)
    if isinstance(span, int):
        return span
    x, off, n = span
    data = mem_arg(r3, n, "xdp_store_bytes source")
    pk = x.pkt
    lin = pk.hi - pk.data
    for i, b in enumerate(data, start=off):  # linear part, then frags in order
        if i < lin:
            pk.buf[pk.data + i] = b
            continue
        i -= lin
        for f in x.frags:
            if i < len(f):
                f[i] = b
                break
            i -= len(f)
    return 0
