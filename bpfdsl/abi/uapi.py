"""Kernel ABI constants (leaf module): the one place for numbers from linux/bpf.h.

Names are the kernel's minus their prefix (``BPF_PROG_TYPE_XDP`` -> ``ProgramType.XDP``).
Values are from include/uapi/linux/bpf.h and linux/if_link.h (checked against this
machine's /sys/kernel/btf/vmlinux by tests/abi/test_uapi.py).

Also here: the program-kind table :data:`PROGRAM_KINDS` (language keyword -> ELF section,
program type, expected attach type, context struct, allowed return values), modelled on
libbpf's ``section_defs``; the loader reads section names through :func:`kind_for_section`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass
from enum import IntEnum, IntFlag
from typing import Final


class BpfCmd(IntEnum):
    """``enum bpf_cmd``: the first argument of bpf(2)."""

    MAP_CREATE = 0
    MAP_LOOKUP_ELEM = 1
    MAP_UPDATE_ELEM = 2
    MAP_DELETE_ELEM = 3
    MAP_GET_NEXT_KEY = 4
    PROG_LOAD = 5
    OBJ_PIN = 6
    OBJ_GET = 7
    PROG_ATTACH = 8
    PROG_DETACH = 9
    PROG_TEST_RUN = 10
    PROG_GET_NEXT_ID = 11
    MAP_GET_NEXT_ID = 12
    PROG_GET_FD_BY_ID = 13
    MAP_GET_FD_BY_ID = 14
    OBJ_GET_INFO_BY_FD = 15
    PROG_QUERY = 16
    RAW_TRACEPOINT_OPEN = 17
    BTF_LOAD = 18
    BTF_GET_FD_BY_ID = 19
    TASK_FD_QUERY = 20
    MAP_LOOKUP_AND_DELETE_ELEM = 21
    MAP_FREEZE = 22
    BTF_GET_NEXT_ID = 23
    MAP_LOOKUP_BATCH = 24
    MAP_LOOKUP_AND_DELETE_BATCH = 25
    MAP_UPDATE_BATCH = 26
    MAP_DELETE_BATCH = 27
    LINK_CREATE = 28
    LINK_UPDATE = 29
    LINK_GET_FD_BY_ID = 30
    LINK_GET_NEXT_ID = 31
    ENABLE_STATS = 32
    ITER_CREATE = 33
    LINK_DETACH = 34
    PROG_BIND_MAP = 35


class MapType(IntEnum):
    """``enum bpf_map_type``."""

    UNSPEC = 0
    HASH = 1
    ARRAY = 2
    PROG_ARRAY = 3
    PERF_EVENT_ARRAY = 4
    PERCPU_HASH = 5
    PERCPU_ARRAY = 6
    STACK_TRACE = 7
    CGROUP_ARRAY = 8
    LRU_HASH = 9
    LRU_PERCPU_HASH = 10
    LPM_TRIE = 11
    ARRAY_OF_MAPS = 12
    HASH_OF_MAPS = 13
    DEVMAP = 14
    SOCKMAP = 15
    CPUMAP = 16
    XSKMAP = 17
    SOCKHASH = 18
    CGROUP_STORAGE = 19
    REUSEPORT_SOCKARRAY = 20
    PERCPU_CGROUP_STORAGE = 21
    QUEUE = 22
    STACK = 23
    SK_STORAGE = 24
    DEVMAP_HASH = 25
    STRUCT_OPS = 26
    RINGBUF = 27
    INODE_STORAGE = 28
    TASK_STORAGE = 29
    BLOOM_FILTER = 30
    USER_RINGBUF = 31
    CGRP_STORAGE = 32
    ARENA = 33


# ---- map-type properties: one set per property (kernel source named), a predicate each ----
# Predicates take the kernel's number (an int or a MapType) and are False for unknown types.

PERCPU_MAP_TYPES = frozenset(
    {
        MapType.PERCPU_HASH,
        MapType.PERCPU_ARRAY,
        MapType.LRU_PERCPU_HASH,
        MapType.PERCPU_CGROUP_STORAGE,
    }
)
"""One value per possible CPU: user space reads and writes ``round_up(value_size, 8) *
possible CPUs`` bytes (kernel/bpf/syscall.c ``bpf_map_value_size``); programs see their CPU's."""

HASH_MAP_TYPES = frozenset(
    {MapType.HASH, MapType.PERCPU_HASH, MapType.LRU_HASH, MapType.LRU_PERCPU_HASH}
)
"""Hash tables of values (kernel/bpf/hashtab.c ``htab_map_ops`` & co.): an update creates
the entry (``BPF_NOEXIST`` inserts), delete removes it."""

LRU_MAP_TYPES = frozenset({MapType.LRU_HASH, MapType.LRU_PERCPU_HASH})
"""Hash tables that evict the least recently used entry when full (kernel/bpf/bpf_lru_list.c)."""

ARRAY_MAP_TYPES = frozenset({MapType.ARRAY, MapType.PERCPU_ARRAY})
"""Arrays of values (kernel/bpf/arraymap.c ``array_map_ops``, ``percpu_array_map_ops``):
every index exists from creation, zero-filled; delete fails with EINVAL."""

INDEXED_MAP_TYPES = frozenset(
    {
        MapType.ARRAY,
        MapType.PERCPU_ARRAY,
        MapType.PROG_ARRAY,
        MapType.PERF_EVENT_ARRAY,
        MapType.CGROUP_ARRAY,
        MapType.ARRAY_OF_MAPS,
        MapType.DEVMAP,
        MapType.SOCKMAP,
        MapType.CPUMAP,
        MapType.XSKMAP,
        MapType.REUSEPORT_SOCKARRAY,
    }
)
"""Keys are u32 indexes below ``max_entries`` (the array-backed maps: kernel/bpf/arraymap.c,
devmap.c ``dev_map_ops``, cpumap.c, xskmap.c, net/core/sock_map.c ``sock_map_ops``,
net/core/sock_reuseport.c); their hash-keyed siblings (DEVMAP_HASH, SOCKHASH) are not."""

DEVMAP_TYPES = frozenset({MapType.DEVMAP, MapType.DEVMAP_HASH})
"""Maps of devices (kernel/bpf/devmap.c): ``struct bpf_devmap_val`` values, read-only for
programs (``dev_map_alloc`` sets BPF_F_RDONLY_PROG), broadcast redirect flags."""

SOCK_MAP_TYPES = frozenset({MapType.SOCKMAP, MapType.SOCKHASH})
"""Maps of sockets for sk_msg/sk_skb redirects (net/core/sock_map.c)."""

REDIRECT_MAP_TYPES = frozenset(
    {MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP}
)
"""Targets of ``bpf_redirect_map`` from XDP (kernel/bpf/verifier.c
``check_map_func_compatibility``, BPF_FUNC_redirect_map)."""

SOCKET_MAP_TYPES = frozenset({MapType.XSKMAP}) | SOCK_MAP_TYPES
"""Values are sockets: user space stores a socket fd, a program's lookup gives an opaque
socket reference (xskmap: ``struct bpf_xdp_sock``, only ``queue_id`` readable)."""

MAP_IN_MAP_TYPES = frozenset({MapType.ARRAY_OF_MAPS, MapType.HASH_OF_MAPS})
"""Values are inner maps (kernel/bpf/map_in_map.c); the definition names an inner map."""

SIZE_ONLY_MAP_TYPES: frozenset[int] = frozenset(
    MapType[n]
    for n in "PERF_EVENT_ARRAY CGROUP_ARRAY STACK_TRACE ARRAY_OF_MAPS HASH_OF_MAPS DEVMAP "
    "DEVMAP_HASH CPUMAP XSKMAP SOCKMAP SOCKHASH QUEUE STACK ARENA".split()
)
"""Map types the kernel creates only without BTF key/value types (``map_check_no_btf``, or
no ``map_check_btf`` for keyless maps; the list libbpf's ``bpf_object__create_map`` drops
the BTF ids for): libbpf-style C declares them with ``__uint(key_size, N)`` /
``__uint(value_size, N)``."""


def is_percpu(map_type: int) -> bool:
    """Values are per CPU (:data:`PERCPU_MAP_TYPES`)."""
    return map_type in PERCPU_MAP_TYPES


def is_hash(map_type: int) -> bool:
    """A hash table of values whose entries updates create (:data:`HASH_MAP_TYPES`)."""
    return map_type in HASH_MAP_TYPES


def is_lru(map_type: int) -> bool:
    """An LRU hash table (:data:`LRU_MAP_TYPES`)."""
    return map_type in LRU_MAP_TYPES


def is_array(map_type: int) -> bool:
    """A preallocated array of values (:data:`ARRAY_MAP_TYPES`)."""
    return map_type in ARRAY_MAP_TYPES


def is_indexed(map_type: int) -> bool:
    """Keys are u32 indexes below max_entries (:data:`INDEXED_MAP_TYPES`)."""
    return map_type in INDEXED_MAP_TYPES


def is_devmap(map_type: int) -> bool:
    """DEVMAP or DEVMAP_HASH (:data:`DEVMAP_TYPES`)."""
    return map_type in DEVMAP_TYPES


def is_sockmap(map_type: int) -> bool:
    """SOCKMAP or SOCKHASH (:data:`SOCK_MAP_TYPES`)."""
    return map_type in SOCK_MAP_TYPES


def holds_sockets(map_type: int) -> bool:
    """Values are sockets (:data:`SOCKET_MAP_TYPES`)."""
    return map_type in SOCKET_MAP_TYPES


def lookup_is_readonly(map_type: int) -> bool:
    """A program may not write through its ``bpf_map_lookup_elem`` result: devmap values
    (``dev_map_alloc`` sets BPF_F_RDONLY_PROG) and socket references (:data:`SOCKET_MAP_TYPES`)."""
    return map_type in DEVMAP_TYPES or map_type in SOCKET_MAP_TYPES


def takes_btf_key_value(map_type: int) -> bool:
    """The kernel accepts BTF key/value type ids for it (not in :data:`SIZE_ONLY_MAP_TYPES`)."""
    return map_type not in SIZE_ONLY_MAP_TYPES


def is_map_in_map(map_type: int) -> bool:
    """ARRAY_OF_MAPS or HASH_OF_MAPS (:data:`MAP_IN_MAP_TYPES`)."""
    return map_type in MAP_IN_MAP_TYPES


class ProgramType(IntEnum):
    """``enum bpf_prog_type``."""

    UNSPEC = 0
    SOCKET_FILTER = 1
    KPROBE = 2
    SCHED_CLS = 3
    SCHED_ACT = 4
    TRACEPOINT = 5
    XDP = 6
    PERF_EVENT = 7
    CGROUP_SKB = 8
    CGROUP_SOCK = 9
    LWT_IN = 10
    LWT_OUT = 11
    LWT_XMIT = 12
    SOCK_OPS = 13
    SK_SKB = 14
    CGROUP_DEVICE = 15
    SK_MSG = 16
    RAW_TRACEPOINT = 17
    CGROUP_SOCK_ADDR = 18
    LWT_SEG6LOCAL = 19
    LIRC_MODE2 = 20
    SK_REUSEPORT = 21
    FLOW_DISSECTOR = 22
    CGROUP_SYSCTL = 23
    RAW_TRACEPOINT_WRITABLE = 24
    CGROUP_SOCKOPT = 25
    TRACING = 26
    STRUCT_OPS = 27
    EXT = 28
    LSM = 29
    SK_LOOKUP = 30
    SYSCALL = 31
    NETFILTER = 32


class AttachType(IntEnum):
    """``enum bpf_attach_type`` (the subset networking programs use, values as in bpf.h)."""

    CGROUP_INET_INGRESS = 0
    CGROUP_INET_EGRESS = 1
    CGROUP_INET_SOCK_CREATE = 2
    CGROUP_SOCK_OPS = 3
    SK_SKB_STREAM_PARSER = 4
    SK_SKB_STREAM_VERDICT = 5
    CGROUP_DEVICE = 6
    SK_MSG_VERDICT = 7
    FLOW_DISSECTOR = 17
    XDP_DEVMAP = 33
    XDP_CPUMAP = 35
    SK_LOOKUP = 36
    XDP = 37
    SK_SKB_VERDICT = 38
    TCX_INGRESS = 46
    TCX_EGRESS = 47


class LinkType(IntEnum):
    """``enum bpf_link_type`` (``bpf_link_info.type``)."""

    UNSPEC = 0
    RAW_TRACEPOINT = 1
    TRACING = 2
    CGROUP = 3
    ITER = 4
    NETNS = 5
    XDP = 6
    PERF_EVENT = 7
    KPROBE_MULTI = 8
    STRUCT_OPS = 9
    NETFILTER = 10
    TCX = 11
    UPROBE_MULTI = 12
    NETKIT = 13
    SOCKMAP = 14


class XdpAction(IntEnum):
    """``enum xdp_action``: XDP program return values."""

    ABORTED = 0
    DROP = 1
    PASS = 2
    TX = 3
    REDIRECT = 4


class SkAction(IntEnum):
    """``enum sk_action``: sk_msg / sk_skb verdicts."""

    DROP = 0
    PASS = 1


class SockOpsOp(IntEnum):
    """``BPF_SOCK_OPS_*`` values of ``bpf_sock_ops.op``."""

    VOID = 0
    TIMEOUT_INIT = 1
    RWND_INIT = 2
    TCP_CONNECT_CB = 3
    ACTIVE_ESTABLISHED_CB = 4
    PASSIVE_ESTABLISHED_CB = 5
    NEEDS_ECN = 6
    BASE_RTT = 7
    RTO_CB = 8
    RETRANS_CB = 9
    STATE_CB = 10
    TCP_LISTEN_CB = 11
    RTT_CB = 12
    PARSE_HDR_OPT_CB = 13
    HDR_OPT_LEN_CB = 14
    WRITE_HDR_OPT_CB = 15


class TcpState(IntEnum):
    """``BPF_TCP_*``: ``bpf_sock_ops.state`` (the kernel's TCP_* states, include/uapi/linux/bpf.h)."""

    ESTABLISHED = 1
    SYN_SENT = 2
    SYN_RECV = 3
    FIN_WAIT1 = 4
    FIN_WAIT2 = 5
    TIME_WAIT = 6
    CLOSE = 7
    CLOSE_WAIT = 8
    LAST_ACK = 9
    LISTEN = 10
    CLOSING = 11
    NEW_SYN_RECV = 12
    BOUND_INACTIVE = 13


class SockOpsCbFlag(IntFlag):
    """``BPF_SOCK_OPS_*_CB_FLAG``: callbacks ``bpf_sock_ops_cb_flags_set`` turns on
    (``bpf_sock_ops.bpf_sock_ops_cb_flags``; include/uapi/linux/bpf.h)."""

    RTO = 1 << 0
    RETRANS = 1 << 1
    STATE = 1 << 2
    RTT = 1 << 3
    PARSE_ALL_HDR_OPT = 1 << 4
    PARSE_UNKNOWN_HDR_OPT = 1 << 5
    WRITE_HDR_OPT = 1 << 6


BPF_SOCK_OPS_ALL_CB_FLAGS: Final = 0x7F  # include/uapi/linux/bpf.h: every SockOpsCbFlag


# ---- flags (bpf.h / if_link.h) ----
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

# include/linux/bpf.h (kernel-internal): the verifier proves a packet range from
# ``p + k > pkt_end`` only while p's variable part (umax) plus its fixed offset stays
# within this many bytes of the packet start (find_good_pkt_pointers, kernel/bpf/verifier.c)
MAX_PACKET_OFF = 0xFFFF

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

# ---- instruction encoding (linux/bpf_common.h, linux/bpf.h) ----
# Final: one name per line, so mypy knows each value and the compiled checker (mypyc)
# uses the number itself instead of looking the name up in this module at run time.
# class (low 3 bits of the opcode)
BPF_LD: Final = 0
BPF_LDX: Final = 1
BPF_ST: Final = 2
BPF_STX: Final = 3
BPF_ALU: Final = 4
BPF_JMP: Final = 5
BPF_JMP32: Final = 6
BPF_ALU64: Final = 7
# size (bits 3-4, load/store)
BPF_W: Final = 0x00
BPF_H: Final = 0x08
BPF_B: Final = 0x10
BPF_DW: Final = 0x18
# mode (bits 5-7, load/store)
BPF_IMM: Final = 0x00
BPF_ABS: Final = 0x20
BPF_IND: Final = 0x40
BPF_MEM: Final = 0x60
BPF_MEMSX: Final = 0x80
BPF_ATOMIC: Final = 0xC0
# source (bit 3, alu/jmp)
BPF_K: Final = 0x00
BPF_X: Final = 0x08
# BPF_END source bit
BPF_TO_LE: Final = 0x00
BPF_TO_BE: Final = 0x08
# alu ops (bits 4-7)
BPF_ADD: Final = 0x00
BPF_SUB: Final = 0x10
BPF_MUL: Final = 0x20
BPF_DIV: Final = 0x30
BPF_OR: Final = 0x40
BPF_AND: Final = 0x50
BPF_LSH: Final = 0x60
BPF_RSH: Final = 0x70
BPF_NEG: Final = 0x80
BPF_MOD: Final = 0x90
BPF_XOR: Final = 0xA0
BPF_MOV: Final = 0xB0
BPF_ARSH: Final = 0xC0
BPF_END: Final = 0xD0
# jmp ops (bits 4-7)
BPF_JA: Final = 0x00
BPF_JEQ: Final = 0x10
BPF_JGT: Final = 0x20
BPF_JGE: Final = 0x30
BPF_JSET: Final = 0x40
BPF_JNE: Final = 0x50
BPF_JSGT: Final = 0x60
BPF_JSGE: Final = 0x70
BPF_CALL: Final = 0x80
BPF_EXIT: Final = 0x90
BPF_JLT: Final = 0xA0
BPF_JLE: Final = 0xB0
BPF_JSLT: Final = 0xC0
BPF_JSLE: Final = 0xD0
BPF_JCOND: Final = 0xE0  # may_goto (BPF_JMP | BPF_JCOND | BPF_K, src_reg BPF_MAY_GOTO = 0)
# atomic op modifiers (imm field of BPF_ATOMIC)
BPF_FETCH = 0x01
BPF_XCHG = 0xE0 | BPF_FETCH
BPF_CMPXCHG = 0xF0 | BPF_FETCH
# ld_imm64 src_reg values
BPF_PSEUDO_MAP_FD = 1
BPF_PSEUDO_MAP_VALUE = 2
BPF_PSEUDO_BTF_ID = 3
BPF_PSEUDO_FUNC = 4
BPF_PSEUDO_MAP_IDX = 5
BPF_PSEUDO_MAP_IDX_VALUE = 6
# call src_reg values
BPF_PSEUDO_CALL = 1
BPF_PSEUDO_KFUNC_CALL = 2

MAX_BPF_STACK: Final = 512  # bytes of stack per program (kernel limit)
BPF_MAXINSNS = 4096  # unprivileged insn limit; privileged: BPF_COMPLEXITY_LIMIT_INSNS
BPF_COMPLEXITY_LIMIT_INSNS: Final = 1_000_000  # processed-insn budget of the verifier
BPF_COMPLEXITY_LIMIT_JMP_SEQ: Final = 8192  # kernel/bpf/verifier.c: pending branch states at once
BPF_MAX_VAR_OFF: Final = 1 << 29  # include/linux/bpf_verifier.h: bound of a variable pointer offset
MAX_CALL_FRAMES: Final = 8  # include/linux/bpf_verifier.h: frames of a bpf-to-bpf call chain
MAX_TAIL_CALL_CNT: Final = 33  # include/linux/bpf.h: tail calls one run may make
BPF_MAX_LOOPS: Final = 8 * 1024 * 1024  # include/linux/bpf.h: the most iterations bpf_loop runs
BPF_SOCK_SIZE: Final = 80  # sizeof(struct bpf_sock), include/uapi/linux/bpf.h
BPF_FS_MAGIC: Final = 0xCAFE4A11  # include/uapi/linux/magic.h: statfs f_type of a bpffs mount
XDP_PACKET_HEADROOM: Final = 256  # include/uapi/linux/bpf.h: bytes before an XDP frame
MAX_SKB_FRAGS: Final = 17  # include/linux/skbuff.h (CONFIG_MAX_SKB_FRAGS default)
# BPF_PROG_TEST_RUN's XDP buffer (net/bpf/test_run.c bpf_prog_test_run_xdp): a 4096-byte
# frame (frame_sz; each frag is a PAGE_SIZE page), XDP_PACKET_HEADROOM before the packet and
# SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) of tailroom (320 bytes on x86_64) after it.
# max_data_sz = 4096 - headroom - tailroom bytes are linear; a longer frame keeps the rest in
# page frags (a multi-buffer xdp_buff), -ENOMEM past MAX_SKB_FRAGS of them.
XDP_FRAME_SIZE: Final = 4096
XDP_SHINFO_TAILROOM: Final = 320
XDP_MAX_LINEAR: Final = XDP_FRAME_SIZE - XDP_PACKET_HEADROOM - XDP_SHINFO_TAILROOM  # 3520
XDP_TEST_RUN_MAX: Final = XDP_MAX_LINEAR + MAX_SKB_FRAGS * XDP_FRAME_SIZE  # 73152 bytes
# include/linux/errno.h: the kernel's internal "not supported" (not EOPNOTSUPP, 95)
ENOTSUPP: Final = 524

# ---- map types: the kernel's rules at BPF_MAP_CREATE (one table) ----
# Sizes in bytes.  Constants of the x86-64 / arm64 (4 KiB pages) kernels bpfdsl targets:
PAGE_SIZE = 4096  # bytes (x86-64, arm64 with 4 KiB pages)
PCPU_MIN_UNIT_SIZE = 32 << 10  # include/linux/percpu.h: a per-CPU value, round_up(size, 8)
KMALLOC_MAX_SIZE: Final = 4 << 20  # include/linux/slab.h: 1 << (MAX_PAGE_ORDER 10 + PAGE_SHIFT 12)
HTAB_ELEM_SIZE = 48  # sizeof(struct htab_elem), kernel/bpf/hashtab.c (no lock debugging)
HTAB_BUCKET_SIZE = 16  # sizeof(struct bucket) / struct bpf_shtab_bucket (no lock debugging)
LPM_DATA_SIZE_MAX = 256  # kernel/bpf/lpm_trie.c: address bytes of an LPM key
LPM_NODE_SIZE = 24  # sizeof(struct lpm_trie_node)
# The largest max_entries a BTF-defined map can state: libbpf's ``__uint(max_entries, N)`` is
# ``int (*max_entries)[N]`` and the kernel refuses BTF whose array is 4 GiB or more
# (kernel/bpf/btf.c btf_array_resolve: "Array size overflows U32_MAX").
BTF_MAX_ENTRIES = (1 << 30) - 1
U32_MAX = (1 << 32) - 1


@dataclass(frozen=True, slots=True)
class MapLimits:
    """What BPF_MAP_CREATE accepts for one map type (the ``*_map_alloc_check`` / ``*_alloc``
    functions of ``source`` in the kernel tree).

    ``flags``: the map_flags the type accepts (its ``*_CREATE_FLAG_MASK``); ``required``: the
    ones it needs (lpm_trie: BPF_F_NO_PREALLOC).  ``key_size`` / ``value_size``: the accepted
    sizes in bytes (a ``range`` or a tuple of sizes); ``elem_max``: the largest key_size +
    value_size (None: no joint bound).  ``max_entries``: the largest the kernel's own rules
    allow (memory aside; None: no rule beyond u32, or a host-dependent one).  Per-CPU values
    (:func:`is_percpu`) are also bound by PCPU_MIN_UNIT_SIZE after rounding up to 8."""

    map_type: MapType
    source: str
    flags: int
    key_size: range | tuple[int, ...]
    value_size: range | tuple[int, ...]
    _: KW_ONLY
    required: int = 0
    elem_max: int | None = None
    max_entries: int | None = None
    ring_pages: bool = False
    max_entries_optional: bool = False


_ANY_SIZE = range(1, 1 << 31)  # value_size > INT_MAX: E2BIG (array_map_alloc_check)
_HTAB_FLAGS = BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK | BPF_F_ZERO_SEED
# key_size + value_size >= KMALLOC_MAX_SIZE - sizeof(struct htab_elem): E2BIG
_HTAB_ELEM_MAX = KMALLOC_MAX_SIZE - HTAB_ELEM_SIZE - 1
# roundup_pow_of_two(max_entries) buckets must be <= U32_MAX / sizeof(bucket) (hashtab: E2BIG,
# sock_hash_alloc: EINVAL): the largest such power of two, 2**27
_HTAB_MAX_ENTRIES = 1 << ((U32_MAX // HTAB_BUCKET_SIZE).bit_length() - 1)
# array_map_alloc_check + fd_array_map_alloc_check: no *_PROG flags, no BPF_F_INNER_MAP
# (checked on the running kernel by tests/test_map_limits.py)
_FD_ARRAY_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY | BPF_F_PRESERVE_ELEMS
_DEV_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY  # DEV_CREATE_FLAG_MASK
_SOCK_FLAGS = BPF_F_NUMA_NODE | BPF_F_RDONLY | BPF_F_WRONLY  # SOCK_CREATE_FLAG_MASK


def _htab(map_type: MapType, flags: int) -> MapLimits:
    return MapLimits(map_type, "kernel/bpf/hashtab.c htab_map_alloc_check", flags, _ANY_SIZE,
                     _ANY_SIZE, elem_max=_HTAB_ELEM_MAX, max_entries=_HTAB_MAX_ENTRIES)  # fmt: skip


MAP_LIMITS: dict[int, MapLimits] = {  # keys: MapType
    MapType.HASH: _htab(MapType.HASH, _HTAB_FLAGS),
    MapType.PERCPU_HASH: _htab(MapType.PERCPU_HASH, _HTAB_FLAGS & ~BPF_F_NUMA_NODE),
    # LRU maps are always preallocated (BPF_F_NO_PREALLOC: ENOTSUPP)
    MapType.LRU_HASH: _htab(
        MapType.LRU_HASH, _HTAB_FLAGS & ~BPF_F_NO_PREALLOC | BPF_F_NO_COMMON_LRU
    ),
    MapType.LRU_PERCPU_HASH: _htab(
        MapType.LRU_PERCPU_HASH,
        _HTAB_FLAGS & ~(BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE) | BPF_F_NO_COMMON_LRU,
    ),  # fmt: skip
    MapType.ARRAY: MapLimits(
        MapType.ARRAY,
        "kernel/bpf/arraymap.c array_map_alloc_check",
        BPF_F_NUMA_NODE | BPF_F_MMAPABLE | BPF_F_ACCESS_MASK | BPF_F_INNER_MAP,
        (4,),
        _ANY_SIZE,
    ),  # fmt: skip
    MapType.PERCPU_ARRAY: MapLimits(
        MapType.PERCPU_ARRAY,
        "kernel/bpf/arraymap.c array_map_alloc_check",
        BPF_F_ACCESS_MASK,
        (4,),
        _ANY_SIZE,
    ),  # fmt: skip
    MapType.LPM_TRIE: MapLimits(
        MapType.LPM_TRIE,
        "kernel/bpf/lpm_trie.c trie_alloc",
        BPF_F_NO_PREALLOC | BPF_F_NUMA_NODE | BPF_F_ACCESS_MASK,
        range(4 + 1, 4 + LPM_DATA_SIZE_MAX + 1),  # u32 prefixlen + 1..256 address bytes
        range(1, KMALLOC_MAX_SIZE - LPM_DATA_SIZE_MAX - LPM_NODE_SIZE + 1),
        required=BPF_F_NO_PREALLOC,
    ),  # fmt: skip
    MapType.DEVMAP: MapLimits(
        MapType.DEVMAP, "kernel/bpf/devmap.c dev_map_init_map", _DEV_FLAGS, (4,), (4, 8)
    ),
    # n_buckets = roundup_pow_of_two(max_entries) must not overflow u32 (EINVAL)
    MapType.DEVMAP_HASH: MapLimits(
        MapType.DEVMAP_HASH,
        "kernel/bpf/devmap.c dev_map_init_map",
        _DEV_FLAGS,
        (4,),
        (4, 8),
        max_entries=1 << 31,
    ),  # fmt: skip
    # max_entries > NR_CPUS: E2BIG; host-dependent, so the loader clamps it (FIELD-BUGS B09)
    MapType.CPUMAP: MapLimits(
        MapType.CPUMAP, "kernel/bpf/cpumap.c cpu_map_alloc", BPF_F_NUMA_NODE, (4,), (4, 8)
    ),
    MapType.XSKMAP: MapLimits(
        MapType.XSKMAP, "kernel/bpf/xskmap.c xsk_map_alloc", _DEV_FLAGS, (4,), (4,)
    ),
    MapType.SOCKMAP: MapLimits(
        MapType.SOCKMAP, "net/core/sock_map.c sock_map_alloc", _SOCK_FLAGS, (4,), (4, 8)
    ),
    MapType.SOCKHASH: MapLimits(
        MapType.SOCKHASH,
        "net/core/sock_map.c sock_hash_alloc",
        _SOCK_FLAGS,
        range(1, MAX_BPF_STACK + 1),
        (4, 8),
        max_entries=_HTAB_MAX_ENTRIES,
    ),  # fmt: skip
    # key and value size 0; max_entries = bytes of the ring (RINGBUF_CREATE_FLAG_MASK)
    MapType.RINGBUF: MapLimits(
        MapType.RINGBUF,
        "kernel/bpf/ringbuf.c ringbuf_map_alloc",
        BPF_F_NUMA_NODE,
        (0,),
        (0,),
        ring_pages=True,
    ),  # fmt: skip
    # values are perf event fds (4 bytes); BPF_F_PRESERVE_ELEMS only on this type
    MapType.PERF_EVENT_ARRAY: MapLimits(
        MapType.PERF_EVENT_ARRAY,
        "kernel/bpf/arraymap.c fd_array_map_alloc_check",
        _FD_ARRAY_FLAGS,
        (4,),
        (4,),
        max_entries_optional=True,
    ),  # fmt: skip
}

_FLAG_NAMES = {
    BPF_F_NO_PREALLOC: "BPF_F_NO_PREALLOC", BPF_F_NO_COMMON_LRU: "BPF_F_NO_COMMON_LRU",
    BPF_F_NUMA_NODE: "BPF_F_NUMA_NODE", BPF_F_RDONLY: "BPF_F_RDONLY",
    BPF_F_WRONLY: "BPF_F_WRONLY", BPF_F_ZERO_SEED: "BPF_F_ZERO_SEED",
    BPF_F_RDONLY_PROG: "BPF_F_RDONLY_PROG", BPF_F_WRONLY_PROG: "BPF_F_WRONLY_PROG",
    BPF_F_MMAPABLE: "BPF_F_MMAPABLE", BPF_F_PRESERVE_ELEMS: "BPF_F_PRESERVE_ELEMS",
    BPF_F_INNER_MAP: "BPF_F_INNER_MAP",
}  # fmt: skip


def _sizes(allowed: range | tuple[int, ...]) -> str:
    if isinstance(allowed, range):
        return f"{allowed.start} to {allowed.stop - 1} bytes"
    return " or ".join(map(str, allowed)) + " bytes"


def map_create_problems(
    map_type: int, key_size: int, value_size: int, max_entries: int, map_flags: int
) -> list[tuple[str, str]]:
    """What BPF_MAP_CREATE would refuse in these attributes, by :data:`MAP_LIMITS`:
    ``[(attribute, message)]`` with attribute one of ``"flags"``, ``"key"``, ``"value"``,
    ``"max_entries"``; empty when the kernel's rules accept them (memory aside) or the map
    type is not in the table.  Sizes in bytes."""
    lim = MAP_LIMITS.get(map_type)
    if lim is None:
        return []
    name = MapType(map_type).name.lower()
    out = []
    for bit, flag in _FLAG_NAMES.items():
        if map_flags & bit and not lim.flags & bit:
            lru = map_type in (MapType.LRU_HASH, MapType.LRU_PERCPU_HASH)
            if bit == BPF_F_NO_PREALLOC and lru:
                why = "LRU maps are always preallocated (BPF_MAP_CREATE fails with ENOTSUPP)"
            else:
                why = "BPF_MAP_CREATE fails with EINVAL"
            out.append(("flags", f"{name} maps do not take {flag}: {why}"))
        elif lim.required & bit and not map_flags & bit:
            out.append(("flags", f"{name} maps need {flag} (BPF_MAP_CREATE fails with EINVAL)"))
    if key_size not in lim.key_size:
        out.append(("key", f"{name} keys are {_sizes(lim.key_size)}, not {key_size}"))
    if value_size not in lim.value_size:
        out.append(("value", f"{name} values are {_sizes(lim.value_size)}, not {value_size}"))
    elif is_percpu(map_type) and (value_size + 7) // 8 * 8 > PCPU_MIN_UNIT_SIZE:
        out.append(("value", f"{name} values are at most {PCPU_MIN_UNIT_SIZE} bytes per CPU "
                             f"(PCPU_MIN_UNIT_SIZE), not {value_size}"))  # fmt: skip
    if lim.elem_max is not None and key_size + value_size > lim.elem_max:
        out.append(("value", f"{name} key and value together are at most {lim.elem_max} "
                             f"bytes, not {key_size + value_size}"))  # fmt: skip
    if max_entries == 0 and not lim.max_entries_optional:
        out.append(("max_entries", f"{name} maps need max_entries of at least 1"))
    elif lim.ring_pages and (max_entries & (max_entries - 1) or max_entries % PAGE_SIZE):
        out.append(("max_entries", f"{name} maps need max_entries (the ring's size in bytes) "
                                   f"to be a power of 2 and a multiple of the page size "
                                   f"({PAGE_SIZE}), not {max_entries}"))  # fmt: skip
    elif lim.max_entries is not None and max_entries > lim.max_entries:
        out.append(("max_entries", f"{name} maps hold at most {lim.max_entries} entries "
                                   f"(2**{lim.max_entries.bit_length() - 1}), not {max_entries}"))  # fmt: skip
    return out


# ---- program kinds: the one table of program types ----


@dataclass(frozen=True, slots=True)
class ProgramKind:
    """One program kind of the language / one ELF section prefix (libbpf ``section_defs``).

    ``keyword``: how the language spells it (``xdp``, ``xdp(cpumap)``, ``sk_msg``...).
    ``section``: the ELF section name libbpf expects.  ``ctx``: the kernel context struct.
    ``returns``: the return values the kernel accepts (name -> value); sema, checker and
    interpreter all use it.  ``prog_flags``: BPF_PROG_LOAD prog_flags (frags).
    """

    keyword: str
    section: str
    program_type: ProgramType
    attach_type: AttachType | None
    ctx: str
    returns: dict[str, int]
    prog_flags: int = 0
    test_run: bool = True  # does BPF_PROG_TEST_RUN accept it on this kernel?


_XDP_ALL = {f"XDP_{a.name}": a.value for a in XdpAction}
_XDP_DEVMAP = {k: v for k, v in _XDP_ALL.items() if k in ("XDP_ABORTED", "XDP_DROP", "XDP_PASS")}
# cpumap programs: XDP_TX is not supported on the remote CPU (kernel cpu_map_bpf_prog_run_xdp
# treats it as an invalid action); redirect is (5.15+).
_XDP_CPUMAP = {k: v for k, v in _XDP_ALL.items() if k != "XDP_TX"}
_SK: dict[str, int] = {"SK_DROP": SkAction.DROP, "SK_PASS": SkAction.PASS}

PROGRAM_KINDS: tuple[ProgramKind, ...] = (
    ProgramKind("xdp", "xdp", ProgramType.XDP, AttachType.XDP, "xdp_md", _XDP_ALL),
    ProgramKind(
        "xdp(frags)",
        "xdp.frags",
        ProgramType.XDP,
        AttachType.XDP,
        "xdp_md",
        _XDP_ALL,
        prog_flags=BPF_F_XDP_HAS_FRAGS,
    ),
    # bound to one device at load (prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY, which the loader
    # sets when a program calls a metadata kfunc): the section stays libbpf's "xdp", which
    # reads back as the plain kind above (libbpf has no section for it either)
    ProgramKind("xdp(dev_bound)", "xdp", ProgramType.XDP, AttachType.XDP, "xdp_md", _XDP_ALL),
    ProgramKind(
        "xdp(cpumap)",
        "xdp/cpumap",
        ProgramType.XDP,
        AttachType.XDP_CPUMAP,
        "xdp_md",
        _XDP_CPUMAP,
        test_run=False,
    ),
    ProgramKind(
        "xdp(devmap)",
        "xdp/devmap",
        ProgramType.XDP,
        AttachType.XDP_DEVMAP,
        "xdp_md",
        _XDP_DEVMAP,
        test_run=False,
    ),
    ProgramKind(
        "sk_msg",
        "sk_msg",
        ProgramType.SK_MSG,
        AttachType.SK_MSG_VERDICT,
        "sk_msg_md",
        _SK,
        test_run=False,
    ),
    ProgramKind(
        "sock_ops",
        "sockops",
        ProgramType.SOCK_OPS,
        AttachType.CGROUP_SOCK_OPS,
        "bpf_sock_ops",
        {"0": 0, "1": 1},
        test_run=False,
    ),
    # Read-only entries for objects from other compilers (loader/checker), not language kinds:
    ProgramKind(
        "",
        "xdp.frags/cpumap",
        ProgramType.XDP,
        AttachType.XDP_CPUMAP,
        "xdp_md",
        _XDP_CPUMAP,
        prog_flags=BPF_F_XDP_HAS_FRAGS,
        test_run=False,
    ),
    ProgramKind(
        "",
        "xdp.frags/devmap",
        ProgramType.XDP,
        AttachType.XDP_DEVMAP,
        "xdp_md",
        _XDP_DEVMAP,
        prog_flags=BPF_F_XDP_HAS_FRAGS,
        test_run=False,
    ),
    ProgramKind(
        "",
        "sk_skb/stream_verdict",
        ProgramType.SK_SKB,
        AttachType.SK_SKB_STREAM_VERDICT,
        "__sk_buff",
        _SK,
    ),
    ProgramKind(
        "",
        "sk_skb/stream_parser",
        ProgramType.SK_SKB,
        AttachType.SK_SKB_STREAM_PARSER,
        "__sk_buff",
        {},
    ),
    ProgramKind("", "tc", ProgramType.SCHED_CLS, None, "__sk_buff", {}),
    ProgramKind("", "classifier", ProgramType.SCHED_CLS, None, "__sk_buff", {}),
    ProgramKind("", "socket", ProgramType.SOCKET_FILTER, None, "__sk_buff", {}),
)


def kind_for_keyword(keyword: str) -> ProgramKind | None:
    """The :class:`ProgramKind` the language spells ``keyword`` (``"xdp(cpumap)"``), or None."""
    for k in PROGRAM_KINDS:
        if k.keyword and k.keyword == keyword:
            return k
    return None


def kind_for_section(section: str) -> ProgramKind | None:
    """The kind of an ELF section name, libbpf style: exact name or ``prefix/anything``.

    ``xdp/cpumap`` matches exactly; ``xdp/foo`` is plain ``xdp`` (libbpf accepts any
    suffix after ``xdp/`` except the cpumap/devmap ones); ``sockops/x`` is sock_ops.
    Returns None for sections that hold no program of a known type.
    """
    for k in PROGRAM_KINDS:
        if section == k.section:
            return k
    for k in PROGRAM_KINDS:
        if k.section in (
            "xdp",
            "xdp.frags",
            "sk_msg",
            "sockops",
            "tc",
            "classifier",
            "socket",
        ) and section.startswith(k.section + "/"):
            return k
    return None
