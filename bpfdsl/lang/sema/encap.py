"""``push`` and ``pop``: typed encapsulation and decapsulation (docs/language.md, "Pushing
and popping headers").

``push H { f: v, ... }, ... before VIEW`` inserts the headers in front of the parsed view
``VIEW`` and keeps the bytes before it (its L2 header: ``bpf_xdp_adjust_head(-n)``, then
those bytes written again at the new start, as xdp-tools' and Katran's encapsulators do);
``pop FIRST [through LAST]`` removes the headers from ``FIRST`` to the end of ``LAST`` and
keeps the bytes before ``FIRST`` (``adjust_head(+n)`` after them).  Both are resizes: the
views are invalid after them and the cursor is at the packet's start (sema.resize).

Sema finds, from the parse chain (``Sema.follows``), the constant number of bytes before
the view (every header before it of a fixed size), and refuses what it cannot build right:
a field computed by push (lengths, versions, checksums), a header with a variable length
(except one whose length is its fixed part when the fields of the length are 0: gue,
geneve, built without options), conditional fields or a checksum push does not know, a UDP header not right after a pushed
IPv4 or IPv6 header.  What codegen needs goes to ``Checked.pushes`` / ``Checked.pops``.
"""

from __future__ import annotations

from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.layout import Header
from bpfdsl.lang.sema import resize
from bpfdsl.lang.sema.calls import mark_stale
from bpfdsl.lang.sema.symbols import ExprHost, Local, PopPlan, PushPlan, SemaHost

# Fields push computes, per library header: ipv4 version 4, ihl 5, tot_len, the header
# checksum (RFC 791/1071); ipv6 version 6, payload_len (RFC 8200); udp len and checksum
# (over IPv4 0, "none", as RFC 768 and RFC 7348 section 5 allow; over IPv6 computed over the
# pseudo-header, the pushed headers and the whole inner packet, RFC 8200 8.1 and RFC 6935).
COMPUTED: dict[str, frozenset[str]] = {
    "ipv4": frozenset({"version", "ihl", "tot_len", "check"}),
    "ipv6": frozenset({"version", "payload_len"}),
    "udp": frozenset({"len", "check"}),
}
# Defaults of fields not given: the Linux default TTL / hop limit (sysctl
# net.ipv4.ip_default_ttl, net.ipv6.conf.*.hop_limit: 64); any other field is 0.
DEFAULTS: dict[str, dict[str, int]] = {"ipv4": {"ttl": 64}, "ipv6": {"hop_limit": 64}}
# The EtherType a pushed IP header or 802.1Q tag gets in the Ethernet or VLAN header before
# it (include/uapi/linux/if_ether.h ETH_P_IP, ETH_P_IPV6, ETH_P_8021Q): the last two bytes
# of both.
ETHERTYPES = {"ipv4": 0x0800, "ipv6": 0x86DD, "vlan": 0x8100}
L2_HEADERS = ("ethernet", "vlan")


def _fixed(layout: Header) -> bool:
    return layout.length is None and not any(f.cond is not None for f in layout.fields.values())


def _bare(layout: Header) -> bool:
    """A header of variable length that is its fixed part when the fields its length is
    computed from are 0 (geneve with no options, gue with hlen 0): ``push`` builds it so
    (those fields are read-only, hence 0)."""
    if layout.length is None or layout.conditional:
        return False
    todo: list[tuple[ast.Expr, bool]] = [(layout.length, False)]
    vals: list[int] = []
    while todo:  # numbers, fields (0 here) and LENGTH_OPS: layout.check_expr
        x, done = todo.pop()
        if isinstance(x, ast.IntLit):
            vals.append(x.value)
        elif isinstance(x, ast.Name):
            vals.append(0)
        elif not isinstance(x, ast.BinOp):
            return False
        elif not done:
            todo += [(x, True), (x.right, False), (x.left, False)]
        else:
            b, a = vals.pop(), vals.pop()
            ops = {"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b}
            if x.op in ops:
                vals.append(ops[x.op])
            elif x.op in ("<<", ">>") and 0 <= b < 64:
                vals.append(a << b if x.op == "<<" else a >> b)
            else:
                return False
    return vals == [layout.size]


def view_offset(s: SemaHost, loc: Local) -> int | None:
    """Bytes from the packet's start to header view ``loc`` when every header before it on
    the parse chain has a fixed size (``s``: the Sema); None otherwise."""
    if loc in s.pushed:
        return s.pushed[loc]
    off, cur = 0, s.follows.get(loc, "unknown")
    for _ in range(64):
        if cur is None:
            return off
        if not isinstance(cur, Local) or not isinstance(cur.ty, T.HeaderType):
            return None
        if not _fixed(cur.ty.layout):
            return None
        off += cur.ty.layout.size
        if cur in s.pushed:
            return off + s.pushed[cur]
        cur = s.follows.get(cur, "unknown")
    return None


def _view(ex: ExprHost, name: ast.Name) -> Local | None:
    t = ex.expr(name)
    if t is T.ERR:
        return None
    sym = ex.c.sym.get(name)
    if not isinstance(sym, Local) or not isinstance(t, T.HeaderType):
        ex.err("push-view", f"`{name.id}` is not a parsed header view", name.span)
        return None
    return None if sym in ex.s.stale else sym  # stale: reported by ex.expr


def _prefix(ex: ExprHost, loc: Local, name: ast.Name, what: str) -> int | None:
    off = view_offset(ex.s, loc)
    if off is None:
        ex.err(
            "push-offset",
            f"`{what}` needs the bytes before `{name.id}` at a fixed length: parse the "
            f"headers before it with fixed sizes on one path",
            name.span,
            "the L2 headers (ethernet, vlan) in front are kept; parse them straight before",
        )
    return off


def push(ex: ExprHost, e: ast.Push) -> T.Type:
    """Check ``push ... before VIEW``; its type: an optional view of the first header."""
    if ex.s.kind is None:
        ex.err("resize-in-fn", "`push` is only allowed in a program body", e.span)
    ex.packet_access(e.span, "push")
    loc = _view(ex, e.before)
    layouts: list[Header] = []
    for i, ph in enumerate(e.headers):
        h = ex.c.header(ph.header)
        if h is None:
            ex.err("unknown-header", f"unknown header `{ph.header}`", ph.span)
            for v in ph.fields.values():
                ex.expr(v)
            continue
        layouts.append(h)
        known_csum = h.name in ("ipv4", "udp")
        pushable = _fixed(h) or _bare(h) or (h.library and h.name == "ipv4")
        if not pushable or (h.csum is not None and not known_csum):
            ex.err(
                "push-header",
                f"`push` cannot build `{h.name}`: "
                + ("its length varies" if not _fixed(h) else "push does not compute its checksum"),
                ph.span,
                "push ethernet, vlan, ipv4, ipv6, udp, vxlan, gue, geneve or a declared "
                "header of fixed size (or one that is when the fields of its length are 0) "
                "without `if` fields or a checksum rule",
            )
        if h.name == "udp":
            prev = e.headers[i - 1].header if i else None
            after = sum(hx.size for x in e.headers[i:] if (hx := ex.c.header(x.header)) is not None)
            if prev == "ipv6" and after % 2:
                ex.err(
                    "push-header",
                    "the headers pushed from `udp` on have an odd length: the inner packet's "
                    "bytes would not fall on the checksum's 16-bit words",
                    ph.span,
                )
            elif prev not in ("ipv4", "ipv6"):
                ex.err(
                    "push-header",
                    "a pushed `udp` header must follow a pushed `ipv4` or `ipv6` header (its "
                    "checksum covers their pseudo-header)",
                    ph.span,
                )
        computed = COMPUTED.get(h.name, frozenset()) if h.library else frozenset()
        for name, v in ph.fields.items():
            f = h.fields.get(name)
            span = ph.field_spans[name]
            if f is None:
                ex.err(
                    "unknown-field",
                    f"header `{h.name}` has no field `{name}`",
                    span,
                    "fields: " + ", ".join(h.fields),
                )
                ex.expr(v)
                continue
            if name in computed:
                ex.err(
                    "push-field",
                    f"`push` computes `{h.name}.{name}`: it cannot be given",
                    span,
                    "computed: " + ", ".join(sorted(computed)),
                )
            elif not f.writable:
                ex.err("read-only", f"`{h.name}.{name}` cannot be written", span)
            ex.expect(v, f.type)
    if loc is None:
        return T.ERR
    prefix = _prefix(ex, loc, e.before, "push")
    mark_stale(ex, e)  # the fields were read from the views before the resize
    if prefix is None or not layouts or len(layouts) != len(e.headers):
        return T.ERR
    assert isinstance(loc.ty, T.HeaderType)  # _view
    before = ex.s.follows.get(loc)
    ethertype = None
    if (
        isinstance(before, Local)
        and isinstance(before.ty, T.HeaderType)
        and before.ty.layout.name in L2_HEADERS
        and layouts[0].name in ETHERTYPES
    ):
        ethertype = ETHERTYPES[layouts[0].name]
    ex.c.pushes[e] = PushPlan(prefix, tuple(layouts), ethertype, loc.ty.layout.name)
    return T.OptionalType(T.HeaderType(layouts[0].name, layouts[0]), "header")


def pop(st: SemaHost, s: ast.Pop) -> None:
    """Check ``pop FIRST [through LAST] else { ... }`` (``st``: the Sema)."""
    ex = st.ex
    if st.kind is None:
        ex.err("resize-in-fn", "`pop` is only allowed in a program body", s.span)
    ex.packet_access(s.span, "pop")
    first = _view(ex, s.first)
    last = _view(ex, s.last) if s.last is not None else first
    plan = None
    if first is not None and last is not None:
        prefix = _prefix(ex, first, s.first, "pop")
        # from LAST back to FIRST on the parse chain: the bytes popped, when all fixed
        delta: int | None = 0
        cur: object = last
        for _ in range(64):
            if not isinstance(cur, Local) or not isinstance(cur.ty, T.HeaderType):
                cur = None
                break
            if delta is not None:
                delta = delta + cur.ty.layout.size if _fixed(cur.ty.layout) else None
            if cur is first:
                break
            cur = st.follows.get(cur)
        if cur is not first:
            assert s.last is not None  # cur is first when there is no `through`
            ex.err(
                "pop-order",
                f"`{s.last.id}` is not parsed after `{s.first.id}` on the same chain",
                s.last.span,
                f"`pop {s.first.id} through LAST` removes `{s.first.id}` and the headers "
                "parsed after it up to LAST",
            )
        elif prefix is not None:
            plan = PopPlan(prefix, delta)
    mark_stale(ex, s)
    if plan is not None:
        st.c.pops[s] = plan
    before = st.cursor
    paths = resize.snapshot(st)
    st.block(s.orelse)
    st.cursor = before
    resize.restore(st, paths)
    if not st.diverges(s.orelse):
        st.err(
            "else-must-leave",
            "the else block of `pop` must leave (return, break or continue)",
            s.orelse.span,
            "end it with e.g. `return XDP_ABORTED`: it runs when the packet cannot shrink",
        )
