"""prog_array slots (kernel side): the programs ``bpf_tail_call`` jumps to.

A BPF_MAP_TYPE_PROG_ARRAY maps a u32 slot to a program: user space writes a program fd
(BPF_MAP_UPDATE_ELEM) and reads back its id (kernel/bpf/arraymap.c, prog_fd_array_*).
The kernel accepts a program only if it matches the map's owner -- the first program that
uses the map or was put into it: same program type, expected attach type and frags flag
(kernel/bpf/core.c ``bpf_prog_map_compatible``); otherwise the update is a bare EINVAL,
which this module explains.  The loader fills slots from the object (``.rel.maps``).
"""

from __future__ import annotations

import errno as E
import os
import struct
from dataclasses import dataclass

from bpfdsl.abi.map_types import MapType
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import require_map


@dataclass(frozen=True, slots=True)
class ProgArraySlot:
    """One filled slot: ``index``, the ``prog_id`` of the program in it and its name
    (``bpf_prog_info.name``, at most 15 characters; "" when the kernel would not say)."""

    index: int
    prog_id: int
    prog_name: str = ""


def _key(map_name: str, info: S.MapInfo, index: int) -> bytes:
    if not 0 <= index < info.max_entries:
        raise UsageError(
            error(
                "bad-slot",
                f"prog_array '{map_name}' has slots 0..{info.max_entries - 1}, not {index}",
            )
        )
    return struct.pack("<I", index)


def prog_array_set(
    map_fd: int, index: int, prog_fd: int, *, map_name: str = "prog_array", prog_name: str = ""
) -> None:
    """Put the program ``prog_fd`` into slot ``index`` (u32) of the prog_array ``map_fd``.

    Raises UsageError (not a prog_array, slot past max_entries) and DiagnosticError when
    the kernel refuses the program: EINVAL means its type, expected attach type or frags
    flag differ from the programs the map already serves."""
    info = require_map(map_fd, (MapType.PROG_ARRAY,), map_name)
    key = _key(map_name, info, index)
    try:
        S.map_update(map_fd, key, struct.pack("<I", int(prog_fd)))
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        hint = None
        if e.errno == E.EINVAL:
            hint = (
                "a prog_array holds programs of one kind: the same program type, attach "
                "type and frags setting as the program that tail-calls through it (and the "
                "programs already in it); load it as that kind"
            )
        raise DiagnosticError(
            error(
                "prog-array-refused",
                f"prog_array '{map_name}' slot {index} = '{prog_name or prog_fd}': the kernel "
                f"refused it: {os.strerror(e.errno)}",
                hint=hint,
            )
        ) from None


def prog_array_delete(map_fd: int, index: int, *, map_name: str = "prog_array") -> bool:
    """Empty slot ``index``; False when it was empty already."""
    info = require_map(map_fd, (MapType.PROG_ARRAY,), map_name)
    return S.map_delete(map_fd, _key(map_name, info, index))


def prog_array_slots(map_fd: int, *, map_name: str = "prog_array") -> list[ProgArraySlot]:
    """The filled slots, in index order (a lookup from user space gives the program id)."""
    info = require_map(map_fd, (MapType.PROG_ARRAY,), map_name)
    out = []
    for index in range(info.max_entries):
        raw = S.map_lookup(map_fd, struct.pack("<I", index), 4)
        if raw is not None:
            prog_id = struct.unpack("<I", raw)[0]
            out.append(ProgArraySlot(index, prog_id, _prog_name(prog_id)))
    return out


def _prog_name(prog_id: int) -> str:
    try:
        with S.get_fd_by_id("prog", prog_id) as fd:
            return S.prog_info(fd).name.decode(errors="replace")
    except S.BpfError:
        return ""
