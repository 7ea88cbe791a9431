"""The one helper table: every BPF helper's id, name and prototype (imports only flags, map_types, prog_types).

:data:`PROTOTYPES` is indexed by helper id, as PREVAIL's ``prototypes[]``: every id of
``enum bpf_func_id`` (include/uapi/linux/bpf.h; this machine's kernel BTF, Linux 6.18: ids
1..211, checked against /sys/kernel/btf/vmlinux by tests/abi/test_uapi.py) has an entry with its
name, so the instruction printer, the checker and the interpreter can name any helper.
Helpers bpfdsl models carry a prototype; the others have ``args is None`` (``modelled`` is
False): the checker says "cannot check" for them instead of "rejected".
Argument and return kinds follow the kernel's ``struct bpf_func_proto`` (``ARG_*`` / ``RET_*``
in include/linux/bpf.h), reduced to what bpfdsl's sema, checker and interpreter need.
Program-type availability follows the kernel's ``*_func_proto`` functions in
net/core/filter.c (``xdp_func_proto``, ``sk_msg_func_proto``, ``sock_ops_func_proto``) plus
``bpf_base_func_proto``; map compatibility follows ``check_map_func_compatibility`` in
kernel/bpf/verifier.c.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Final

from bpfdsl.abi.flags import BPF_F_BROADCAST, BPF_F_EXCLUDE_INGRESS, XDP_REDIRECT_FALLBACK_MASK
from bpfdsl.abi.map_types import (
    ARRAY_MAP_TYPES,
    DEVMAP_TYPES,
    HASH_MAP_TYPES,
    MAP_IN_MAP_TYPES,
    PERCPU_MAP_TYPES,
    REDIRECT_MAP_TYPES,
    SOCK_MAP_TYPES,
    SOCKET_MAP_TYPES,
    MapType,
)
from bpfdsl.abi.prog_types import ProgramType


class ArgKind(Enum):
    """Kernel ``enum bpf_arg_type`` values that bpfdsl models."""

    ANYTHING = "anything"  # any initialized scalar (or pointer, where the kernel allows)
    CONST_MAP_PTR = "const_map_ptr"  # ld_imm64 map reference
    PTR_TO_MAP_KEY = "ptr_to_map_key"  # stack/map value/packet memory of key_size bytes
    PTR_TO_MAP_VALUE = "ptr_to_map_value"  # memory of value_size bytes
    PTR_TO_CTX = "ptr_to_ctx"  # the program's context, unmodified
    PTR_TO_MEM = "ptr_to_mem"  # readable memory, size in the next arg (never NULL)
    # ARG_PTR_TO_MEM | PTR_MAYBE_NULL: the same, or NULL (0) with size 0
    PTR_TO_MEM_OR_NULL = "ptr_to_mem_or_null"
    PTR_TO_UNINIT_MEM = "ptr_to_uninit_mem"  # writable memory, size in the next arg
    CONST_SIZE = "const_size"  # bounded scalar > 0, size of the previous mem arg
    CONST_SIZE_OR_ZERO = "const_size_or_zero"  # bounded scalar >= 0
    PTR_TO_SOCKET = "ptr_to_socket"
    CONST_ALLOC_SIZE_OR_ZERO = "const_alloc_size_or_zero"  # a known constant: bytes to allocate
    PTR_TO_RINGBUF_MEM = "ptr_to_ringbuf_mem"  # a reservation, released by the call (OBJ_RELEASE)
    PTR_TO_FUNC = "ptr_to_func"  # a static subprogram (ld_imm64 BPF_PSEUDO_FUNC): a callback
    PTR_TO_STACK_OR_NULL = "ptr_to_stack_or_null"  # the caller's stack, or NULL (0)
    # ARG_PTR_TO_BTF_ID_SOCK_COMMON | OBJ_RELEASE: a referenced socket (a lookup's result,
    # checked for NULL), released by the call
    PTR_TO_BTF_ID_SOCK_COMMON = "ptr_to_btf_id_sock_common"
    # ARG_PTR_TO_SPIN_LOCK: a map value pointer at the value's struct bpf_spin_lock
    PTR_TO_SPIN_LOCK = "ptr_to_spin_lock"


class RetKind(Enum):
    """Kernel ``enum bpf_return_type`` values that bpfdsl models."""

    INTEGER = "integer"
    VOID = "void"
    PTR_TO_MAP_VALUE_OR_NULL = "ptr_to_map_value_or_null"
    # RET_PTR_TO_MEM | MEM_RINGBUF | PTR_MAYBE_NULL: an acquired reference of the size argument
    PTR_TO_RINGBUF_MEM_OR_NULL = "ptr_to_ringbuf_mem_or_null"
    # RET_PTR_TO_SOCKET_OR_NULL / RET_PTR_TO_SOCK_COMMON_OR_NULL of an acquiring helper
    # (is_acquire_function): a struct bpf_sock (or its sock_common part) to release
    PTR_TO_SOCKET_OR_NULL = "ptr_to_socket_or_null"
    PTR_TO_SOCK_COMMON_OR_NULL = "ptr_to_sock_common_or_null"


@dataclass(frozen=True, slots=True)
class HelperProto:
    """One helper: ``name`` (``enum bpf_func_id`` without ``BPF_FUNC_``), ``id``.

    ``args``: kinds of r1..r5 in order, None for a helper bpfdsl does not model.  ``ret``:
    kind of r0 (None when not modelled).  ``prog_types``: where it
    may be called (None = every program type, ``bpf_base_func_proto``).  ``map_types``:
    map types accepted by its CONST_MAP_PTR argument (None = any).  ``pkt_changing``: the
    kernel's ``bpf_helper_changes_pkt_data``: every packet pointer is invalid after the
    call and data/data_end must be re-read from the context.  ``ret_ctype``: the C type of
    an integer result (``RetKind.INTEGER``) as the helper's doc comment in
    include/uapi/linux/bpf.h declares it (and libbpf's bpf_helper_defs.h): ``long`` (64-bit
    signed on BPF, a negative errno on failure), ``s64``, ``u64`` or ``u32``.
    ``pkt_access``: the kernel's ``struct bpf_func_proto`` ``.pkt_access``: a packet pointer
    (PTR_TO_PACKET / PTR_TO_PACKET_META) may be passed as a memory argument; see
    :func:`helper_may_access_packet` for the program types where that holds.
    """

    name: str
    id: int  # the kernel's name for it (enum bpf_func_id)
    args: tuple[ArgKind, ...] | None = None
    ret: RetKind | None = None
    prog_types: frozenset[ProgramType] | None = None
    map_types: frozenset[MapType] | None = None
    pkt_changing: bool = False
    ret_ctype: str = "long"
    pkt_access: bool = False

    @property
    def modelled(self) -> bool:
        """Whether bpfdsl knows this helper's prototype (sema, checker and interpreter)."""
        return self.args is not None

    @property
    def kernel_name(self) -> str:
        """``bpf_<name>``, as the kernel's verifier log and headers spell it."""
        return "bpf_" + self.name


A = ArgKind
_XDP = frozenset({ProgramType.XDP})
_SK_MSG = frozenset({ProgramType.SK_MSG})
_SOCK_OPS = frozenset({ProgramType.SOCK_OPS})
_NET = frozenset({ProgramType.XDP, ProgramType.SCHED_CLS, ProgramType.SCHED_ACT})
_RINGBUF = frozenset({MapType.RINGBUF})
_DATA_MAPS = HASH_MAP_TYPES | ARRAY_MAP_TYPES | {MapType.LPM_TRIE}  # maps of plain values

# Index = helper id (enum bpf_func_id order, 0 = BPF_FUNC_unspec); see the module doc.
# pkt_access=True where the kernel's proto says ``.pkt_access = true`` (Linux 6.18):
# bpf_map_{lookup,update,delete}_elem_proto and bpf_map_lookup_percpu_elem_proto
# (kernel/bpf/helpers.c), bpf_csum_diff_proto (net/core/filter.c, the same proto for XDP and
# tc), bpf_sock_map_update_proto / bpf_sock_hash_update_proto (net/core/sock_map.c).  Not
# set, so a packet pointer is refused: bpf_xdp_fib_lookup_proto and bpf_skb_fib_lookup_proto,
# bpf_xdp_event_output_proto and bpf_skb_event_output_proto, bpf_ringbuf_output_proto,
# bpf_trace_printk_proto, bpf_xdp_load_bytes_proto / bpf_xdp_store_bytes_proto,
# bpf_msg_redirect_hash_proto.  Where a helper has one proto per program type, the modelled
# ones agree on the flag, so one column per helper is exact.
PROTOTYPES: tuple[HelperProto, ...] = (
    HelperProto("unspec", 0),
    HelperProto(
        "map_lookup_elem",
        1,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY),
        RetKind.PTR_TO_MAP_VALUE_OR_NULL,
        map_types=_DATA_MAPS | DEVMAP_TYPES | SOCKET_MAP_TYPES | MAP_IN_MAP_TYPES,
        pkt_access=True,
    ),
    HelperProto(
        "map_update_elem",
        2,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.PTR_TO_MAP_VALUE, A.ANYTHING),
        RetKind.INTEGER,
        map_types=_DATA_MAPS | SOCK_MAP_TYPES,  # sockmaps: where may_update_sockmap says
        pkt_access=True,
    ),
    HelperProto(
        "map_delete_elem",
        3,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY),
        RetKind.INTEGER,
        map_types=_DATA_MAPS | SOCK_MAP_TYPES,
        pkt_access=True,
    ),
    HelperProto("probe_read", 4),
    HelperProto("ktime_get_ns", 5, (), RetKind.INTEGER, ret_ctype="u64"),
    HelperProto("trace_printk", 6, (A.PTR_TO_MEM, A.CONST_SIZE), RetKind.INTEGER),
    HelperProto("get_prandom_u32", 7, (), RetKind.INTEGER, ret_ctype="u32"),
    HelperProto("get_smp_processor_id", 8, (), RetKind.INTEGER, ret_ctype="u32"),
    HelperProto("skb_store_bytes", 9),
    HelperProto("l3_csum_replace", 10),
    HelperProto("l4_csum_replace", 11),
    HelperProto(
        "tail_call",
        12,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.ANYTHING),
        RetKind.VOID,
        map_types=frozenset({MapType.PROG_ARRAY}),
    ),
    HelperProto("clone_redirect", 13),
    # u64 tgid << 32 | pid; every program type since Linux 6.10 (bpf_base_func_proto)
    HelperProto("get_current_pid_tgid", 14, (), RetKind.INTEGER, ret_ctype="u64"),
    HelperProto("get_current_uid_gid", 15),
    HelperProto("get_current_comm", 16),
    HelperProto("get_cgroup_classid", 17),
    HelperProto("skb_vlan_push", 18),
    HelperProto("skb_vlan_pop", 19),
    HelperProto("skb_get_tunnel_key", 20),
    HelperProto("skb_set_tunnel_key", 21),
    HelperProto("perf_event_read", 22),
    HelperProto("redirect", 23, (A.ANYTHING, A.ANYTHING), RetKind.INTEGER, prog_types=_NET),
    HelperProto("get_route_realm", 24),
    # bpf_xdp_event_output_proto / bpf_skb_event_output_proto (net/core/filter.c): flags
    # select the array slot (BPF_F_CURRENT_CPU) and, upper 32 bits, packet bytes to append;
    # sk_msg and sock_ops: bpf_event_output_data_proto (the same arguments, no packet bytes)
    HelperProto(
        "perf_event_output",
        25,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.ANYTHING, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO),
        RetKind.INTEGER,
        prog_types=_NET | _SK_MSG | _SOCK_OPS,
        map_types=frozenset({MapType.PERF_EVENT_ARRAY}),
    ),
    HelperProto("skb_load_bytes", 26),
    HelperProto("get_stackid", 27),
    HelperProto(
        "csum_diff",
        28,
        # bpf_csum_diff_proto: ARG_PTR_TO_MEM | PTR_MAYBE_NULL | MEM_RDONLY, twice
        (
            A.PTR_TO_MEM_OR_NULL,
            A.CONST_SIZE_OR_ZERO,
            A.PTR_TO_MEM_OR_NULL,
            A.CONST_SIZE_OR_ZERO,
            A.ANYTHING,
        ),
        RetKind.INTEGER,
        prog_types=_NET,
        ret_ctype="s64",
        pkt_access=True,
    ),
    HelperProto("skb_get_tunnel_opt", 29),
    HelperProto("skb_set_tunnel_opt", 30),
    HelperProto("skb_change_proto", 31),
    HelperProto("skb_change_type", 32),
    HelperProto("skb_under_cgroup", 33),
    HelperProto("get_hash_recalc", 34),
    HelperProto("get_current_task", 35),
    HelperProto("probe_write_user", 36),
    HelperProto("current_task_under_cgroup", 37),
    HelperProto("skb_change_tail", 38),
    HelperProto("skb_pull_data", 39),
    HelperProto("csum_update", 40),
    HelperProto("set_hash_invalid", 41),
    HelperProto("get_numa_node_id", 42, (), RetKind.INTEGER),
    HelperProto("skb_change_head", 43),
    HelperProto(
        "xdp_adjust_head",
        44,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto("probe_read_str", 45),
    HelperProto(
        "get_socket_cookie",
        46,
        (A.PTR_TO_CTX,),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
        ret_ctype="u64",
    ),
    HelperProto("get_socket_uid", 47),
    HelperProto("set_hash", 48),
    HelperProto("setsockopt", 49),
    HelperProto("skb_adjust_room", 50),
    HelperProto(
        "redirect_map",
        51,
        (A.CONST_MAP_PTR, A.ANYTHING, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        map_types=REDIRECT_MAP_TYPES,
    ),
    HelperProto("sk_redirect_map", 52),
    HelperProto(
        "sock_map_update",
        53,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
        map_types=frozenset({MapType.SOCKMAP}),
        pkt_access=True,
    ),
    HelperProto(
        "xdp_adjust_meta",
        54,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto("perf_event_read_value", 55),
    HelperProto("perf_prog_read_value", 56),
    HelperProto("getsockopt", 57),
    HelperProto("override_return", 58),
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
    HelperProto("bind", 64),
    HelperProto(
        "xdp_adjust_tail",
        65,
        (A.PTR_TO_CTX, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_XDP,
        pkt_changing=True,
    ),
    HelperProto("skb_get_xfrm_state", 66),
    HelperProto("get_stack", 67),
    HelperProto("skb_load_bytes_relative", 68),
    # bpf_xdp_fib_lookup_proto / bpf_skb_fib_lookup_proto (net/core/filter.c): params is
    # a struct bpf_fib_lookup (bpfdsl.abi.fib) read and written, plen its size
    HelperProto(
        "fib_lookup",
        69,
        (A.PTR_TO_CTX, A.PTR_TO_MEM, A.CONST_SIZE, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_NET,
    ),
    HelperProto(
        "sock_hash_update",
        70,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SOCK_OPS,
        map_types=frozenset({MapType.SOCKHASH}),
        pkt_access=True,
    ),
    HelperProto(
        "msg_redirect_hash",
        71,
        (A.PTR_TO_CTX, A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.INTEGER,
        prog_types=_SK_MSG,
        map_types=frozenset({MapType.SOCKHASH}),
    ),
    HelperProto("sk_redirect_hash", 72),
    HelperProto("lwt_push_encap", 73),
    HelperProto("lwt_seg6_store_bytes", 74),
    HelperProto("lwt_seg6_adjust_srh", 75),
    HelperProto("lwt_seg6_action", 76),
    HelperProto("rc_repeat", 77),
    HelperProto("rc_keydown", 78),
    HelperProto("skb_cgroup_id", 79),
    HelperProto("get_current_cgroup_id", 80),
    HelperProto("get_local_storage", 81),
    HelperProto("sk_select_reuseport", 82),
    HelperProto("skb_ancestor_cgroup_id", 83),
    # bpf_xdp_sk_lookup_{tcp,udp}_proto / bpf_xdp_skc_lookup_tcp_proto (net/core/filter.c;
    # tc: bpf_sk_lookup_*_proto, the same arguments): ctx, a struct bpf_sock_tuple (stack,
    # map value or packet: .pkt_access) of tuple_size bytes, netns, flags; an acquired
    # reference (kernel is_acquire_function) or NULL; tuple_size may be 0 (ARG_CONST_SIZE_OR_ZERO
    # since Linux 6.x: the lookup then returns NULL)
    HelperProto(
        "sk_lookup_tcp",
        84,
        (A.PTR_TO_CTX, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.ANYTHING, A.ANYTHING),
        RetKind.PTR_TO_SOCKET_OR_NULL,
        prog_types=_NET,
        pkt_access=True,
    ),
    HelperProto(
        "sk_lookup_udp",
        85,
        (A.PTR_TO_CTX, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.ANYTHING, A.ANYTHING),
        RetKind.PTR_TO_SOCKET_OR_NULL,
        prog_types=_NET,
        pkt_access=True,
    ),
    # bpf_sk_release_proto: ARG_PTR_TO_BTF_ID_SOCK_COMMON | OBJ_RELEASE
    HelperProto("sk_release", 86, (A.PTR_TO_BTF_ID_SOCK_COMMON,), RetKind.INTEGER, prog_types=_NET),
    HelperProto("map_push_elem", 87),
    HelperProto("map_pop_elem", 88),
    HelperProto("map_peek_elem", 89),
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
    HelperProto("rc_pointer_rel", 92),
    # bpf_spin_lock_proto / bpf_spin_unlock_proto (kernel/bpf/helpers.c, bpf_base_func_proto):
    # a map value pointer at the value's struct bpf_spin_lock (checker.refs.spin_lock)
    HelperProto("spin_lock", 93, (A.PTR_TO_SPIN_LOCK,), RetKind.VOID),
    HelperProto("spin_unlock", 94, (A.PTR_TO_SPIN_LOCK,), RetKind.VOID),
    HelperProto("sk_fullsock", 95),
    HelperProto("tcp_sock", 96),
    HelperProto("skb_ecn_set_ce", 97),
    HelperProto("get_listener_sock", 98),
    HelperProto(
        "skc_lookup_tcp",
        99,
        (A.PTR_TO_CTX, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.ANYTHING, A.ANYTHING),
        RetKind.PTR_TO_SOCK_COMMON_OR_NULL,
        prog_types=_NET,
        pkt_access=True,
    ),
    HelperProto("tcp_check_syncookie", 100),
    HelperProto("sysctl_get_name", 101),
    HelperProto("sysctl_get_current_value", 102),
    HelperProto("sysctl_get_new_value", 103),
    HelperProto("sysctl_set_new_value", 104),
    HelperProto("strtol", 105),
    HelperProto("strtoul", 106),
    HelperProto("sk_storage_get", 107),
    HelperProto("sk_storage_delete", 108),
    HelperProto("send_signal", 109),
    HelperProto("tcp_gen_syncookie", 110),
    HelperProto("skb_output", 111),
    HelperProto("probe_read_user", 112),
    HelperProto("probe_read_kernel", 113),
    HelperProto("probe_read_user_str", 114),
    HelperProto("probe_read_kernel_str", 115),
    HelperProto("tcp_send_ack", 116),
    HelperProto("send_signal_thread", 117),
    HelperProto("jiffies64", 118, (), RetKind.INTEGER, ret_ctype="u64"),
    HelperProto("read_branch_records", 119),
    HelperProto("get_ns_current_pid_tgid", 120),
    HelperProto("xdp_output", 121),
    HelperProto("get_netns_cookie", 122),
    HelperProto("get_current_ancestor_cgroup_id", 123),
    HelperProto("sk_assign", 124),
    HelperProto("ktime_get_boot_ns", 125, (), RetKind.INTEGER, ret_ctype="u64"),
    HelperProto("seq_printf", 126),
    HelperProto("seq_write", 127),
    HelperProto("sk_cgroup_id", 128),
    HelperProto("sk_ancestor_cgroup_id", 129),
    # kernel/bpf/ringbuf.c, every program type (bpf_base_func_proto)
    HelperProto(
        "ringbuf_output",
        130,
        (A.CONST_MAP_PTR, A.PTR_TO_MEM, A.CONST_SIZE_OR_ZERO, A.ANYTHING),
        RetKind.INTEGER,
        map_types=_RINGBUF,
    ),
    HelperProto(
        "ringbuf_reserve",
        131,
        (A.CONST_MAP_PTR, A.CONST_ALLOC_SIZE_OR_ZERO, A.ANYTHING),
        RetKind.PTR_TO_RINGBUF_MEM_OR_NULL,
        map_types=_RINGBUF,
    ),
    HelperProto("ringbuf_submit", 132, (A.PTR_TO_RINGBUF_MEM, A.ANYTHING), RetKind.VOID),
    HelperProto("ringbuf_discard", 133, (A.PTR_TO_RINGBUF_MEM, A.ANYTHING), RetKind.VOID),
    HelperProto("ringbuf_query", 134),
    HelperProto("csum_level", 135),
    HelperProto("skc_to_tcp6_sock", 136),
    HelperProto("skc_to_tcp_sock", 137),
    HelperProto("skc_to_tcp_timewait_sock", 138),
    HelperProto("skc_to_tcp_request_sock", 139),
    HelperProto("skc_to_udp6_sock", 140),
    HelperProto("get_task_stack", 141),
    HelperProto("load_hdr_opt", 142),
    HelperProto("store_hdr_opt", 143),
    HelperProto("reserve_hdr_opt", 144),
    HelperProto("inode_storage_get", 145),
    HelperProto("inode_storage_delete", 146),
    HelperProto("d_path", 147),
    HelperProto("copy_from_user", 148),
    HelperProto("snprintf_btf", 149),
    HelperProto("seq_printf_btf", 150),
    HelperProto("skb_cgroup_classid", 151),
    HelperProto("redirect_neigh", 152),
    HelperProto("per_cpu_ptr", 153),
    HelperProto("this_cpu_ptr", 154),
    HelperProto("redirect_peer", 155),
    HelperProto("task_storage_get", 156),
    HelperProto("task_storage_delete", 157),
    HelperProto("get_current_task_btf", 158),
    HelperProto("bprm_opts_set", 159),
    HelperProto("ktime_get_coarse_ns", 160, (), RetKind.INTEGER, ret_ctype="u64"),
    HelperProto("ima_inode_hash", 161),
    HelperProto("sock_from_file", 162),
    # not modelled: its third argument is a u32 *mtu_len the kernel writes
    # (ARG_PTR_TO_FIXED_SIZE_MEM | MEM_UNINIT, bpf_xdp_check_mtu_proto in net/core/filter.c),
    # a kind of argument this table has no entry for; as "anything" it let `bpf_check_mtu`
    # pass a number there, which the kernel refuses ("R3 type=scalar expected=fp, ...")
    HelperProto("check_mtu", 163),
    HelperProto("for_each_map_elem", 164),
    HelperProto("snprintf", 165),
    HelperProto("sys_bpf", 166),
    HelperProto("btf_find_by_name_kind", 167),
    HelperProto("sys_close", 168),
    HelperProto("timer_init", 169),
    HelperProto("timer_set_callback", 170),
    HelperProto("timer_start", 171),
    HelperProto("timer_cancel", 172),
    HelperProto("get_func_ip", 173),
    HelperProto("get_attach_cookie", 174),
    HelperProto("task_pt_regs", 175),
    HelperProto("get_branch_snapshot", 176),
    HelperProto("trace_vprintk", 177),
    HelperProto("skc_to_unix_sock", 178),
    HelperProto("kallsyms_lookup_name", 179),
    HelperProto("find_vma", 180),
    # bpf_loop(u32 nr_loops, callback, void *callback_ctx, u64 flags): every program type
    # (bpf_base_func_proto); callback(u64 index, void *ctx) returns 0 (go on) or 1 (stop)
    HelperProto(
        "loop",
        181,
        (A.ANYTHING, A.PTR_TO_FUNC, A.PTR_TO_STACK_OR_NULL, A.ANYTHING),
        RetKind.INTEGER,
    ),
    HelperProto("strncmp", 182),
    HelperProto("get_func_arg", 183),
    HelperProto("get_func_ret", 184),
    HelperProto("get_func_arg_cnt", 185),
    HelperProto("get_retval", 186),
    HelperProto("set_retval", 187),
    HelperProto(
        "xdp_get_buff_len", 188, (A.PTR_TO_CTX,), RetKind.INTEGER, prog_types=_XDP, ret_ctype="u64"
    ),
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
    HelperProto("copy_from_user_task", 191),
    HelperProto("skb_set_tstamp", 192),
    HelperProto("ima_file_hash", 193),
    HelperProto("kptr_xchg", 194),
    HelperProto(
        "map_lookup_percpu_elem",
        195,
        (A.CONST_MAP_PTR, A.PTR_TO_MAP_KEY, A.ANYTHING),
        RetKind.PTR_TO_MAP_VALUE_OR_NULL,
        # per-CPU cgroup storage is read with bpf_get_local_storage instead
        map_types=PERCPU_MAP_TYPES - {MapType.PERCPU_CGROUP_STORAGE},
        pkt_access=True,
    ),
    HelperProto("skc_to_mptcp_sock", 196),
    HelperProto("dynptr_from_mem", 197),
    HelperProto("ringbuf_reserve_dynptr", 198),
    HelperProto("ringbuf_submit_dynptr", 199),
    HelperProto("ringbuf_discard_dynptr", 200),
    HelperProto("dynptr_read", 201),
    HelperProto("dynptr_write", 202),
    HelperProto("dynptr_data", 203),
    HelperProto("tcp_raw_gen_syncookie_ipv4", 204),
    HelperProto("tcp_raw_gen_syncookie_ipv6", 205),
    HelperProto("tcp_raw_check_syncookie_ipv4", 206),
    HelperProto("tcp_raw_check_syncookie_ipv6", 207),
    HelperProto("ktime_get_tai_ns", 208),
    HelperProto("user_ringbuf_drain", 209),
    HelperProto("cgrp_storage_get", 210),
    HelperProto("cgrp_storage_delete", 211),
)

HELPERS: dict[str, HelperProto] = {h.name: h for h in PROTOTYPES if h.modelled}
"""Name (without ``bpf_``) -> prototype of every helper bpfdsl models."""

HELPERS_BY_ID: dict[int, HelperProto] = {h.id: h for h in PROTOTYPES if h.modelled}
"""Helper id (``BPF_FUNC_*``) -> prototype of every helper bpfdsl models."""

BPF_FUNC_LOOP: Final = HELPERS["loop"].id  # bpf_loop: runs a callback subprogram
BPF_FUNC_TAIL_CALL: Final = HELPERS["tail_call"].id
# not modelled; the loader's arg:ctx probe calls it (kernel/features.py, as libbpf's)
BPF_FUNC_GET_FUNC_IP: Final = next(h.id for h in PROTOTYPES if h.name == "get_func_ip")


def kernel_helper_name(helper_id: int) -> str | None:
    """``bpf_<name>`` for a helper id of ``enum bpf_func_id`` (1..211 here), modelled or
    not; None for 0 (``BPF_FUNC_unspec``) and ids this table does not know."""
    if 1 <= helper_id < len(PROTOTYPES):
        return PROTOTYPES[helper_id].kernel_name
    return None


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
    # a program only looks inner maps up (the kernel's first switch: map_lookup_elem)
    MapType.ARRAY_OF_MAPS: frozenset({"map_lookup_elem"}),
    MapType.HASH_OF_MAPS: frozenset({"map_lookup_elem"}),
    MapType.PERF_EVENT_ARRAY: frozenset({"perf_event_output"}),
    MapType.RINGBUF: frozenset({"ringbuf_output", "ringbuf_reserve"}),
}


# Flags each XDP redirect helper accepts (net/core/filter.c): ``bpf_xdp_redirect`` returns
# XDP_ABORTED for any flag; ``__bpf_xdp_redirect_map`` (include/linux/filter.h) for a bit
# outside the action mask (XDP_ABORTED | XDP_DROP | XDP_PASS | XDP_TX: the fallback action)
# and the map's own flags: BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS for devmaps
# (``dev_map_redirect``), none for cpumap (``cpu_map_redirect``) and xskmap (``xsk_map_redirect``).
XDP_REDIRECT_FLAGS = 0


def redirect_map_flags(map_type: MapType) -> int:
    """The flag bits ``bpf_redirect_map`` accepts from XDP for a map of ``map_type``; any
    other bit makes the call return XDP_ABORTED."""
    extra = BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS if map_type in DEVMAP_TYPES else 0
    return XDP_REDIRECT_FALLBACK_MASK | extra


def callable_by_name(helper: HelperProto) -> bool:
    """Whether the language's ``bpf_NAME(...)`` form can call ``helper``: modelled, scalar
    arguments only (the context, where the prototype takes it first, is passed implicitly)
    and an integer or no result."""
    if helper.args is None or helper.ret not in (RetKind.INTEGER, RetKind.VOID):
        return False
    rest = helper.args[1:] if helper.args[:1] == (A.PTR_TO_CTX,) else helper.args
    return all(a is A.ANYTHING for a in rest)


# The helpers each program type's ``get_func_proto`` returns a proto for (Linux 6.18, a
# privileged load: CAP_BPF/CAP_PERFMON/CAP_NET_ADMIN), modelled or not: ``xdp_func_proto``,
# ``sk_msg_func_proto`` and ``sock_ops_func_proto`` in net/core/filter.c, each ending in
# ``bpf_sk_base_func_proto`` -> ``bpf_base_func_proto`` (kernel/bpf/helpers.c).  For any
# other id of ``enum bpf_func_id`` the kernel's check_helper_call says "program of this type
# cannot use helper bpf_NAME#ID"; tests/abi/test_helper_availability.py asks this kernel.
_BASE_FUNCS = frozenset(
    """
    map_lookup_elem map_update_elem map_delete_elem ktime_get_ns trace_printk
    get_prandom_u32 get_smp_processor_id tail_call get_current_pid_tgid
    get_current_uid_gid get_current_comm get_cgroup_classid perf_event_read
    perf_event_output get_current_task current_task_under_cgroup get_numa_node_id
    perf_event_read_value get_current_cgroup_id map_push_elem map_pop_elem map_peek_elem
    spin_lock spin_unlock strtol strtoul send_signal probe_read_user probe_read_kernel
    probe_read_user_str probe_read_kernel_str send_signal_thread jiffies64
    get_ns_current_pid_tgid get_current_ancestor_cgroup_id ktime_get_boot_ns
    ringbuf_output ringbuf_reserve ringbuf_submit ringbuf_discard ringbuf_query
    skc_to_tcp6_sock skc_to_tcp_sock skc_to_tcp_timewait_sock skc_to_tcp_request_sock
    skc_to_udp6_sock get_task_stack copy_from_user snprintf_btf per_cpu_ptr this_cpu_ptr
    task_storage_get task_storage_delete get_current_task_btf ktime_get_coarse_ns
    for_each_map_elem snprintf timer_init timer_set_callback timer_start timer_cancel
    task_pt_regs get_branch_snapshot trace_vprintk skc_to_unix_sock find_vma loop
    strncmp copy_from_user_task kptr_xchg map_lookup_percpu_elem skc_to_mptcp_sock
    dynptr_from_mem ringbuf_reserve_dynptr ringbuf_submit_dynptr ringbuf_discard_dynptr
    dynptr_read dynptr_write dynptr_data ktime_get_tai_ns user_ringbuf_drain
    cgrp_storage_get cgrp_storage_delete
    """.split()
)
PROG_TYPE_FUNCS: dict[ProgramType, frozenset[str]] = {
    ProgramType.XDP: _BASE_FUNCS
    | frozenset(
        """
        redirect csum_diff xdp_adjust_head redirect_map xdp_adjust_meta xdp_adjust_tail
        fib_lookup sk_lookup_tcp sk_lookup_udp sk_release skc_lookup_tcp tcp_check_syncookie
        tcp_gen_syncookie check_mtu xdp_get_buff_len xdp_load_bytes xdp_store_bytes
        tcp_raw_gen_syncookie_ipv4 tcp_raw_gen_syncookie_ipv6 tcp_raw_check_syncookie_ipv4
        tcp_raw_check_syncookie_ipv6
        """.split()
    ),
    ProgramType.SK_MSG: _BASE_FUNCS
    | frozenset(
        """
        msg_redirect_map msg_apply_bytes msg_cork_bytes msg_pull_data msg_redirect_hash
        msg_push_data msg_pop_data sk_storage_get sk_storage_delete get_netns_cookie
        """.split()
    ),
    ProgramType.SOCK_OPS: _BASE_FUNCS
    | frozenset(
        """
        get_socket_cookie setsockopt sock_map_update getsockopt sock_ops_cb_flags_set
        sock_hash_update get_local_storage tcp_sock sk_storage_get sk_storage_delete
        get_netns_cookie load_hdr_opt store_hdr_opt reserve_hdr_opt
        """.split()
    ),
}
"""Program type -> names (without ``bpf_``) of the helpers it may call (see above); the
program types bpfdsl checks only."""


def kernel_refuses_helper(helper_id: int, prog_type: ProgramType) -> str | None:
    """The kernel's words when a program of ``prog_type`` calls helper ``helper_id`` that it
    does not have (kernel/bpf/verifier.c check_helper_call, Linux 6.18): ``invalid func
    unknown#ID`` outside ``enum bpf_func_id`` (``func_id >= __BPF_FUNC_MAX_ID``), ``program
    of this type cannot use helper bpf_NAME#ID`` when the program type's
    ``get_func_proto`` has no proto for it (always for 0, ``BPF_FUNC_unspec``).  None when
    the kernel goes on to check the call's arguments (or ``prog_type`` is not in
    :data:`PROG_TYPE_FUNCS` and the helper is not modelled: not known here)."""
    if helper_id < 0 or helper_id >= len(PROTOTYPES):
        return f"invalid func unknown#{helper_id}"
    h = PROTOTYPES[helper_id]
    funcs = PROG_TYPE_FUNCS.get(prog_type)
    if (
        helper_id == 0
        or (funcs is not None and h.name not in funcs)
        or (funcs is None and h.modelled and not helper_allowed(h, prog_type))
    ):
        return f"program of this type cannot use helper {h.kernel_name}#{helper_id}"
    return None


def helper_allowed(helper: HelperProto, prog_type: ProgramType) -> bool:
    """Whether ``helper`` may be called from a program of ``prog_type``."""
    return helper.prog_types is None or prog_type in helper.prog_types


# Program types whose programs see packet pointers and may pass them to a helper with
# ``.pkt_access`` (kernel/bpf/verifier.c may_access_direct_pkt_data, BPF_READ): direct read
# (LWT_IN/OUT, LWT_SEG6LOCAL, SK_REUSEPORT, FLOW_DISSECTOR, CGROUP_SKB) and read + write
# (SCHED_CLS/ACT, XDP, LWT_XMIT, SK_SKB, SK_MSG).  CGROUP_SOCKOPT may pass them to any helper;
# every other type (SOCK_OPS among them, whose ctx has skb_data) to none.
PKT_ACCESS_PROG_TYPES = frozenset(
    {
        ProgramType.LWT_IN,
        ProgramType.LWT_OUT,
        ProgramType.LWT_SEG6LOCAL,
        ProgramType.SK_REUSEPORT,
        ProgramType.FLOW_DISSECTOR,
        ProgramType.CGROUP_SKB,
        ProgramType.SCHED_CLS,
        ProgramType.SCHED_ACT,
        ProgramType.XDP,
        ProgramType.LWT_XMIT,
        ProgramType.SK_SKB,
        ProgramType.SK_MSG,
    }
)


def helper_may_access_packet(helper: HelperProto, prog_type: ProgramType) -> bool:
    """Whether a program of ``prog_type`` may pass a packet pointer (PTR_TO_PACKET or
    PTR_TO_PACKET_META) to a memory, key or context argument of ``helper``: the kernel's
    ``may_access_direct_pkt_data(env, meta, BPF_READ)`` in check_func_arg, which is the
    proto's ``.pkt_access`` for the packet program types; otherwise the kernel refuses
    with "helper access to the packet is not allowed"."""
    if prog_type == ProgramType.CGROUP_SOCKOPT:
        return True
    return prog_type in PKT_ACCESS_PROG_TYPES and helper.pkt_access


# Program types that may update and delete sockmap/sockhash entries with the generic
# bpf_map_update_elem / bpf_map_delete_elem (kernel/bpf/verifier.c may_update_sockmap,
# Linux 6.18; BPF_PROG_TYPE_TRACING's BPF_TRACE_ITER is not modelled).  SOCK_OPS may only
# delete (it updates with bpf_sock_map_update / bpf_sock_hash_update).
SOCKMAP_UPDATERS = frozenset(
    {
        ProgramType.SOCKET_FILTER,
        ProgramType.SCHED_CLS,
        ProgramType.SCHED_ACT,
        ProgramType.XDP,
        ProgramType.SK_REUSEPORT,
        ProgramType.FLOW_DISSECTOR,
        ProgramType.SK_LOOKUP,
    }
)


def may_update_sockmap(prog_type: ProgramType, helper_name: str) -> bool:
    """Whether a ``prog_type`` program may pass a sockmap/sockhash to the generic
    ``helper_name`` (``map_update_elem`` / ``map_delete_elem``): kernel may_update_sockmap;
    the kernel refuses otherwise with "cannot update sockmap in this context" then
    "cannot pass map_type ... into func ..."."""
    if helper_name not in ("map_update_elem", "map_delete_elem"):
        return True
    if prog_type == ProgramType.SOCK_OPS:
        return helper_name == "map_delete_elem"
    return prog_type in SOCKMAP_UPDATERS


def map_fits_helper(map_type: MapType, helper_name: str) -> bool:
    """Whether a map of ``map_type`` may be passed to helper ``helper_name`` (both directions)."""
    allowed = MAP_HELPERS.get(map_type)
    if allowed is not None and helper_name not in allowed:
        return False
    h = HELPERS.get(helper_name)
    return h is None or h.map_types is None or map_type in h.map_types
