"""The XDP metadata area for sema (front end): ``meta(S)`` views and ``adjust_meta`` sizes.

``adjust_meta(-N)`` makes room for N bytes in front of the packet (``bpf_xdp_adjust_meta``,
net/core/filter.c: N a multiple of 4, at most 252, ``xdp_metalen_invalid``); ``meta(S)`` is
struct ``S`` at ``ctx->data_meta``, missing when ``data_meta + sizeof(S) > data`` (the
comparison the verifier wants for a PTR_TO_PACKET_META, ``find_good_pkt_pointers``).

Sema follows how many bytes are reserved on every path to a ``meta(S)``
(:attr:`MetaState.reserved`): 0 at the start of an ``xdp`` program (a driver's
``data_meta`` starts at ``data``), unknown in ``xdp(cpumap)``/``xdp(devmap)`` programs (they
see what the first program left: ``xdp_frame.metasize``, kernel/bpf/cpumap.c
``cpu_map_bpf_prog_run_xdp``) and after an ``adjust_meta`` whose delta is not a constant.
A view larger than what is reserved, or one with nothing reserved, is an error at the view.
"""

from __future__ import annotations

from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import ExprHost, MetaState

META_MAX = 252  # bytes: u8 skb_shared_info.meta_len rounded down to 4 (xdp_metalen_invalid)
META_ALIGN = 4  # bytes: IS_ALIGNED(metalen, sizeof(u32))
ENTRY_KINDS = ("xdp(cpumap)", "xdp(devmap)")  # run on frames that carry metadata


def start(kind_keyword: str | None) -> MetaState:
    """The state at the start of a body: a program of kind ``kind_keyword`` or a fn (None)."""
    return MetaState(None if kind_keyword in ENTRY_KINDS else 0, 0)


def merge(before: MetaState, ends: list[tuple[MetaState, bool]]) -> MetaState:
    """After a branch: the smallest reservation of the ways that go on (diverged ones don't)."""
    live = [m for m, gone in ends if not gone]
    if not live:
        return before
    if any(m.reserved is None for m in live):
        return MetaState(None, max(m.line for m in live))
    low = min(live, key=lambda m: m.reserved or 0)
    return MetaState(low.reserved, low.line)


def reserve(ex: ExprHost, e: ast.Call) -> None:
    """``adjust_meta(delta)``: a constant delta changes the reservation by ``-delta`` bytes
    (an error when the total would not be a multiple of 4 or above 252: the kernel's
    -EACCES); any other makes it unknown."""
    st: MetaState = ex.s.meta
    delta = ex.const_value(e.args[0]) if len(e.args) == 1 else None
    if delta is None or st.reserved is None:
        ex.s.meta = MetaState(None, e.span.line)
        return
    total = st.reserved - delta
    if total < 0 or total % META_ALIGN or total > META_MAX:
        ex.err(
            "meta-size",
            f"adjust_meta({delta}) leaves {total} bytes of metadata: the kernel wants a "
            f"multiple of {META_ALIGN} from 0 to {META_MAX} (it would return -EACCES)",
            e.args[0].span,
            f"reserve the struct's size rounded up to {META_ALIGN}: `adjust_meta(-8)` for 8 bytes",
        )
        total = max(0, min(META_MAX, total))
    ex.s.meta = MetaState(total, e.span.line)


def view(ex: ExprHost, e: ast.Call) -> T.Type:
    """``meta(S)``: an optional view of struct ``S`` in the metadata area."""
    arg = e.args[0] if len(e.args) == 1 and not e.kwargs else None
    st = ex.c.structs.get(arg.id) if isinstance(arg, ast.Name) else None
    if st is None:
        ex.err(
            "type-mismatch",
            "meta() takes the name of a struct: the layout of the metadata",
            e.span,
            "declare `struct mark_meta { mark: u32 }`, then `let m = meta(mark_meta) else "
            "{ return XDP_PASS }`",
        )
        return T.ERR
    kind = ex.s.kind
    if kind is None or kind.ctx != "xdp_md":
        where = "a fn" if kind is None else f"a {kind.keyword} program"
        ex.err(
            "meta-kind",
            f"meta() reads the XDP metadata area; {where} has none",
            e.span,
            "use it in the body of an xdp program",
        )
        return T.ERR
    need = (st.size + META_ALIGN - 1) // META_ALIGN * META_ALIGN
    res: MetaState = ex.s.meta
    if res.reserved == 0:
        ex.err(
            "meta-unreserved",
            f"meta({st.name}) reads {st.size} bytes of metadata, but none is reserved here",
            e.span,
            f"reserve it first: `if adjust_meta(-{need}) != 0 {{ return XDP_PASS }}`",
        )
    elif res.reserved is not None and st.size > res.reserved:
        ex.err(
            "meta-too-big",
            f"struct `{st.name}` is {st.size} bytes, but only {res.reserved} bytes of "
            f"metadata are reserved here (adjust_meta at line {res.line})",
            e.span,
            f"reserve {need} bytes: `adjust_meta(-{need})`",
        )
    return T.OptionalType(T.MetaRef(st, True, False), "metadata")
