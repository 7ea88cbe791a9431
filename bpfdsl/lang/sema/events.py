"""Events to user space for sema (front end; used by sema_calls only): the ring buffer and
perf event array builtins.

``ringbuf_output(m, rec[, flags])`` copies a record into ring buffer ``m``
(bpf_ringbuf_output); ``ringbuf_reserve(m)`` gives the record's memory in the ring, or
nothing when the ring is full (bpf_ringbuf_reserve), and ``ringbuf_submit(r[, flags])`` /
``ringbuf_discard(r[, flags])`` hand it to user space or drop it -- on every path exactly
once, which :mod:`bpfdsl.lang.sema.refs` checks.  ``perf_event_output(m, rec[, n])`` writes
a record to the perf event of the current CPU (bpf_perf_event_output with
BPF_F_CURRENT_CPU), with ``n`` bytes of the packet appended in XDP programs (the flags'
upper 32 bits, as bpf_xdp_output does).  Records have the struct type the map declares.
"""

from __future__ import annotations

from bpfdsl.abi.helpers import map_fits_helper
from bpfdsl.abi.map_types import MapType
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.sema.symbols import ExprHost

EVENT_MAP_USE = "map `{}` ({}) has no entries to read or write: it sends records to user space"
EVENT_MAP_HINT = (
    "ringbuf: `ringbuf_output(m, rec)` or `ringbuf_reserve(m)` + `ringbuf_submit(r)`; "
    "perf_event_array: `perf_event_output(m, rec)`"
)
EVENT_CALLS = (
    "ringbuf_output",
    "ringbuf_reserve",
    "ringbuf_submit",
    "ringbuf_discard",
    "perf_event_output",
)
# call -> (map kind it takes, usage) ; submit/discard take a reservation instead
_USAGE = {
    "ringbuf_output": "ringbuf_output(ring, record) or ringbuf_output(ring, record, flags)",
    "ringbuf_reserve": "let r = ringbuf_reserve(ring) else { return XDP_PASS }",
    "ringbuf_submit": "ringbuf_submit(r) or ringbuf_submit(r, BPF_RB_NO_WAKEUP)",
    "ringbuf_discard": "ringbuf_discard(r) or ringbuf_discard(r, BPF_RB_NO_WAKEUP)",
    "perf_event_output": "perf_event_output(events, record) or "
    "perf_event_output(events, record, packet_bytes)",
}
_ARGS = {  # call -> (least, most) arguments
    "ringbuf_output": (2, 3),
    "ringbuf_reserve": (1, 1),
    "ringbuf_submit": (1, 2),
    "ringbuf_discard": (1, 2),
    "perf_event_output": (2, 3),
}


def _event_map(ex: ExprHost, e: ast.Expr, helper: str) -> T.MapType | None:
    """The event map argument of ``helper`` (an error unless it is a map that fits)."""
    t = ex.expr(e)
    if t is T.ERR:
        return None
    want = "ringbuf" if helper.startswith("ringbuf") else "perf_event_array"
    if not isinstance(t, T.MapType) or not map_fits_helper(MapType(t.map_type), helper):
        found = f"a {t.kind} map" if isinstance(t, T.MapType) else str(t)
        ex.err(
            "event-map-kind",
            f"`{helper}` takes a {want} map, not {found}",
            e.span,
            f"declare one: `map events: {want}<RECORD>(...)`",
        )
        return None
    return t


def _record(ex: ExprHost, m: T.MapType | None, e: ast.Expr) -> None:
    """``e`` must be a record of map ``m``: a value of its record struct (built with
    ``RECORD(field: ...)``, a local, or a map value of that type)."""
    t = ex.expr(e)
    if m is None or t is T.ERR or m.record is T.ERR:
        return
    inner = t.inner if isinstance(t, T.RefType) and not isinstance(t, T.RingbufRef) else t
    if inner is m.record:
        return
    assert isinstance(m.record, T.StructType)  # sema makes event-map records structs
    ex.err(
        "type-mismatch",
        f"map `{m.name}` takes records of struct {m.record}, found {t}",
        e.span,
        f"build one: `{m.record}({', '.join(f + ': ...' for f in m.record.fields)})`",
    )


def check_call(ex: ExprHost, e: ast.Call) -> T.Type:
    """Type of the event builtin call ``e`` (see the module docstring); errors for the
    wrong map kind, record type, argument count or program kind."""
    name, args = e.name, e.args
    lo, hi = _ARGS[name]
    if not lo <= len(args) <= hi:
        ex.err(
            "arg-count",
            f"`{name}` takes {lo}" + (f" or {hi}" if hi != lo else "") + " argument(s)",
            e.span,
            f"write `{_USAGE[name]}`",
        )
        for a in args:
            ex.expr(a)
        return T.VOID if name in ("ringbuf_submit", "ringbuf_discard") else T.ERR
    if name == "perf_event_output":
        from_kind = ex.s.kind
        if from_kind is not None and from_kind.ctx != "xdp_md":
            ex.err(
                "helper-not-allowed",
                f"`{name}` cannot be called from a {from_kind.keyword} program",
                e.span,
                "the kernel offers bpf_perf_event_output to xdp (and tc) programs; "
                "use a ringbuf map (`ringbuf_output`), which every program kind may use",
            )
        m = _event_map(ex, args[0], "perf_event_output")
        _record(ex, m, args[1])
        if len(args) == 3:
            ex.expect(args[2], T.U32)
        return T.I64
    if name in ("ringbuf_submit", "ringbuf_discard"):
        t = ex.expr(args[0])
        if t is not T.ERR and not (isinstance(args[0], ast.Name) and isinstance(t, T.RingbufRef)):
            ex.err(
                "type-mismatch",
                f"`{name}` takes a reservation of `ringbuf_reserve`, found {t}",
                args[0].span,
                "`let r = ringbuf_reserve(ring) else { ... }`, fill `r.field`s, then "
                f"`{name}(r)`",
            )
        if len(args) == 2:
            ex.expect(args[1], T.U64)
        return T.VOID
    m = _event_map(ex, args[0], name)
    if name == "ringbuf_reserve":
        if m is None or m.record is None or m.record is T.ERR:
            return T.ERR
        return T.OptionalType(T.RingbufRef(m.record, True, False, m.name), "reservation")
    _record(ex, m, args[1])
    if len(args) == 3:
        ex.expect(args[2], T.U64)
    return T.I64
