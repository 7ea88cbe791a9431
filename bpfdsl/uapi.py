"""Kernel ABI constants (leaf module): the one place for numbers from linux/bpf.h.

Names are the kernel's minus their prefix (``BPF_PROG_TYPE_XDP`` -> ``ProgramType.XDP``).
Values are from include/uapi/linux/bpf.h and linux/if_link.h (checked against this
machine's /sys/kernel/btf/vmlinux by tests/test_uapi.py).

Also here: the program-kind table :data:`PROGRAM_KINDS` (language keyword -> ELF section,
program type, expected attach type, context struct, allowed return values), modelled on
libbpf's ``section_defs``; the loader reads section names through :func:`kind_for_section`.
"""

from __future__ import annotations

from enum import IntEnum, IntFlag

from bpfdsl.record import FrozenRecord

try:  # CPython >= 3.11: the builder the stdlib uses for its own large enums (HTTPStatus)
    from enum import _simple_enum
except ImportError:  # pragma: no cover
    _simple_enum = None


def _int_enum(cls: type) -> type[IntEnum]:
    """``class NAME(IntEnum)`` from the plain class ``cls``, built in half the time (163
    members here: ~1.5 ms of every CLI start) with ``enum._simple_enum``; the same class
    (members, values, names, repr, lookups: tests/test_load_fast.py checks it with
    ``enum._test_simple_enum``).  Without it (Python 3.10): the functional API."""
    if _simple_enum is not None:
        return _simple_enum(IntEnum)(cls)
    members = {k: v for k, v in vars(cls).items() if not k.startswith("_")}  # pragma: no cover
    e = IntEnum(cls.__name__, members, module=cls.__module__, qualname=cls.__qualname__)
    e.__doc__ = cls.__doc__  # pragma: no cover
    return e  # pragma: no cover


@_int_enum
class BpfCmd:
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


@_int_enum
class MapType:
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


@_int_enum
class ProgramType:
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


@_int_enum
class AttachType:
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


@_int_enum
class LinkType:
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


@_int_enum
class XdpAction:
    """``enum xdp_action``: XDP program return values."""

    ABORTED = 0
    DROP = 1
    PASS = 2
    TX = 3
    REDIRECT = 4


@_int_enum
class SkAction:
    """``enum sk_action``: sk_msg / sk_skb verdicts."""

    DROP = 0
    PASS = 1


@_int_enum
class SockOpsOp:
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


@_int_enum
class TcpState:
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


# ---- flags (bpf.h / if_link.h) ----
BPF_ANY = 0  # map update: create or replace
BPF_NOEXIST = 1  # map update: create only
BPF_EXIST = 2  # map update: replace only
BPF_F_LOCK = 4

BPF_F_INGRESS = 1 << 0  # redirect helpers: to the ingress path of the target
BPF_F_BROADCAST = 1 << 3  # redirect_map on devmap: every entry
BPF_F_EXCLUDE_INGRESS = 1 << 4  # with BPF_F_BROADCAST: not the ingress device
XDP_REDIRECT_FALLBACK_MASK = 0x3  # low bits of redirect_map flags: action when the slot is empty

BPF_F_NO_PREALLOC = 1 << 0  # map_flags (hash maps, required for lpm_trie)
BPF_F_RDONLY = 1 << 3
BPF_F_WRONLY = 1 << 4
BPF_F_RDONLY_PROG = 1 << 7  # map_flags for .rodata
BPF_F_MMAPABLE = 1 << 10

BPF_F_XDP_HAS_FRAGS = 1 << 5  # prog_flags for xdp.frags sections
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
# class (low 3 bits of the opcode)
BPF_LD, BPF_LDX, BPF_ST, BPF_STX, BPF_ALU, BPF_JMP, BPF_JMP32, BPF_ALU64 = range(8)
# size (bits 3-4, load/store)
BPF_W, BPF_H, BPF_B, BPF_DW = 0x00, 0x08, 0x10, 0x18
# mode (bits 5-7, load/store)
BPF_IMM, BPF_ABS, BPF_IND, BPF_MEM, BPF_MEMSX, BPF_ATOMIC = 0x00, 0x20, 0x40, 0x60, 0x80, 0xC0
# source (bit 3, alu/jmp)
BPF_K, BPF_X = 0x00, 0x08
BPF_TO_LE, BPF_TO_BE = 0x00, 0x08  # BPF_END source bit
# alu ops (bits 4-7)
BPF_ADD, BPF_SUB, BPF_MUL, BPF_DIV = 0x00, 0x10, 0x20, 0x30
BPF_OR, BPF_AND, BPF_LSH, BPF_RSH = 0x40, 0x50, 0x60, 0x70
BPF_NEG, BPF_MOD, BPF_XOR, BPF_MOV = 0x80, 0x90, 0xA0, 0xB0
BPF_ARSH, BPF_END = 0xC0, 0xD0
# jmp ops (bits 4-7)
BPF_JA, BPF_JEQ, BPF_JGT, BPF_JGE, BPF_JSET = 0x00, 0x10, 0x20, 0x30, 0x40
BPF_JNE, BPF_JSGT, BPF_JSGE, BPF_CALL, BPF_EXIT = 0x50, 0x60, 0x70, 0x80, 0x90
BPF_JLT, BPF_JLE, BPF_JSLT, BPF_JSLE = 0xA0, 0xB0, 0xC0, 0xD0
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

MAX_BPF_STACK = 512  # bytes of stack per program (kernel limit)
BPF_MAXINSNS = 4096  # unprivileged insn limit; privileged: BPF_COMPLEXITY_LIMIT_INSNS
BPF_COMPLEXITY_LIMIT_INSNS = 1_000_000  # processed-insn budget of the verifier

# ---- program kinds: the one table of program types ----


class ProgramKind(FrozenRecord):
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
    prog_flags: int
    test_run: bool  # does BPF_PROG_TEST_RUN accept it on this kernel?

    __slots__ = (
        "keyword",
        "section",
        "program_type",
        "attach_type",
        "ctx",
        "returns",
        "prog_flags",
        "test_run",
    )

    def __init__(
        self,
        keyword: str,
        section: str,
        program_type: ProgramType,
        attach_type: AttachType | None,
        ctx: str,
        returns: dict[str, int],
        prog_flags: int = 0,
        test_run: bool = True,
    ) -> None:
        self.keyword = keyword
        self.section = section
        self.program_type = program_type
        self.attach_type = attach_type
        self.ctx = ctx
        self.returns = returns
        self.prog_flags = prog_flags
        self.test_run = test_run


_XDP_ALL = {f"XDP_{a.name}": a.value for a in XdpAction}
_XDP_DEVMAP = {k: v for k, v in _XDP_ALL.items() if k in ("XDP_ABORTED", "XDP_DROP", "XDP_PASS")}
# cpumap programs: XDP_TX is not supported on the remote CPU (kernel cpu_map_bpf_prog_run_xdp
# treats it as an invalid action); redirect is (5.15+).
_XDP_CPUMAP = {k: v for k, v in _XDP_ALL.items() if k != "XDP_TX"}
_SK = {"SK_DROP": SkAction.DROP, "SK_PASS": SkAction.PASS}

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
