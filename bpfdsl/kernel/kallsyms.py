"""Kernel symbol addresses (``/proc/kallsyms``) to tell which helper a call of the
kernel's xlated instructions makes.

After the verifier, a helper call's ``imm`` is the helper function's address minus
``__bpf_call_base`` (``BPF_CALL_IMM``, include/linux/filter.h), and ``bpf_redirect_map``
calls the map's own ``map_redirect`` op (kernel/bpf/verifier.c do_misc_fixups), so the
BPF_FUNC_* id is gone; ``bpftool prog dump xlated`` names the call through kallsyms the same
way.  Addresses read 0 without CAP_SYSLOG (kptr_restrict): then nothing is told.
"""

from __future__ import annotations

from functools import lru_cache

from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.insn import Insn

KALLSYMS = "/proc/kallsyms"
CALL_BASE = "__bpf_call_base"

# kernel function -> the helper whose call the verifier turns into it (XDP's redirects)
XLATED_HELPERS: dict[str, int] = {
    "bpf_xdp_redirect": HELPERS["redirect"].id,
    "bpf_xdp_redirect_map": HELPERS["redirect_map"].id,
    "dev_map_redirect": HELPERS["redirect_map"].id,
    "dev_hash_map_redirect": HELPERS["redirect_map"].id,
    "cpu_map_redirect": HELPERS["redirect_map"].id,
    "xsk_map_redirect": HELPERS["redirect_map"].id,
}


@lru_cache(maxsize=1)
def _addresses() -> tuple[int, dict[int, str]] | None:
    """(``__bpf_call_base``'s address, address -> name of :data:`XLATED_HELPERS`'s
    functions), None when kallsyms cannot be read or hides addresses."""
    base, found = 0, {}
    try:
        with open(KALLSYMS, encoding="ascii", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                name = parts[2]
                if name == CALL_BASE:
                    base = int(parts[0], 16)
                elif name in XLATED_HELPERS and len(parts) == 3:
                    found[int(parts[0], 16)] = name
    except (OSError, ValueError):
        return None
    if base == 0:
        return None
    return base, found


def xlated_helper(x: Insn) -> int | None:
    """The BPF_FUNC_* id of xlated helper call ``x`` when it is one of
    :data:`XLATED_HELPERS`, None otherwise (or when kallsyms cannot tell)."""
    got = _addresses()
    if got is None:
        return None
    base, found = got
    name = found.get((base + x.imm) & 0xFFFFFFFFFFFFFFFF)
    return None if name is None else XLATED_HELPERS[name]
