"""Kernel functions (kfuncs) of the userspace machine, keyed by their names in
:mod:`bpfdsl.abi.kfuncs` (the loader's relocation symbol).

The XDP metadata kfuncs read the RX hints a driver took from its RX descriptor
(net/core/xdp.c ``bpf_xdp_metadata_rx_*`` calls the device's ``xdp_metadata_ops``).  The
interpreter has no driver: by default each returns -EOPNOTSUPP (-95) and writes nothing,
as the kernel's generic implementation does for a device without the op.  A run may be
given hints (``bpfdsl run --ctx rx_hash=0x1234``, :data:`HINTS`: ``rx_`` + the name of
the value the kfunc writes); a kfunc any of whose hints is given returns 0 and writes all
of its values (the missing ones as 0), like a driver that has them.

Implementations take the machine and r1..r5 (r1 the context, then the pointers the kfunc
writes through) and return the C ``int`` in the low 32 bits of r0 (upper bits zero, as an
x86-64 callee leaves them after ``mov eax``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from bpfdsl.abi.kfuncs import EOPNOTSUPP, KFUNCS, Kfunc
from bpfdsl.interp.memory import Fault, Ptr

# how each output is written (little endian, be16 in network order), and its size in bytes
_FORMS = {"u16": "<H", "be16": ">H", "u32": "<I", "u64": "<Q"}


def hint_name(out: str) -> str:
    """The ``--ctx`` name of a kfunc output: ``rx_`` + its name (``hash`` -> ``rx_hash``)."""
    return f"rx_{out}"


# --ctx name -> (kfunc, output name, language type name), for every metadata kfunc output
HINTS: dict[str, tuple[Kfunc, str, str]] = {
    hint_name(out): (k, out, t) for k in KFUNCS for out, t in k.outs
}


def hint_size(name: str) -> int:
    """Bytes of hint ``name`` (:data:`HINTS`)."""
    return struct.calcsize(_FORMS[HINTS[name][2]])


def _impl(k: Kfunc) -> Callable[..., int]:
    def call(M: Any, r1: object, *outs: object) -> int:
        hints = getattr(M.ctx, "hints", None) or {}
        names = [hint_name(out) for out, _ in k.outs]
        if not any(n in hints for n in names):
            return -EOPNOTSUPP & 0xFFFFFFFF
        for p, (out, t), n in zip(outs, k.outs, names, strict=False):
            if type(p) is not Ptr:
                raise Fault(f"{k.name}: argument `{out}` is not a pointer")
            p.region.write_bytes(p, struct.pack(_FORMS[t], hints.get(n, 0)))
        return 0

    call.__name__ = k.name
    return call


IMPLS: dict[str, Callable[..., int]] = {k.name: _impl(k) for k in KFUNCS}
