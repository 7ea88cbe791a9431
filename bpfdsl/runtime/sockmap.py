"""sk_msg programs on sockmap/sockhash maps (kernel side).

An sk_msg program is attached to a *map*, not to a socket: BPF_PROG_ATTACH with
``target_fd`` = the sockmap/sockhash, ``attach_bpf_fd`` = the program and attach type
BPF_SK_MSG_VERDICT (include/uapi/linux/bpf.h; net/core/sock_map.c sock_map_prog_update).
It then runs for every sendmsg on every TCP socket in that map.  Sockets get into the map
from a sock_ops program (see :mod:`bpfdsl.runtime.cgroup`) or from user space with
:func:`sockmap_add` (value = the socket's fd, 4 or 8 bytes).
"""

from __future__ import annotations

import socket
import struct

from bpfdsl.abi.map_types import SOCK_MAP_TYPES, MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import require_map

SOCK_MAP_KINDS = SOCK_MAP_TYPES


def _require_sk_msg(prog_fd: int, prog_name: str) -> None:
    t = S.prog_info(prog_fd).type
    if t != ProgramType.SK_MSG:
        try:
            have = ProgramType(t).name.lower()
        except ValueError:
            have = str(t)
        raise DiagnosticError(
            error(
                "not-sk-msg",
                f"program '{prog_name}' is a {have} program; only sk_msg programs attach "
                "to a sockmap/sockhash for BPF_SK_MSG_VERDICT",
                hint='declare it as `sk_msg fn NAME(msg)` (C: SEC("sk_msg"))',
            )
        )


def sk_msg_attach(
    map_fd: int | S.Fd, prog_fd: int, *, map_name: str = "sockmap", prog_name: str = ""
) -> None:
    """Attach sk_msg program ``prog_fd`` to sockmap/sockhash ``map_fd`` (BPF_SK_MSG_VERDICT).

    A map holds one sk_msg program; attaching another replaces it.  Only sockets added to
    the map afterwards run it (attach before sockets arrive).  Raises DiagnosticError
    for a wrong map kind or program type, BpfPermissionError without privileges.
    """
    require_map(map_fd, SOCK_MAP_KINDS, map_name)
    _require_sk_msg(prog_fd, prog_name or "?")
    try:
        S.prog_attach(map_fd, prog_fd, AttachType.SK_MSG_VERDICT)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error("attach-failed", f"attaching sk_msg '{prog_name}' to '{map_name}': {e}")
        ) from None


def sk_msg_detach(
    map_fd: int | S.Fd, prog_fd: int, *, map_name: str = "sockmap", prog_name: str = ""
) -> bool:
    """Detach sk_msg program ``prog_fd`` from the map; False when it was not attached.

    The kernel hands a map's programs to a socket when the socket *enters* the map
    (net/core/sock_map.c sock_map_link): connections made after the detach are plain TCP,
    sockets already in the map keep the program until they leave it (close or delete).
    """
    require_map(map_fd, SOCK_MAP_KINDS, map_name)
    try:
        return S.prog_detach_if_attached(map_fd, AttachType.SK_MSG_VERDICT, prog_fd)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error("detach-failed", f"detaching sk_msg '{prog_name}' from '{map_name}': {e}")
        ) from None


def sockmap_add(
    map_fd: int, key: bytes | int, sock: socket.socket | int, *, map_name: str = "sockmap"
) -> None:
    """Insert a TCP socket (established or listening) under ``key``.

    ``key``: bytes of the map's key size (sockhash with struct keys) or an int packed
    little-endian to the key size.  Raises DiagnosticError (EOPNOTSUPP: not a TCP/UDP socket
    in a supported state; key size mismatch).
    """
    info = require_map(map_fd, SOCK_MAP_KINDS, map_name)
    kb = key if isinstance(key, bytes) else int(key).to_bytes(info.key_size, "little")
    if len(kb) != info.key_size:
        raise DiagnosticError(
            error("key-size", f"'{map_name}' has {info.key_size}-byte keys, got {len(kb)}")
        )
    fd = sock.fileno() if isinstance(sock, socket.socket) else int(sock)
    value = struct.pack("<Q", fd)[: info.value_size]
    try:
        S.map_update(map_fd, kb, value)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error(
                "sockmap-update",
                f"adding socket fd {fd} to '{map_name}': {e}",
                hint="the socket must be TCP (established or listening) or UDP",
            )
        ) from None


def sockmap_count(map_fd: int, *, map_name: str = "sockmap", limit: int = 1 << 20) -> int:
    """Number of sockets in a sockhash (keys walked with GET_NEXT_KEY) or sockmap (slots
    whose lookup succeeds); at most ``limit`` keys are visited."""
    info = require_map(map_fd, SOCK_MAP_KINDS, map_name)
    n, k = 0, S.map_get_next_key(map_fd, None, info.key_size)
    while k is not None and n < limit:
        if info.type == MapType.SOCKHASH or _sockmap_slot_used(map_fd, k, info.value_size):
            n += 1
        k = S.map_get_next_key(map_fd, k, info.key_size)
    return n


def _sockmap_slot_used(map_fd: int, key: bytes, value_size: int) -> bool:
    try:
        return S.map_lookup(map_fd, key, value_size) is not None
    except S.BpfError:
        return False
