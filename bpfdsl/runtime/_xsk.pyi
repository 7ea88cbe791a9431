"""Types of bpfdsl/runtime/_xsk.c (xdpsock's l2fwd step over an AF_XDP socket's rings;
see that file)."""

from typing import Any

def l2fwd(
    fd: int,
    umem: Any,
    rx: Any,
    fr: Any,
    tx: Any,
    cr: Any,
    offsets: tuple[int, ...],
    size: int,
    limit: int,
) -> tuple[int, int]: ...
