"""Flags of bpf(2) attributes, helpers and netlink XDP (include/uapi/linux/bpf.h,
linux/if_link.h): map update, map_flags, prog_flags, redirect, perf/ring buffer output,
test run, attach; plus name and tag sizes.  Checked against this machine's
/sys/kernel/btf/vmlinux by tests/abi/test_uapi.py.
"""

from __future__ import annotations

from enum import IntFlag
from typing import Final

BPF_ANY = 0  # map update: create or replace
BPF_NOEXIST = 1  # map update: create only
BPF_EXIST = 2  # map update: replace only
BPF_F_LOCK = 4

BPF_F_INGRESS = 1 << 0  # redirect helpers: to the ingress path of the target
BPF_F_BROADCAST = 1 << 3  # redirect_map on devmap: every entry
BPF_F_EXCLUDE_INGRESS = 1 << 4  # with BPF_F_BROADCAST: not the ingress device
XDP_REDIRECT_FALLBACK_MASK = 0x3  # low bits of redirect_map flags: action when the slot is empty

BPF_F_NO_PREALLOC: Final = 1 << 0  # map_flags (hash maps, required for lpm_trie)
BPF_F_RDONLY = 1 << 3
BPF_F_WRONLY = 1 << 4
BPF_F_RDONLY_PROG: Final = 1 << 7  # map_flags for .rodata
BPF_F_MMAPABLE = 1 << 10
BPF_F_NO_COMMON_LRU = 1 << 1  # map_flags: LRU hash maps, one LRU list per CPU
BPF_F_NUMA_NODE = 1 << 2  # map_flags: numa_node is valid
BPF_F_ZERO_SEED = 1 << 6  # map_flags: hash seed 0 (tests only, CAP_SYS_ADMIN)
BPF_F_WRONLY_PROG: Final = 1 << 8
BPF_F_PRESERVE_ELEMS = 1 << 11  # map_flags: perf event arrays only
BPF_F_INNER_MAP = 1 << 12  # map_flags: array used as an inner map of different sizes
BPF_F_ACCESS_MASK = BPF_F_RDONLY | BPF_F_RDONLY_PROG | BPF_F_WRONLY | BPF_F_WRONLY_PROG

BPF_F_XDP_HAS_FRAGS = 1 << 5  # prog_flags for xdp.frags sections
# prog_flags: bound to the device of prog_ifindex, not offloaded (6.3+; the XDP metadata
# kfuncs then call that driver's xdp_metadata_ops; include/uapi/linux/bpf.h)
BPF_F_XDP_DEV_BOUND_ONLY = 1 << 6


# bpf_perf_event_output flags (bpf.h): the low 32 bits index the perf event array, the
# upper 32 bits (BPF_F_CTXLEN_MASK) are, for XDP and skb programs, the number of packet
# bytes the kernel appends to the record (bpf_xdp_event_output, net/core/filter.c)
BPF_F_INDEX_MASK = 0xFFFFFFFF
BPF_F_CURRENT_CPU = BPF_F_INDEX_MASK  # the array slot of the CPU the program runs on
BPF_F_CTXLEN_MASK = 0xFFFFFFFF << 32
# bpf_ringbuf_output/submit/discard flags (bpf.h): when to wake up a waiting consumer
BPF_RB_NO_WAKEUP = 1 << 0
BPF_RB_FORCE_WAKEUP = 1 << 1
# ring buffer record header (bpf.h; kernel/bpf/ringbuf.c): u32 len with these two bits on
# top, u32 page offset; records start 8-byte aligned
BPF_RINGBUF_BUSY_BIT = 1 << 31
BPF_RINGBUF_DISCARD_BIT = 1 << 30
BPF_RINGBUF_HDR_SZ = 8
BPF_F_TEST_RUN_ON_CPU = 1 << 0
BPF_F_TEST_XDP_LIVE_FRAMES = 1 << 1
BPF_F_ALLOW_OVERRIDE = 1 << 0  # prog attach (cgroup): a descendant may override
BPF_F_ALLOW_MULTI = 1 << 1  # prog attach (cgroup): more programs may attach
BPF_F_REPLACE = 1 << 2  # prog attach


class XdpFlags(IntFlag):
    """``XDP_FLAGS_*`` from linux/if_link.h (netlink IFLA_XDP_FLAGS and link_create.flags)."""

    NONE = 0
    UPDATE_IF_NOEXIST = 1 << 0
    SKB_MODE = 1 << 1
    DRV_MODE = 1 << 2
    HW_MODE = 1 << 3
    REPLACE = 1 << 4


BPF_OBJ_NAME_LEN = 16  # prog_name / map_name including the NUL
BPF_TAG_SIZE = 8
