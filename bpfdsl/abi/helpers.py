"""The one helper table: BPF helper ids and prototypes (imports only uapi).

Ids are ``enum bpf_func_id`` (include/uapi/linux/bpf.h, checked against this machine's
vmlinux BTF by tests/test_uapi.py).  Argument and return kinds follow the kernel's
``struct bpf_func_proto`` (``ARG_*`` / ``RET_*`` in include/linux/bpf.h), reduced to what
bpfdsl's sema, checker and interpreter need.  Program-type availability follows the
kernel's ``*_func_proto`` functions in net/core/filter.c (``xdp_func_proto``,
``sk_msg_func_proto``, ``sock_ops_func_proto``) plus ``bpf_base_func_proto``;
map compatibility follows ``check_map_func_compatibility`` in kernel/bpf/verifier.c.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from bpfdsl.abi.uapi import MapType, ProgramType


class ArgKind(Enum):
    """Kernel ``enum bpf_arg_type`` values that bpfdsl models."""

    ANYTHING = "anything"  # any initialized scalar (or pointer, where the kernel allows)
    CONST_MAP_PTR = "const_map_ptr"  # ld_imm64 map reference
    PTR_TO_MAP_KEY = "ptr_to_map_key"  # stack/map value/packet memory of key_size bytes
    PTR_TO_MAP_VALUE = "ptr_to_map_value"  # memory of value_size bytes
    PTR_TO_CTX = "ptr_to_ctx"  # the program's context, unmodified
    PTR_TO_MEM = "ptr_to_mem"  # readable memory, size in the next arg (nullable if size 0)
    PTR_TO_UNINIT_MEM = "ptr_to_uninit_mem"  # writable memory, size in the next arg
    CONST_SIZE = "const_size"  # bounded scalar > 0, size of the previous mem arg
    CONST_SIZE_OR_ZERO = "const_size_or_zero"  # bounded scalar >= 0
    PTR_TO_SOCKET = "ptr_to_socket"


class RetKind(Enum):
    """Kernel ``enum bpf_return_type`` values that bpfdsl models."""

    INTEGER = "integer"
    VOID = "void"
    PTR_TO_MAP_VALUE_OR_NULL = "ptr_to_map_value_or_null"


@dataclass(frozen=True, slots=True)
class HelperProto:
    """One helper.

    ``args``: kinds of r1..r5 in order.  ``ret``: kind of r0.  ``prog_types``: where it
    may be called (None = every program type, ``bpf_base_func_proto``).  ``map_types``:
    map types accepted by its CONST_MAP_PTR argument (None = any).  ``pkt_changing``: the
    kernel's ``bpf_helper_changes_pkt_data``: every packet pointer is invalid after the
    call and data/data_end must be re-read from the context.
    """

    name: str
    id: int  # the kernel's name for it (enum bpf_func_id)
    args: tuple[ArgKind, ...]
    ret: RetKind
    prog_types: frozenset[ProgramType] | None = None
    map_types: frozenset[MapType] | None = None
    pkt_changing: bool = False


A = ArgKind
_XDP = frozenset({ProgramType.XDP})
_SK_MSG = frozenset({ProgramType.SK_MSG})
_SOCK_OPS = frozenset({ProgramType.SOCK_OPS})
_NET = frozenset({ProgramType.XDP, ProgramType.SCHED_CLS, ProgramType.SCHED_ACT})
_REDIRECT_MAPS = frozenset({MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP, MapType.XSKMAP})
_DATA_MAPS = frozenset(
    {
        MapType.HASH,
        MapType.ARRAY,
        MapType.PERCPU_HASH,
        MapType.PERCPU_ARRAY,
        MapType.LRU_HASH,
        MapType.LRU_PERCPU_HASH,
        MapType.LPM_TRIE,
    }
)

_ALL: tuple[HelperProto, ...] = (
    HelperProto(
        "map_lookup_elem",
        1,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY),
        RetKind.PTR_TO_MAP_VALUE_OR_NULL,
        map_types=_DATA_MAPS
        | {MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.XSKMAP, MapType.SOCKMAP, MapType.SOCKHASH},
    ),
    HelperProto(
        "map_update_elem",
        2,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.PTR_TO_MAP_VALUE, A.ANYTHING),
        RetKind.INTEGER,
        map_types=_DATA_MAPS,
    ),
    HelperProto(
        "map_delete_elem",
        3,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY),
        RetKind.INTEGER,
        map_types=_DATA_MAPS | {MapType.SOCKMAP, MapType.SOCKHASH},
    ),
    HelperProto("ktime_get_ns", 5, (), RetKind.INTEGER),
    HelperProto("trace_printk", 6, (A.PTR_TO_MEM, A.CONST_SIZE), RetKind.INTEGER),
    HelperProto("get_prandom_u32", 7, (), RetKind.INTEGER),
    HelperProto("get_smp_processor_id", 8, (), RetKind.INTEGER),
    # u64 tgid << 32 | pid; every program type since Linux 6.10 (bpf_base_func_proto)
    HelperProto("get_current_pid_tgid", 14, (), RetKind.INTEGER),
    HelperProto(
        "tail_call",
        12,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.ANYTHING),
        RetKind.VOID,
        map_types=frozenset({MapType.PROG_ARRAY}),
    ),
    HelperProto("redirect", 23, (A.ANYTHING, A.ANYTHING), RetKind.INTEGER, prog_types=_NET),
    HelperProto(
        "csum_diff",
        28,
        (A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_NET,
    ),
    HelperProto("get_numa_node_id", 42, (), RetKind.INTEGER),
    HelperProto(
        "xdp_adjust_head",
        44,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto("get_socket_cookie", 46, (A.PTR_TO_CTX,), RetKind.INTEGER, prog_types=_SOCK_OPS),
    HelperProto(
        "redirect_map",
        51,
        (A.CONST_MAP_PTR, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        map_types=_REDIRECT_MAPS,
    ),
    HelperProto(
        "sock_map_update",
        53,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
        map_types=frozenset({MapType.SOCKMAP}),
    ),
    HelperProto(
        "xdp_adjust_meta",
        54,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto(
        "sock_ops_cb_flags_set",
        59,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
    ),
    HelperProto(
        "msg_redirect_map",
        60,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        map_types=frozenset({MapType.SOCKMAP}),
    ),
    HelperProto(
        "msg_apply_bytes", 61, (A.PTR_TO_CTX, A.ANYTHING), RetKind.INTEGER, prog_types=_SK_MSG
    ),
    HelperProto(
        "msg_cork_bytes", 62, (A.PTR_TO_CTX, A.ANYTHING), RetKind.INTEGER, prog_types=_SK_MSG
    ),
    HelperProto(
        "msg_pull_data",
        63,
        (A.PTR_TO_CTX, A.ANYTHING, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        pkt_changing=True,
    ),
    HelperProto(
        "xdp_adjust_tail",
        65,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto(
        "sock_hash_update",
        70,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
        map_types=frozenset({MapType.SOCKHASH}),
    ),
    HelperProto(
        "msg_redirect_hash",
        71,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        map_types=frozenset({MapType.SOCKHASH}),
    ),
    HelperProto(
        "msg_push_data",
        90,
        (A.PTR_TO_CTX, A.ANYTHING, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        pkt_changing=True,
    ),
    HelperProto(
        "msg_pop_data",
        91,
        (A.PTR_TO_CTX, A.ANYTHING, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        pkt_changing=True,
    ),
    HelperProto("jiffies64", 118, (), RetKind.INTEGER),
    HelperProto("ktime_get_boot_ns", 125, (), RetKind.INTEGER),
    HelperProto("ktime_get_coarse_ns", 160, (), RetKind.INTEGER),
    HelperProto(
        "check_mtu",
        163,
        (A.PTR_TO_CTX, A.ANYTHING, A.ANYTHING, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_NET,
    ),
    HelperProto("xdp_get_buff_len", 188, (A.PTR_TO_CTX,), RetKind.INTEGER, prog_types=_XDP),
    HelperProto(
        "xdp_load_bytes",
        189,
        (A.PTR_TO_CTX, A.ANYTHING, A.PTR_TO_UNINIT_MEM, A.CONST_SIZE),
        RetKind.INTEGER,
        prog_types=_XDP,
    ),
    HelperProto(
        "xdp_store_bytes",
        190,
        (A.PTR_TO_CTX, A.ANYTHING, A.PTR_TO_MEM, A.CONST_SIZE),
        RetKind.INTEGER,
        prog_types=_XDP,
    ),
    HelperProto(
        "map_lookup_percpu_elem",
        195,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.PTR_TO_MAP_VALUE_OR_NULL,
        map_types=frozenset({MapType.PERCPU_ARRAY, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH}),
    ),
)

HELPERS: dict[str, HelperProto] = {h.name: h for h in _ALL}
"""Helper name (without ``bpf_``) -> prototype."""

HELPERS_BY_ID: dict[int, HelperProto] = {h.id: h for h in _ALL}
"""Helper id (``BPF_FUNC_*``) -> prototype."""

# Map types whose values a program may not touch through map_lookup_elem's result except
# as the kernel allows (check_map_func_compatibility and map_ops->map_lookup_elem):
# xskmap lookups give an opaque socket reference (only ``queue_id`` of struct
# bpf_xdp_sock is readable); devmap lookups give struct bpf_devmap_val (read-only).
OPAQUE_LOOKUP_MAPS = frozenset({MapType.XSKMAP, MapType.SOCKMAP, MapType.SOCKHASH})
READONLY_VALUE_MAPS = frozenset({MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.XSKMAP})

# Helpers each map type may be passed to (check_map_func_compatibility, first switch).
MAP_HELPERS: dict[MapType, frozenset[str]] = {
    MapType.DEVMAP: frozenset({"redirect_map", "map_lookup_elem"}),
    MapType.DEVMAP_HASH: frozenset({"redirect_map", "map_lookup_elem"}),
    MapType.CPUMAP: frozenset({"redirect_map"}),
    MapType.XSKMAP: frozenset({"redirect_map", "map_lookup_elem"}),
    MapType.SOCKMAP: frozenset(
        {
            "sock_map_update",
            "msg_redirect_map",
            "map_lookup_elem",
            "map_delete_elem",
            "map_update_elem",
        }
    ),
    MapType.SOCKHASH: frozenset(
        {
            "sock_hash_update",
            "msg_redirect_hash",
            "map_lookup_elem",
            "map_delete_elem",
            "map_update_elem",
        }
    ),
    MapType.PROG_ARRAY: frozenset({"tail_call"}),
}


def helper_allowed(helper: HelperProto, prog_type: ProgramType) -> bool:
    """Whether ``helper`` may be called from a program of ``prog_type``."""
    return helper.prog_types is None or prog_type in helper.prog_types


def map_fits_helper(map_type: MapType, helper_name: str) -> bool:
    """Whether a map of ``map_type`` may be passed to helper ``helper_name`` (both directions)."""
    allowed = MAP_HELPERS.get(map_type)
    if allowed is not None and helper_name not in allowed:
        return False
    h = HELPERS.get(helper_name)
    return h is None or h.map_types is None or map_type in h.map_types
