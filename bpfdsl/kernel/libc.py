"""The one handle on the C library, and the system calls bpfdsl makes through it (kernel side).

``LIBC`` is ``dlopen(NULL)`` through ctypes with ``use_errno=True`` (the C library this
process already links), opened once per process.  Every other module that needs a system
call Python's ``os``/``socket`` do not offer calls a function here: :mod:`bpfdsl.kernel.syscall`
(``bpf(2)`` through :func:`syscall`), :mod:`bpfdsl.kernel.netlink` (setns/unshare/mount for
network namespaces), the runtime's bpffs and cgroup2 mounts and AF_XDP ``bind(2)``.

Each wrapper raises ``OSError(errno, "<what>: <strerror>")`` on failure (``what`` defaults
to the call's name); constants are the kernel's (linux/sched.h, linux/mount.h,
include/uapi/linux/magic.h).
"""

from __future__ import annotations

import ctypes
import os

CLONE_NEWNET = 0x40000000  # linux/sched.h
MS_BIND = 4096  # linux/mount.h
MNT_DETACH = 2  # linux/mount.h (umount2 flags)
_STATFS_SIZE = 128  # bytes: struct statfs is 120 on x86_64; f_type (a long) comes first

LIBC = ctypes.CDLL(None, use_errno=True)
LIBC.syscall.restype = ctypes.c_long


def get_errno() -> int:
    """errno of the last call made through :data:`LIBC` in this thread."""
    return ctypes.get_errno()


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def syscall(nr: int, *args: object) -> int:
    """``syscall(nr, args...)`` (ctypes arguments); the raw result, -1 with :func:`get_errno`
    set on failure (callers retry EINTR/EAGAIN as the call requires)."""
    return LIBC.syscall(nr, *args)


def mount(
    source: bytes, target: str, fstype: bytes, flags: int = 0, *, what: str = "mount"
) -> None:
    """mount(2) ``source`` on directory ``target`` as ``fstype`` (``b"bpf"``, ``b"cgroup2"``,
    ``b"none"`` with ``MS_BIND``).  Raises OSError."""
    _check(LIBC.mount(source, os.fsencode(target), fstype, flags, None), what)


def umount2(target: str, flags: int = 0) -> bool:
    """umount2(2); True when it succeeded (callers that clean up ignore failures)."""
    return LIBC.umount2(os.fsencode(target), flags) == 0


def statfs_type(path: str) -> int | None:
    """``f_type`` of statfs(2) on ``path`` (a filesystem magic of linux/magic.h, as u32),
    or None when statfs fails."""
    st = ctypes.create_string_buffer(_STATFS_SIZE)
    if LIBC.statfs(os.fsencode(path), st) != 0:
        return None
    return ctypes.c_long.from_buffer(st).value & 0xFFFFFFFF


def setns(fd: int, nstype: int = CLONE_NEWNET, *, what: str = "setns") -> None:
    """setns(2): move the calling thread into the namespace open at ``fd``.  Raises OSError."""
    _check(LIBC.setns(fd, nstype), what)


def unshare(flags: int = CLONE_NEWNET, *, what: str = "unshare(CLONE_NEWNET)") -> None:
    """unshare(2) for the calling thread.  Raises OSError."""
    _check(LIBC.unshare(flags), what)


def bind(fd: int, addr: bytes, *, what: str = "bind") -> None:
    """bind(2) socket ``fd`` to the raw ``struct sockaddr`` bytes ``addr`` (for address
    families Python's socket module cannot spell, e.g. AF_XDP's sockaddr_xdp).  Raises OSError."""
    buf = ctypes.create_string_buffer(addr, len(addr))
    _check(LIBC.bind(fd, buf, len(addr)), what)
