"""Object files a command names, read as they are (``.bpfd`` source is compiled by the
caller: :func:`bpfdsl.cli.object_bytes`).

Its own small module (not :mod:`bpfdsl.runtime.inventory`, which re-exports it) so that
reading an object does not import what listing and loading pinned objects needs.
"""

from __future__ import annotations

import os

from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import syscall


def object_bytes(ref: str) -> bytes:
    """ELF bytes of the object file ``ref``, read as it is (``.bpfd`` source is compiled by
    the caller: :func:`bpfdsl.cli.object_bytes`).

    Raises UsageError when the file is missing, NoPermission when it cannot be read.
    """
    if not os.path.exists(ref):
        raise UsageError(error("no-such-file", f"{os.path.normpath(ref)}: no such file"))
    if not os.path.isfile(ref):
        where = os.path.normpath(ref)
        raise UsageError(error("unreadable-input", f"cannot read {where}: not a regular file"))
    try:
        with open(ref, "rb") as f:
            return f.read()
    except PermissionError:
        raise syscall.NoPermission(f"reading {os.path.normpath(ref)}") from None
