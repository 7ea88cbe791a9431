"""Context access tables per program type: which (offset, size) a program may read or write.

Derived from the one table of context structs, :mod:`bpfdsl.abi.ctx` (layouts from
include/uapi/linux/bpf.h, rights from net/core/filter.c ``xdp_is_valid_access``,
``sk_msg_is_valid_access``, ``sock_ops_is_valid_access``), in the checker's terms: one
:class:`CtxField` per loadable element, keyed by offset, with the abstract type a load
yields (``data`` -> pkt ...).
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.abi import ctx as abi_ctx
from bpfdsl.abi.ctx import RegType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import domain as D


@dataclass(frozen=True, slots=True)
class CtxField:
    """One context field: ``off``/``size`` in bytes, pointer type it loads as (or SCALAR);
    ``narrow``: narrower (aligned) loads allowed (bpf_ctx_narrow_access_ok)."""

    name: str
    off: int
    size: int
    loads_as: int = D.SCALAR
    writable: bool = False
    narrow: bool = False


_LOADS = {
    RegType.SCALAR_VALUE: D.SCALAR,
    RegType.PTR_TO_PACKET: D.PKT,
    RegType.PTR_TO_PACKET_META: D.PKT_META,
    RegType.PTR_TO_PACKET_END: D.PKT_END,
    RegType.PTR_TO_SOCKET: D.SOCKET,
    RegType.PTR_TO_SOCKET_OR_NULL: D.SOCKET_OR_NULL,
}


def _fields(s: abi_ctx.CtxStruct) -> dict[int, CtxField]:
    """Offset -> element of ``s``; in a union the writable member names the bytes."""
    out: dict[int, CtxField] = {}
    for f in s.fields:
        for name, off in f.elements():
            if off not in out:
                out[off] = CtxField(name, off, f.elem, _LOADS[f.reads_as], f.write, f.narrow)
            elif f.write:
                old = out[off]
                out[off] = CtxField(name, off, old.size, old.loads_as, True, old.narrow)
    return out


CTX_TABLES = {name: _fields(s) for name, s in abi_ctx.CTX_STRUCTS.items()}
CTX_SIZES = {name: s.size for name, s in abi_ctx.CTX_STRUCTS.items()}


def ctx_access(
    ctx: str, off: int, size: int, write: bool, attach: AttachType | None
) -> CtxField | None:
    """The field a ``size``-byte access at byte ``off`` of context ``ctx`` reaches, or None
    when the kernel's ``*_is_valid_access`` refuses it (wrong offset, width or direction)."""
    s = abi_ctx.ctx_struct(ctx)
    if s is None:
        return None
    f = abi_ctx.valid_access(s, off, size, write, attach)
    if f is None:
        return None
    return CTX_TABLES[ctx][f.off + (off - f.off) // f.elem * f.elem]


def ctx_for_program_type(pt: ProgramType) -> str | None:
    """Context struct name of a program type (mirrors prog_types.PROGRAM_KINDS' ``ctx``)."""
    s = abi_ctx.ctx_for_program_type(pt)
    return s.name if s is not None else None
