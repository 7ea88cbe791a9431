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


def ensure_bpffs(path: str = BPFFS) -> None:
    """Mount bpffs at ``path`` if it is not mounted yet (as bpftool does), saying so on
    stderr (a note: the system changed).

    Raises HostError (``no-bpffs``, exit 3) when it cannot be mounted.
    """
    if is_bpffs(path) and not is_bpffs(os.path.dirname(path) or "/"):
        return  # path is the root of a bpffs mount: two statfs calls, no /proc/mounts scan
    try:
        with open("/proc/mounts") as f:
            if any(ln.split()[1:3] == [path, "bpf"] for ln in f):
                return
    except OSError:
        pass
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
