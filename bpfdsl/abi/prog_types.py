"""Program kinds: ``enum bpf_prog_type``, ``bpf_attach_type``, ``bpf_link_type``, the
return values and context values of the kinds bpfdsl compiles (``xdp_action``, ``sk_action``,
``BPF_SOCK_OPS_*``, ``BPF_TCP_*``), and the program-kind table :data:`PROGRAM_KINDS`
(language keyword -> ELF section and its matching rule, program type, expected attach type,
context struct, allowed return values), modelled on libbpf's ``section_defs[]``; the
loader reads section names through :func:`kind_for_section`.

Values from include/uapi/linux/bpf.h (checked against this machine's /sys/kernel/btf/vmlinux
by tests/abi/test_uapi.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Final

from bpfdsl.abi.flags import BPF_F_XDP_HAS_FRAGS


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


# ---- program kinds: the one table of program types ----


@dataclass(frozen=True, slots=True)
class ProgramKind:
    """One program kind of the language / one ELF section prefix (libbpf ``section_defs``).

    ``keyword``: how the language spells it (``xdp``, ``xdp(cpumap)``, ``sk_msg``...).
    ``section``: the ELF section name libbpf expects.  ``ctx``: the kernel context struct.
    ``returns``: the return values the kernel accepts (name -> value); sema, checker and
    interpreter all use it.  ``prog_flags``: BPF_PROG_LOAD prog_flags (frags).
    ``extras``: the section's matching rule (libbpf ``sec_def_matches``): False, the name
    exactly; True, the name or ``section/anything`` (libbpf's ``"type+"`` form; libbpf 1.x
    keeps it for fewer kinds than bpfdsl reads, which follows the pre-1.0 sloppy prefixes).
    """

    keyword: str
    section: str
    program_type: ProgramType
    attach_type: AttachType | None
    ctx: str
    returns: dict[str, int]
    prog_flags: int = 0
    test_run: bool = True  # does BPF_PROG_TEST_RUN accept it on this kernel?
    extras: bool = False  # section/anything matches too (see above)


_XDP_ALL = {f"XDP_{a.name}": a.value for a in XdpAction}
_XDP_DEVMAP = {k: v for k, v in _XDP_ALL.items() if k in ("XDP_ABORTED", "XDP_DROP", "XDP_PASS")}
# cpumap programs: XDP_TX is not supported on the remote CPU (kernel cpu_map_bpf_prog_run_xdp
# treats it as an invalid action); redirect is (5.15+).
_XDP_CPUMAP = {k: v for k, v in _XDP_ALL.items() if k != "XDP_TX"}
_SK: dict[str, int] = {"SK_DROP": SkAction.DROP, "SK_PASS": SkAction.PASS}

PROGRAM_KINDS: tuple[ProgramKind, ...] = (
    ProgramKind("xdp", "xdp", ProgramType.XDP, AttachType.XDP, "xdp_md", _XDP_ALL, extras=True),
    ProgramKind(
        "xdp(frags)",
        "xdp.frags",
        ProgramType.XDP,
        AttachType.XDP,
        "xdp_md",
        _XDP_ALL,
        prog_flags=BPF_F_XDP_HAS_FRAGS,
        extras=True,
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
        extras=True,
    ),
    ProgramKind(
        "sock_ops",
        "sockops",
        ProgramType.SOCK_OPS,
        AttachType.CGROUP_SOCK_OPS,
        "bpf_sock_ops",
        {"0": 0, "1": 1},
        test_run=False,
        extras=True,
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
    ProgramKind("", "tc", ProgramType.SCHED_CLS, None, "__sk_buff", {}, extras=True),
    ProgramKind("", "classifier", ProgramType.SCHED_CLS, None, "__sk_buff", {}, extras=True),
    ProgramKind("", "socket", ProgramType.SOCKET_FILTER, None, "__sk_buff", {}, extras=True),
)


def kind_for_keyword(keyword: str) -> ProgramKind | None:
    """The :class:`ProgramKind` the language spells ``keyword`` (``"xdp(cpumap)"``), or None."""
    for k in PROGRAM_KINDS:
        if k.keyword and k.keyword == keyword:
            return k
    return None


def kind_for_section(section: str) -> ProgramKind | None:
    """The kind of an ELF section name, libbpf style (``find_sec_def``): an exact name first,
    then ``section/anything`` of a kind with :attr:`ProgramKind.extras`.

    ``xdp/cpumap`` matches exactly; ``xdp/foo`` is plain ``xdp`` (any suffix after ``xdp/``
    but the cpumap/devmap ones); ``sockops/x`` is sock_ops.  Returns None for sections that
    hold no program of a known type.
    """
    for k in PROGRAM_KINDS:
        if section == k.section:
            return k
    for k in PROGRAM_KINDS:
        if k.extras and section.startswith(k.section + "/"):
            return k
    return None


# the licences the kernel counts as GPL-compatible (include/linux/license.h
# license_is_gpl_compatible): a program with another may not call GPL-only helpers
GPL_COMPATIBLE_LICENSES: frozenset[str] = frozenset(
    {"GPL", "GPL v2", "GPL and additional rights", "Dual BSD/GPL", "Dual MIT/GPL", "Dual MPL/GPL"}
)


def license_is_gpl_compatible(lic: str | None) -> bool:
    """Whether the kernel takes ``lic`` (a ``license`` section's text; None: none) as
    GPL-compatible, as include/linux/license.h does."""
    return (lic or "") in GPL_COMPATIBLE_LICENSES
