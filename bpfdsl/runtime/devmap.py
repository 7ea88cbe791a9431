"""devmap / devmap_hash entries (kernel side): the egress ports of XDP_REDIRECT.

Takes an open devmap fd and writes ``struct bpf_devmap_val`` entries (include/uapi/linux/bpf.h:
``__u32 ifindex; union { int fd; __u32 id; } bpf_prog``): interface by name (resolved in the
*calling thread's* network namespace, as the kernel resolves the ifindex there too) and an
optional devmap program (XDP, expected_attach_type BPF_XDP_DEVMAP) run before transmit.
Kernel rules (kernel/bpf/devmap.c, 6.x): key size 4, value size 4 or 8; an unknown ifindex
or a program of the wrong flavour is a bare EINVAL, which this module explains instead.
"""

from __future__ import annotations

import errno as E
import struct
from dataclasses import dataclass

from bpfdsl.abi.map_types import DEVMAP_TYPES, MapType
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.netlink import ifindex as _ifindex
from bpfdsl.kernel.netlink import ifname as _ifname
from bpfdsl.runtime.cpumap import check_slot, entry_value, require_map

DEVMAP_KINDS = DEVMAP_TYPES


@dataclass(frozen=True, slots=True)
class DevmapEntry:
    """One devmap slot: ``key`` (array index or hash key), egress ``ifindex`` and its name
    in the caller's namespace, ``prog_id`` of the devmap program (0 when none)."""

    key: int
    ifindex: int
    ifname: str
    prog_id: int = 0


def resolve_interface(dev: str | int) -> int:
    """Interface name or ifindex -> ifindex in the calling thread's network namespace.

    Raises DiagnosticError (``unknown-interface``) listing the interfaces that exist.
    """
    if isinstance(dev, int) or (isinstance(dev, str) and dev.isdigit()):
        idx = int(dev)
        if _ifname(idx) == f"if{idx}":
            raise DiagnosticError(
                error(
                    "unknown-interface",
                    f"no network interface with ifindex {idx} in this network namespace",
                    hint="give the interface by name (see `ip link`)",
                )
            )
        return idx
    return _ifindex(dev)


def devmap_set(
    map_fd: int | S.Fd,
    key: int,
    dev: str | int,
    prog_fd: int | None = None,
    *,
    map_name: str = "devmap",
    prog_name: str = "",
) -> int:
    """Make slot ``key`` send to interface ``dev`` (name or ifindex), optionally through the
    devmap program ``prog_fd`` (XDP, BPF_XDP_DEVMAP).  Returns the egress ifindex.

    For a devmap (array) ``key`` is the slot 0..max_entries-1; for a devmap_hash any u32
    (commonly the ingress ifindex).  Raises DiagnosticError on an unknown interface, a
    program of the wrong flavour, a slot out of range.
    """
    info = require_map(map_fd, DEVMAP_KINDS, map_name)
    idx = resolve_interface(dev)
    if info.type == MapType.DEVMAP:
        check_slot(info, key, map_name, "devmap-key", "slot")
    value = entry_value(info, idx, prog_fd, AttachType.XDP_DEVMAP, map_name, prog_name)
    try:
        S.map_update(map_fd, struct.pack("<I", key), value)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        why = {
            E.EINVAL: f"the kernel refused interface {dev} (ifindex {idx}) or the program",
            E.E2BIG: f"slot {key} is beyond max_entries",
            E.ENOSPC: "the map is full",
        }.get(e.errno, str(e))
        raise DiagnosticError(
            error("devmap-update", f"devmap '{map_name}' key {key}: {why}")
        ) from None
    return idx


def devmap_delete(map_fd: int, key: int, *, map_name: str = "devmap") -> bool:
    """Remove slot ``key``; False when it was empty.

    A devmap's (array) delete succeeds whether or not the slot was filled
    (kernel/bpf/devmap.c dev_map_delete_elem), so its slot is looked up first
    (:func:`bpfdsl.kernel.syscall.map_delete_slot`); a devmap_hash says ENOENT itself.  Raises UsageError (``devmap-key``) for a devmap slot
    outside 0..max_entries-1 (the kernel's EINVAL)."""
    info = require_map(map_fd, DEVMAP_KINDS, map_name)
    key_bytes = struct.pack("<I", key)
    if info.type == MapType.DEVMAP:
        check_slot(info, key, map_name, "devmap-key", "slot")
    return S.map_delete_slot(map_fd, key_bytes, info.type, info.value_size)


def devmap_entries(map_fd: int, *, map_name: str = "devmap") -> list[DevmapEntry]:
    """The filled slots, in key order (interface names as seen from the caller's namespace)."""
    info = require_map(map_fd, DEVMAP_KINDS, map_name)
    keys: list[int] = []
    if info.type == MapType.DEVMAP:
        keys = list(range(info.max_entries))
    else:
        k = S.map_get_next_key(map_fd, None, 4)
        while k is not None and len(keys) < info.max_entries:
            keys.append(struct.unpack("<I", k)[0])
            k = S.map_get_next_key(map_fd, k, 4)
    out = []
    for key in sorted(keys):
        raw = S.map_lookup(map_fd, struct.pack("<I", key), info.value_size)
        if raw is None:
            continue
        idx, prog_id = struct.unpack("<II", raw.ljust(8, b"\0")[:8])
        out.append(DevmapEntry(key, idx, _ifname(idx), prog_id))
    return out
