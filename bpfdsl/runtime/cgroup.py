"""cgroup v2 for sock_ops programs (kernel side).

A sock_ops program is attached to a cgroup v2 directory (BPF_PROG_ATTACH, target_fd = the
directory's fd, attach type BPF_CGROUP_SOCK_OPS; kernel/bpf/cgroup.c) and then runs for the
TCP sockets of every process in that cgroup or below it -- the cgroup a socket belongs to is
fixed when the socket is created.  :func:`cgroup2_mount` finds the unified hierarchy
(/proc/self/mountinfo, fstype ``cgroup2``) or mounts one in a temporary directory;
:class:`ChildCgroup` makes a throw-away child cgroup to put test processes in.
"""

from __future__ import annotations

import errno as E
import os
import tempfile
import uuid
from pathlib import Path

from bpfdsl.abi.flags import BPF_F_ALLOW_MULTI
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import libc
from bpfdsl.kernel import syscall as S

_mounted: list[str] = []  # temporary cgroup2 mounts made by this process


def _mountinfo_cgroup2() -> str | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return left.split(" ")[4].replace("\\040", " ")
    return None


def cgroup2_mount(*, mount_if_missing: bool = True) -> str:
    """The mount point of the cgroup v2 hierarchy (e.g. /sys/fs/cgroup or
    /sys/fs/cgroup/unified on hybrid systems).

    With none mounted and ``mount_if_missing``, mounts cgroup2 on a new temporary directory
    (needs CAP_SYS_ADMIN).  Raises DiagnosticError saying what is missing otherwise.
    """
    found = _mountinfo_cgroup2()
    if found:
        return found
    if not mount_if_missing:
        raise DiagnosticError(
            error(
                "no-cgroup2",
                "no cgroup v2 hierarchy is mounted",
                hint="mount one: mount -t cgroup2 none /sys/fs/cgroup",
            )
        )
    where = tempfile.mkdtemp(prefix="bpfdsl-cgroup2-")
    try:
        libc.mount(b"none", where, b"cgroup2")
    except OSError as e:
        os.rmdir(where)
        raise DiagnosticError(
            error(
                "no-cgroup2",
                f"no cgroup v2 hierarchy is mounted and mounting one failed: {os.strerror(e.errno) if e.errno else e}",
                hint="run as root, or mount it: mount -t cgroup2 none /sys/fs/cgroup "
                "(kernel needs CONFIG_CGROUPS and CONFIG_CGROUP_BPF)",
            )
        ) from None
    _mounted.append(where)
    return where


def resolve_cgroup(path: str | None) -> str:
    """A cgroup v2 directory: ``path`` as given if absolute, else relative to the mount."""
    root = cgroup2_mount()
    if not path:
        return root
    p = os.path.normpath(path if os.path.isabs(path) else os.path.join(root, path))
    if not os.path.exists(os.path.join(p, "cgroup.procs")):
        raise DiagnosticError(
            error(
                "not-a-cgroup",
                f"{p} is not a cgroup v2 directory",
                hint=f"cgroup v2 is mounted at {root}; give a directory below it",
            )
        )
    return p


def _require_sock_ops(prog_fd: int, prog_name: str) -> None:
    t = S.prog_info(prog_fd).type
    if t != ProgramType.SOCK_OPS:
        try:
            kind = ProgramType(t).name.lower()
        except ValueError:  # a type newer than abi.prog_types.ProgramType: its number
            kind = str(t)
        raise DiagnosticError(
            error(
                "not-sock-ops",
                f"program '{prog_name}' is a {kind} program, not sock_ops",
                hint='declare it as `sock_ops fn NAME(skops)` (C: SEC("sockops"))',
            )
        )


def sock_ops_attach(cgroup: str, prog_fd: int, *, prog_name: str = "", multi: bool = True) -> None:
    """Attach sock_ops program ``prog_fd`` to the cgroup v2 directory ``cgroup``.

    ``multi`` uses BPF_F_ALLOW_MULTI so other programs on the cgroup stay.  Raises
    DiagnosticError (not a cgroup v2 dir, wrong program type, kernel refusal).
    """
    _require_sock_ops(prog_fd, prog_name or "?")
    fd = _open_cgroup(cgroup)
    try:
        S.prog_attach(fd, prog_fd, AttachType.CGROUP_SOCK_OPS, BPF_F_ALLOW_MULTI if multi else 0)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error(
                "attach-failed",
                f"attaching sock_ops '{prog_name}' to cgroup {cgroup}: {e}",
                hint="is another program attached without BPF_F_ALLOW_MULTI?"
                if e.errno == E.EPERM
                else None,
            )
        ) from None
    finally:
        os.close(fd)


def sock_ops_detach(cgroup: str, prog_fd: int, *, prog_name: str = "") -> bool:
    """Detach ``prog_fd`` from the cgroup; False when it was not attached there."""
    fd = _open_cgroup(cgroup)
    try:
        return S.prog_detach_if_attached(fd, AttachType.CGROUP_SOCK_OPS, prog_fd)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error("detach-failed", f"detaching sock_ops '{prog_name}' from {cgroup}: {e}")
        ) from None
    finally:
        os.close(fd)


def _open_cgroup(cgroup: str) -> int:
    try:
        return os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise DiagnosticError(
            error(
                "not-a-cgroup",
                f"cannot open cgroup {cgroup}: {e.strerror}",
                hint=f"cgroup v2 is mounted at {cgroup2_mount()}",
            )
        ) from None


class ChildCgroup:
    """A new child cgroup ``<parent>/<prefix>-<random>`` removed again on :meth:`remove`.

    :meth:`add` moves a process (pid) into it; on removal processes still inside are moved
    back to the parent first (rmdir of a populated cgroup fails with EBUSY).
    """

    def __init__(self, parent: str | None = None, prefix: str = "bpfdsl") -> None:
        self.parent = parent or cgroup2_mount()
        self.path = os.path.join(self.parent, f"{prefix}-{uuid.uuid4().hex[:8]}")
        os.mkdir(self.path)

    def add(self, pid: int) -> None:
        """Move process ``pid`` (all its threads) into this cgroup."""
        Path(self.path, "cgroup.procs").write_text(str(pid))

    def procs(self) -> list[int]:
        return [int(x) for x in Path(self.path, "cgroup.procs").read_text().split()]

    def remove(self) -> None:
        if not os.path.isdir(self.path):
            return
        for pid in self.procs():
            try:
                Path(self.parent, "cgroup.procs").write_text(str(pid))
            except OSError:
                pass  # the process exited meanwhile
        os.rmdir(self.path)

    def __enter__(self) -> ChildCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()
