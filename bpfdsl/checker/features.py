"""Minimum kernel versions of instruction-set and helper features (for ``--kernel X.Y``).

The analysis itself models Linux 6.x; when a user declares an older target kernel, uses
of anything newer are reported with the version that introduced it.  Versions from the
kernel's git history (the release that merged each feature): JMP32 5.1, bounded loops
and xskmap lookups from programs 5.3 (FIELD-BUGS B10), devmap/cpumap second-stage
programs 5.8/5.9, atomic fetch/xchg/cmpxchg and bpf_check_mtu 5.12, XDP multi-buffer
helpers 5.18, cpu v4 instructions (sign-extending loads/moves, sdiv/smod, bswap) 6.6.
"""

from __future__ import annotations

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType

Version = tuple[int, int]

HELPER_MIN: dict[str, Version] = {
    "check_mtu": (5, 12),
    "fib_lookup": (4, 18),  # bpf_fib_lookup (XDP and tc)
    "xdp_get_buff_len": (5, 18),
    "xdp_load_bytes": (5, 18),
    "xdp_store_bytes": (5, 18),
    "map_lookup_percpu_elem": (5, 19),
    "ktime_get_coarse_ns": (5, 11),
    "ktime_get_boot_ns": (5, 8),
    "jiffies64": (5, 5),
    "get_current_pid_tgid": (6, 10),  # bpf_base_func_proto (every program type) since 6.10
}
LOOKUP_MIN: dict[int, Version] = {
    MapType.XSKMAP: (5, 3),
    MapType.DEVMAP: (5, 8),
    MapType.DEVMAP_HASH: (5, 8),
}
ATTACH_MIN: dict[AttachType, Version] = {
    AttachType.XDP_DEVMAP: (5, 8),
    AttachType.XDP_CPUMAP: (5, 9),
}
JMP32_MIN: Version = (5, 1)
LOOPS_MIN: Version = (5, 3)
ATOMIC_FETCH_MIN: Version = (5, 12)
CPU_V4_MIN: Version = (6, 6)


def parse_version(text: str) -> Version:
    """``"5.10"`` -> (5, 10); raises ValueError for anything else."""
    parts = text.strip().split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ValueError(f"kernel version must look like 5.10, got {text!r}")
    return int(parts[0]), int(parts[1])


def fmt(v: Version) -> str:
    return f"{v[0]}.{v[1]}"
