"""The bpf filesystem: where it is mounted, whether a path lies on it, mounting it.

Its own small module (not :mod:`bpfdsl.runtime.attach`, which re-exports it) so that the
loader, which needs only this of attaching, does not import the attach machinery
(netlink, links) on every ``bpfdsl run``.
"""

from __future__ import annotations

import os
import sys

from bpfdsl.abi.limits import BPF_FS_MAGIC
from bpfdsl.diagnostics import Diagnostic, HostError, error
from bpfdsl.kernel import libc

BPFFS = "/sys/fs/bpf"


def is_bpffs(path: str) -> bool:
    """True when ``path`` lies on a bpf filesystem (statfs f_type == BPF_FS_MAGIC)."""
    return libc.statfs_type(path) == BPF_FS_MAGIC


def _ppid(pid: int) -> int:
    """The parent of ``pid`` (field 4 of /proc/PID/stat, after the command in parentheses)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def private_mounts() -> bool:
    """True when this process runs in a mount namespace made for it or a parent below the
    session: ``ip netns exec`` and ``unshare -m`` make one before they exec the command,
    and its mounts end with it.  The ancestors are walked up to the first one in another
    mount namespace: that one is PID 1 (a container's, or a sandbox's whose PID 1 has one
    of its own) for a command run as usual.  False when that cannot be told."""
    try:
        mine = os.readlink("/proc/self/ns/mnt")
        pid = os.getppid()
        for _ in range(64):
            if pid <= 1:
                return False
            if os.readlink(f"/proc/{pid}/ns/mnt") != mine:
                return True
            pid = _ppid(pid)
    except (OSError, ValueError, IndexError):
        pass
    return False


def ensure_bpffs(path: str = BPFFS) -> None:
    """Mount bpffs at ``path`` if it is not mounted yet (as bpftool does), saying so on
    stderr (a note: the system changed).

    Raises HostError (exit 3): ``no-bpffs`` when it cannot be mounted; ``bpffs-private``
    when it is missing in a mount namespace that is not the host's (under ``ip netns
    exec``), where a bpffs mounted by bpfdsl and the pins on it would be gone when the
    command exits -- an attach that would report success and leave nothing.
    """
    if is_bpffs(path) and not is_bpffs(os.path.dirname(path) or "/"):
        return  # path is the root of a bpffs mount: two statfs calls, no /proc/mounts scan
    try:
        with open("/proc/mounts") as f:
            if any(ln.split()[1:3] == [path, "bpf"] for ln in f):
                return
    except OSError:
        pass
    if private_mounts():
        raise HostError(
            error(
                "bpffs-private",
                f"bpffs is not mounted at {path} in this mount namespace, which is not the "
                "host's (`ip netns exec` makes one and remounts /sys): a bpffs mounted here, "
                "and every pin on it, would vanish when this command exits",
                hint="run the command with `nsenter --net=/run/netns/NAME bpfdsl ...`, which "
                "enters the network namespace and keeps the host's mounts; or mount bpffs in "
                f"this namespace yourself if that is what you mean (mount -t bpf bpf {path})",
            )
        )
    os.makedirs(path, exist_ok=True)
    try:
        libc.mount(b"bpf", path, b"bpf")
    except OSError as e:
        raise HostError(
            error(
                "no-bpffs",
                f"cannot mount bpffs at {path}: {os.strerror(e.errno) if e.errno else e}",
                hint=f"mount it: mount -t bpf bpf {path}",
            )
        ) from None
    note = Diagnostic("note", "bpffs-mounted", f"bpffs was not mounted: mounted it at {path}")
    print(note.render(), file=sys.stderr)  # the system changed: say so, as bpftool does not
