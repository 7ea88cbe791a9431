"""Event helpers of the userspace machine: ring buffer output/reserve/submit/discard and
perf event output, as kernel/bpf/ringbuf.c and net/core/filter.c
(``bpf_xdp_event_output``) implement them, in :data:`IMPLS` (:mod:`bpfdsl.interp.machine`
joins it with the other helper tables).  Records land in the map's
:class:`~bpfdsl.interp.maps.EventMap` for user space to :meth:`~bpfdsl.interp.maps.EventMap.drain`.
"""

from __future__ import annotations

import errno

from bpfdsl.abi.flags import (
    BPF_F_CTXLEN_MASK,
    BPF_F_CURRENT_CPU,
    BPF_F_INDEX_MASK,
    BPF_RB_FORCE_WAKEUP,
    BPF_RB_NO_WAKEUP,
)
from bpfdsl.interp.ctx import XdpContext
from bpfdsl.interp.helpers import Impl, map_arg, mem_arg, neg_errno, registrar
from bpfdsl.interp.maps import EventMap, Reservation
from bpfdsl.interp.memory import M64, Fault, Ptr
from bpfdsl.interp.state import RunState

IMPLS: dict[int, Impl] = {}
helper = registrar(IMPLS)
_RB_FLAGS = BPF_RB_NO_WAKEUP | BPF_RB_FORCE_WAKEUP


def _events(m: RunState, v: object, name: str) -> EventMap:
    mp = map_arg(m, v, name)
    assert isinstance(mp, EventMap)
    return mp


@helper("ringbuf_output")
def _rb_output(m: RunState, r1: object, r2: object, r3: int, r4: int, *_: object) -> int:
    mp = _events(m, r1, "ringbuf_output")
    if r4 & ~_RB_FLAGS:
        return neg_errno(errno.EINVAL)
    data = mem_arg(r2, r3, "ringbuf_output data") if r3 else b""
    return mp.output(data, m.env.cpu) & M64


@helper("ringbuf_reserve")
def _rb_reserve(m: RunState, r1: object, r2: int, r3: int, *_: object) -> int | Ptr:
    mp = _events(m, r1, "ringbuf_reserve")
    if r3:  # flags must be 0 (bpf_ringbuf_reserve: NULL otherwise)
        return 0
    r = mp.reserve(r2, m.env.cpu)
    return 0 if r is None else Ptr(r, 0, r.gen)


def _rb_end(m: RunState, r1: object, r2: int, name: str, submit: bool) -> int:
    if type(r1) is not Ptr or not isinstance(r1.region, Reservation) or r1.off != 0:
        raise Fault(f"bpf_{name}: the argument is not a ring buffer reservation")
    if r1.region.owner.end(r1.region, submit):
        return 0
    raise Fault(f"bpf_{name}: this reservation was submitted or discarded already")


@helper("ringbuf_submit")
def _rb_submit(m: RunState, r1: object, r2: int, *_: object) -> int:
    return _rb_end(m, r1, r2, "ringbuf_submit", True)


@helper("ringbuf_discard")
def _rb_discard(m: RunState, r1: object, r2: int, *_: object) -> int:
    return _rb_end(m, r1, r2, "ringbuf_discard", False)


@helper("perf_event_output")
def _perf_output(m: RunState, r1: object, r2: object, r3: int, r4: object, r5: int) -> int:
    """bpf_xdp_event_output: the record, then ``flags >> 32`` bytes of the packet
    (-EFAULT when the packet is shorter), to the slot of the current CPU."""
    mp = _events(m, r2, "perf_event_output")
    if r3 & ~(BPF_F_CTXLEN_MASK | BPF_F_INDEX_MASK):
        return neg_errno(errno.EINVAL)
    index = r3 & BPF_F_INDEX_MASK
    cpu = m.env.cpu if index == BPF_F_CURRENT_CPU else index
    if cpu != m.env.cpu and (not mp.max_entries or cpu < mp.max_entries) and cpu in mp.readers:
        return neg_errno(errno.EOPNOTSUPP)  # another CPU's event (__bpf_perf_event_output)
    data = mem_arg(r4, r5, "perf_event_output data") if r5 else b""
    n = r3 >> 32
    if n:
        ctx = m.ctx
        if not isinstance(ctx, XdpContext):
            return neg_errno(errno.EINVAL)
        pkt = ctx.data_out()[ctx.data - ctx.data_meta :]
        if n > ctx.buff_len():
            return neg_errno(errno.EFAULT)
        data += pkt[:n]
    return mp.output(data, cpu) & M64
