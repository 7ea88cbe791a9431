"""Abstract values of the checker: registers and stack slots (kernel struct bpf_reg_state).

A :class:`Reg` is immutable: transfer functions build new ones.  Scalars carry a tnum
(known bits) and signed/unsigned 64- and 32-bit bounds kept consistent by :func:`sync`
(kernel ``reg_bounds_sync``).  Pointers carry a fixed offset ``off`` plus a variable part
described by the same tnum/bounds fields (kernel: ``off`` + ``var_off``).  The model is
the kernel's (include/linux/bpf_verifier.h); names follow its log syntax.

Memoized: :func:`sync` is memoized on (tnum, bounds) (so are tnum.mul, alu.scalar_alu and
branch.refine_possible on their operands); registers are never changed in place, which
is what lets pruning skip identical register objects and these tables hand out results.
Fresh scalars (no id, reference, offset or note) are shared: :func:`known`,
:func:`scalar`, :func:`zext32` and alu.scalar_alu hand out one object per value.  Nothing
compares registers by identity except as a shortcut for equality (state.py skips the
comparison of one object with itself only when it has no id or reference to map).
"""

from __future__ import annotations

from typing import Any, Final

from bpfdsl.checker import tnum as T

M64: Final = T.M64
M32: Final = T.M32
S64_MIN: Final = -(1 << 63)
S64_MAX: Final = (1 << 63) - 1
S32_MIN: Final = -(1 << 31)
S32_MAX: Final = (1 << 31) - 1

# kernel BPF_ADD_CONST64 / BPF_ADD_CONST32 (include/linux/bpf_verifier.h, Linux 6.18 with
# the 2026 stable linked-register backports): flags in a scalar's ``id`` saying its value is
# that of the scalars with the same base id (the id without the flags) plus ``off`` -- a
# 64-bit add, or a 32-bit add zero-extended.  Env.new_id stays far below them.
ADD_CONST64: Final = 1 << 31
ADD_CONST32: Final = 1 << 30
ADD_CONST: Final = ADD_CONST64 | ADD_CONST32

# register types (kernel enum bpf_reg_type, reduced)
NOT_INIT: Final = 0
SCALAR: Final = 1
CTX: Final = 2
STACK: Final = 3
PKT: Final = 4
PKT_META: Final = 5
PKT_END: Final = 6
MAP_VALUE: Final = 7
MAP_VALUE_OR_NULL: Final = 8
MAP_PTR: Final = 9
XDP_SOCK: Final = 10
SOCKET: Final = 11
SOCKET_OR_NULL: Final = 12
# a ring buffer reservation (kernel PTR_TO_MEM | MEM_RINGBUF, an acquired reference):
# ``rng`` = its size in bytes, ``ref`` = the reference id, ``map`` = the ring buffer
RINGBUF_MEM: Final = 13
RINGBUF_MEM_OR_NULL: Final = 14
# MEM(_OR_NULL): a pointer argument of a global function, ``rng`` bytes (kernel PTR_TO_MEM,
# mem_size); FUNC: a static subprogram's address (ld_imm64 BPF_PSEUDO_FUNC), ``off`` = the
# index of its first instruction (kernel PTR_TO_FUNC, subprogno)
MEM: Final = 15
MEM_OR_NULL: Final = 16
FUNC: Final = 17
# DYNPTR: a global function's ``struct bpf_dynptr *`` argument (kernel CONST_PTR_TO_DYNPTR:
# a read-only LOCAL dynptr; ``id`` its dynptr id); no helper the checker models takes one
DYNPTR: Final = 18
# the struct sock_common part of a socket (kernel PTR_TO_SOCK_COMMON: bpf_skc_lookup_tcp),
# fewer readable fields than SOCKET (checker.refs.sock_access)
SOCK_COMMON: Final = 19
SOCK_COMMON_OR_NULL: Final = 20
TYPE_NAMES = {
    NOT_INIT: "?",
    SCALAR: "scalar",
    CTX: "ctx",
    STACK: "fp",
    PKT: "pkt",
    PKT_META: "pkt_meta",
    PKT_END: "pkt_end",
    MAP_VALUE: "map_value",
    MAP_VALUE_OR_NULL: "map_value_or_null",
    MAP_PTR: "map_ptr",
    XDP_SOCK: "xdp_sock",
    SOCKET: "sock",
    SOCKET_OR_NULL: "sock_or_null",
    RINGBUF_MEM: "ringbuf_mem",
    RINGBUF_MEM_OR_NULL: "ringbuf_mem_or_null",
    MEM: "mem",
    MEM_OR_NULL: "mem_or_null",
    FUNC: "func",
    DYNPTR: "dynptr_ptr",
    SOCK_COMMON: "sock_common",
    SOCK_COMMON_OR_NULL: "sock_common_or_null",
}
NULLABLE = {
    MAP_VALUE_OR_NULL: MAP_VALUE,
    SOCKET_OR_NULL: SOCKET,
    RINGBUF_MEM_OR_NULL: RINGBUF_MEM,
    MEM_OR_NULL: MEM,
    SOCK_COMMON_OR_NULL: SOCK_COMMON,
}
PACKET_TYPES: Final = (PKT, PKT_META)


def s64(v: int) -> int:
    v &= M64
    return v - (1 << 64) if v >> 63 else v


def s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


# the fields of a Reg, in order (its __slots__; a compiled Reg has no __slots__ attribute)
REG_FIELDS: Final = (
    "t",
    "off",
    "tn",
    "smin",
    "smax",
    "umin",
    "umax",
    "s32min",
    "s32max",
    "u32min",
    "u32max",
    "id",
    "rng",
    "map",
    "ref",
    "note",
)


class Reg:
    """One register (or spilled value).

    ``t``: type (module constants).  ``off``: fixed offset of a pointer in bytes.
    ``tn``: tnum of the scalar value or of the pointer's variable offset.  ``smin..u32max``:
    bounds of the same.  ``id``: shared by copies (null checks, packet ranges).  ``rng``:
    packet bytes known to be in bounds from (pointer - off).  ``map``: map object for map
    pointers/values, frame number for stack pointers.  ``ref``: acquired reference id.
    ``note``: why a value became unknown (e.g. "pkt pointer invalidated at insn 12").

    Not a dataclass, unlike bpfdsl's other value classes, because its semantics differ:
    ``==`` leaves out ``note`` (two registers that differ only in why they became unknown
    hold the same abstract value, e.g. for the stack comparison of spilled registers),
    ``hash`` covers only ``t``/``off``/``tn`` (consistent with that ``==``), ``repr`` is
    the kernel log's register syntax (:func:`fmt_reg`), and :meth:`replace` copies
    without re-running ``__init__``.
    """

    __slots__ = REG_FIELDS
    # declared for mypyc (compiled: C fields of these types; a wrong type is a TypeError)
    t: int
    off: int
    tn: tuple[int, int]
    smin: int
    smax: int
    umin: int
    umax: int
    s32min: int
    s32max: int
    u32min: int
    u32max: int
    id: int
    rng: int
    map: Any  # MapSpec/DataMap (map pointers and values), frame number (stack), None
    ref: int
    note: str

    def __init__(
        self,
        t: int,
        off: int = 0,
        tn: tuple[int, int] = (0, 0),
        b: tuple[int, ...] | None = None,
        id: int = 0,
        rng: int = 0,
        map: Any = None,
        ref: int = 0,
        note: str = "",
    ) -> None:
        self.t = t
        self.off = off
        self.tn = tn
        if b is None:
            v = tn[0]
            if tn[1] == 0:
                b = (s64(v), s64(v), v, v, s32(v), s32(v), v & M32, v & M32)
            else:
                b = (S64_MIN, S64_MAX, 0, M64, S32_MIN, S32_MAX, 0, M32)
        (
            self.smin,
            self.smax,
            self.umin,
            self.umax,
            self.s32min,
            self.s32max,
            self.u32min,
            self.u32max,
        ) = b
        self.id = id
        self.rng = rng
        self.map = map
        self.ref = ref
        self.note = note

    # ---- helpers ----
    def bounds(self) -> tuple[int, ...]:
        return (
            self.smin,
            self.smax,
            self.umin,
            self.umax,
            self.s32min,
            self.s32max,
            self.u32min,
            self.u32max,
        )

    def replace(self, **kw: Any) -> Reg:
        r = _copy(self)
        for k, v in kw.items():
            setattr(r, k, v)
        return r

    @property
    def is_const(self) -> bool:
        return self.t == SCALAR and self.tn[1] == 0

    @property
    def is_ptr(self) -> bool:
        return self.t not in (NOT_INIT, SCALAR)

    @property
    def value(self) -> int:
        return self.tn[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Reg):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in REG_FIELDS if k != "note")

    def __hash__(self) -> int:
        return hash((self.t, self.off, self.tn))

    def __repr__(self) -> str:
        return fmt_reg(self)


NOT_INIT_REG = Reg(NOT_INIT)
_NO_FIELDS: Final = Reg(SCALAR)  # template for _with(): type scalar, no id/off/map/ref/note
_MEMO_MAX: Final = 1 << 14  # entries per memo table (cleared when full)
UNKNOWN_BOUNDS: Final = (S64_MIN, S64_MAX, 0, M64, S32_MIN, S32_MAX, 0, M32)


def unknown(note: str = "") -> Reg:
    """An unknown scalar (kernel __mark_reg_unknown)."""
    return Reg(SCALAR, tn=T.UNKNOWN, b=UNKNOWN_BOUNDS, note=note)


def known(v: int) -> Reg:
    """A scalar with one known 64-bit value (any int, taken modulo 2**64); one shared
    (immutable) register per value."""
    r = _KNOWN.get(v)
    if r is None:
        v &= M64
        b = _CONST_BOUNDS.get(v)
        if b is None:
            b = _const_bounds(v)
        r = _with(_NO_FIELDS, (v, 0), b)
        if len(_KNOWN) >= _MEMO_MAX:
            _KNOWN.clear()
        _KNOWN[v] = r
    return r


_CONST_BOUNDS: Final[dict[int, tuple[int, ...]]] = {}
_KNOWN: Final[dict[int, Reg]] = {}  # known(): the argument as given -> its register


def _const_bounds(v: int) -> tuple[int, ...]:
    """The eight bounds of the constant ``v`` (0 <= v < 2**64); cached (bounded)."""
    b = (s64(v), s64(v), v, v, s32(v), s32(v), v & M32, v & M32)
    if len(_CONST_BOUNDS) >= _MEMO_MAX:
        _CONST_BOUNDS.clear()
    _CONST_BOUNDS[v] = b
    return b


_URANGE: Final[dict[tuple[int, int], Reg]] = {}


def urange(lo: int, hi: int) -> Reg:
    """A scalar in the unsigned range lo..hi (e.g. a loaded byte: 0..255); cached (immutable)."""
    r = _URANGE.get((lo, hi))
    if r is None:
        r = _urange(lo, hi)
        if len(_URANGE) < 4096:
            _URANGE[(lo, hi)] = r
    return r


def _urange(lo: int, hi: int) -> Reg:
    return sync(Reg(SCALAR, tn=T.trange(lo, hi), b=(S64_MIN, S64_MAX, lo, hi) + UNKNOWN_BOUNDS[4:]))


def ptr(t: int, off: int = 0, **kw: Any) -> Reg:
    """A pointer of type ``t`` with fixed offset ``off`` and no variable part."""
    return Reg(t, off=off, tn=(0, 0), **kw)


# ---- bounds (kernel reg_bounds_sync) ----


def tnum_step(v: int, m: int, z: int) -> int:
    """kernel tnum_step: the smallest member of tnum (v, m) above ``z`` (its largest when
    ``z`` is not below that, its smallest when ``z`` is below that)."""
    tmax = v | m
    if z >= tmax:
        return tmax
    if z < v:
        return v
    d = z - v
    carry = (1 << (d & ~m & M64).bit_length()) - 1
    filled = (d | carry | (~m & M64)) & M64
    return v | ((filled + 1) & m)


def _from_tnum(
    v: int, m: int, b: tuple[int, ...]
) -> tuple[tuple[int, int], tuple[int, int, int, int, int, int, int, int]]:
    """kernel __update_reg_bounds: the bounds narrowed by what the tnum allows; when the
    u64 range and the tnum have one value in common, the constant (Linux 6.18 stable:
    __update_reg64_bounds with tnum_step).  (tnum, bounds)."""
    smin, smax, umin, umax, s32min, s32max, u32min, u32max = b
    sv = v | (m & (1 << 63))
    smin = max(smin, sv - (1 << 64) if sv >> 63 else sv)
    sv = v | (m & ~(1 << 63) & M64)
    smax = min(smax, sv)
    umin = max(umin, v)
    umax = min(umax, v | m)
    lv, lm = v & M32, m & M32
    sv = lv | (lm & (1 << 31))
    s32min = max(s32min, sv - (1 << 32) if sv >> 31 else sv)
    s32max = min(s32max, lv | (lm & 0x7FFFFFFF))
    u32min = max(u32min, lv)
    u32max = min(u32max, lv | lm)
    if m:
        tmax = v | m
        nxt = tnum_step(v, m, umin)
        umin_in = (umin & ~m) == v
        k = -1
        if umin_in and nxt > umax:
            k = umin  # the u64 range and the tnum share only umin
        elif not umin_in and nxt == tmax:
            k = tmax  # ... only the tnum's largest value
        elif not umin_in and nxt <= umax and tnum_step(v, m, nxt) > umax:
            k = nxt  # ... only one value between umin and umax
        if k >= 0:
            return (k, 0), (s64(k), s64(k), k, k, s32(k), s32(k), k & M32, k & M32)
    return (v, m), (smin, smax, umin, umax, s32min, s32max, u32min, u32max)


def sync(r: Reg) -> Reg:
    """Make tnum and the eight bounds agree (update_reg_bounds, deduce_bounds, bound_offset).

    A pure function of (tnum, bounds); results are memoized (the same ranges recur on
    every path of a program and across programs)."""
    return resync(r, r.tn, (r.smin, r.smax, r.umin, r.umax, r.s32min, r.s32max, r.u32min, r.u32max))


def resync(r: Reg, tn: tuple[int, int], bounds: tuple[int, ...]) -> Reg:
    """``sync(r.replace(tn=tn, <bounds>))`` without building the intermediate register;
    ``bounds`` = (smin, smax, umin, umax, s32min, s32max, u32min, u32max)."""
    key = (tn, bounds)
    hit = _SYNC.get(key)
    if hit is None:
        hit = _sync(tn, bounds)
        if len(_SYNC) >= _MEMO_MAX:
            _SYNC.clear()
        _SYNC[key] = hit
    return _with(r, hit[0], hit[1])


_SYNC: Final[dict[tuple, tuple[tuple[int, int], tuple[int, ...]]]] = {}


def fresh_scalar(tn: tuple[int, int], bounds: tuple[int, ...]) -> Reg:
    """A scalar (no id, no note) with exactly this tnum and these (already synced) bounds."""
    return _with(_NO_FIELDS, tn, bounds)


def scalar(tn: tuple[int, int], bounds: tuple[int, ...]) -> Reg:
    """``sync(Reg(SCALAR, tn=tn, b=bounds))``: a fresh scalar (no id, no note), one shared
    (immutable) register per (tnum, bounds)."""
    key = (tn, bounds)
    r = _SCALARS.get(key)
    if r is None:
        r = resync(_NO_FIELDS, tn, bounds)
        if len(_SCALARS) >= _MEMO_MAX:
            _SCALARS.clear()
        _SCALARS[key] = r
    return r


_SCALARS: Final[dict[tuple, Reg]] = {}


def _sync(tn: tuple[int, int], bounds: tuple[int, ...]) -> tuple[tuple[int, int], tuple[int, ...]]:
    """sync()'s computation: (tnum, bounds) -> (tnum, bounds), the kernel's
    reg_bounds_sync step by step: bounds from the tnum, __reg_deduce_bounds twice, the
    tnum from the bounds, bounds from the tnum again."""
    v, m = tn
    if m == 0:
        return (v, 0), (s64(v), s64(v), v, v, s32(v), s32(v), v & M32, v & M32)
    (v, m), b = _deduce(_deduce(_from_tnum(v, m, bounds)))
    smin, smax, umin, umax, s32min, s32max, u32min, u32max = b
    # __reg_bound_offset
    v, m = T.intersect((v, m), T.trange(umin, umax))
    low = T.intersect((v & M32, m & M32), T.trange(u32min, u32max))
    v, m = (v & ~M32 & M64) | low[0], (m & ~M32 & M64) | low[1]
    return _from_tnum(v, m, b)


def _deduce(
    state: tuple[tuple[int, int], tuple[int, ...]],
) -> tuple[tuple[int, int], tuple[int, ...]]:
    """The kernel's __reg_deduce_bounds (6.18): __reg32_deduce_bounds,
    __reg64_deduce_bounds, __reg_deduce_mixed_bounds, in that order."""
    tn, (smin, smax, umin, umax, s32min, s32max, u32min, u32max) = state
    # __reg32_deduce_bounds: 64-bit ranges whose upper halves agree give the low halves
    if (umin >> 32) == (umax >> 32):
        u32min = max(u32min, umin & M32)
        u32max = min(u32max, umax & M32)
        if s32(umin) <= s32(umax):
            s32min = max(s32min, s32(umin))
            s32max = min(s32max, s32(umax))
    if (smin >> 32) == (smax >> 32):
        if smin & M32 <= smax & M32:
            u32min = max(u32min, smin & M32)
            u32max = min(u32max, smax & M32)
        if s32(smin) <= s32(smax):
            s32min = max(s32min, s32(smin))
            s32max = min(s32max, s32(smax))
    # upper halves two sequential numbers, the low halves going from negative to
    # non-negative: a valid s32 range ([-1, 1] as s64 is [-1, 1] as s32)
    if ((umin >> 32) + 1) & M32 == (umax >> 32) & M32 and s32(umin) < 0 <= s32(umax):
        s32min = max(s32min, s32(umin))
        s32max = min(s32max, s32(umax))
    if ((smin >> 32) + 1) & M32 == (smax >> 32) & M32 and s32(smin) < 0 <= s32(smax):
        s32min = max(s32min, s32(smin))
        s32max = min(s32max, s32(smax))
    if s32(u32min) <= s32(u32max):
        s32min = max(s32min, s32(u32min))
        s32max = min(s32max, s32(u32max))
    if s32min & M32 <= s32max & M32:
        u32min = max(u32min, s32min & M32)
        u32max = min(u32max, s32max & M32)
    elif u32max < s32min & M32:  # an s32 range across the sign boundary: the u32
        s32min = s32(u32min)  # range meets only its non-negative part
        u32max = min(u32max, s32max & M32)
    elif s32max & M32 < u32min:  # ... or only its negative part
        s32max = s32(u32max)
        u32min = max(u32min, s32min & M32)
    # __reg64_deduce_bounds: signed <-> unsigned within one half
    if s64(umin) <= s64(umax):
        smin = max(smin, s64(umin))
        smax = min(smax, s64(umax))
    if smin & M64 <= smax & M64:
        umin = max(umin, smin & M64)
        umax = min(umax, smax & M64)
    elif umax < smin & M64:  # as above, 64-bit
        smin = s64(umin)
        umax = min(umax, smax & M64)
    elif smax & M64 < umin:
        smax = s64(umax)
        umin = max(umin, smin & M64)
    # __reg_deduce_mixed_bounds: 32-bit knowledge into the 64-bit range
    hi = ~M32 & M64
    umin = max(umin, (umin & hi) | u32min)
    umax = min(umax, (umax & hi) | u32max)
    smin = max(smin, s64((smin & hi) | u32min))
    smax = min(smax, s64((smax & hi) | u32max))
    if s32min & M32 <= s32max & M32:
        umin = max(umin, (umin & hi) | (s32min & M32))
        umax = min(umax, (umax & hi) | (s32max & M32))
        smin = max(smin, s64((smin & hi) | (s32min & M32)))
        smax = min(smax, s64((smax & hi) | (s32max & M32)))
    # after a sign-extending load: a non-negative low half and a 64-bit range within
    # [S32_MIN, S32_MAX] leave no value whose upper half is all ones
    if s32min >= 0 and smin >= S32_MIN and smax <= S32_MAX:
        smin, smax = s32min, s32max
        umin, umax = s32min, s32max
        tn = T.intersect(tn, T.trange(umin, umax))
    return tn, (smin, smax, umin, umax, s32min, s32max, u32min, u32max)


def _copy(r: Reg) -> Reg:
    return _with(r, r.tn, r.bounds())


def _with(r: Reg, tn: tuple[int, int], b: tuple[int, ...]) -> Reg:
    return Reg(r.t, r.off, tn, b, r.id, r.rng, r.map, r.ref, r.note)


def is_bottom(r: Reg) -> bool:
    """True when the bounds contradict each other (an impossible branch)."""
    return (
        r.smin > r.smax
        or r.umin > r.umax
        or r.s32min > r.s32max
        or r.u32min > r.u32max
        or (r.tn[0] & r.tn[1]) != 0
    )


def zext32(r: Reg) -> Reg:
    """Keep only the low 32 bits (result of any ALU32 op), bounds from the 32-bit ones; a
    scalar without id (``r``'s note kept), one shared register per result."""
    tn, note = r.tn, r.note
    key = (tn[0] & M32, tn[1] & M32, r.s32min, r.s32max, r.u32min, r.u32max, note)
    out = _ZEXT.get(key)
    if out is None:
        lo, hi = r.u32min, r.u32max
        b = (lo, hi, lo, hi, r.s32min, r.s32max, lo, hi)
        out = sync(Reg(SCALAR, tn=T.subreg(tn), b=b, note=note))
        if len(_ZEXT) >= _MEMO_MAX:
            _ZEXT.clear()
        _ZEXT[key] = out
    return out


_ZEXT: Final[dict[tuple, Reg]] = {}


# ---- printing (kernel print_verifier_state style) ----


def fmt_reg(r: Reg) -> str:
    """``pkt(off=14,r=14)``, ``scalar(umax=255,var_off=(0x0; 0xff))``, ``fp-8``, ``42``."""
    if r.t == NOT_INIT:
        return "?"
    if r.t == SCALAR:
        if r.tn[1] == 0:
            return str(s64(r.tn[0]))
        return f"scalar({_bounds_text(r)})"
    if r.t == STACK and r.tn == (0, 0):
        return f"fp{r.off:+d}" if r.off else "fp0"
    parts = []
    if r.id:
        parts.append(f"id={r.id}")
    if r.map is not None and r.t in (MAP_VALUE, MAP_VALUE_OR_NULL, MAP_PTR):
        m = r.map
        parts.append(f"map={getattr(m, 'name', '?')},ks={m.key_size},vs={m.value_size}")
    if r.t == FUNC:
        return "func()"
    if r.ref:
        parts.append(f"ref_obj_id={r.ref}")
    if r.off:
        parts.append(f"off={r.off}")
    if r.t in (RINGBUF_MEM, RINGBUF_MEM_OR_NULL, MEM, MEM_OR_NULL):
        parts.append(f"sz={r.rng}")
    if r.t in PACKET_TYPES:
        parts.append(f"r={r.rng}")
    if r.tn != (0, 0):
        parts.append(_bounds_text(r))
    return f"{TYPE_NAMES[r.t]}({','.join(parts)})"


def _bounds_text(r: Reg) -> str:
    out = []
    if r.smin != S64_MIN and r.smin != r.umin:
        out.append(f"smin={r.smin}")
    if r.smax != S64_MAX and r.smax != r.umax:
        out.append(f"smax={r.smax}")
    if r.umin:
        out.append(f"umin={r.umin}")
    if r.umax != M64:
        out.append(f"umax={r.umax}")
    if r.tn != T.UNKNOWN:
        out.append(f"var_off={T.fmt(r.tn)}")
    return ",".join(out)


# ``r`` with an already synced tnum and bounds (e.g. from a memo), other fields kept.
rebound = _with
