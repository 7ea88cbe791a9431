"""Checksum rules of header writes and ``swap`` (sema): refuse what codegen could not keep
checksummed, so a program never sends a packet with a stale checksum.

- A pseudo-header field (``headers.PSEUDO_FIELDS``: IP addresses, IPv4 ``protocol`` and
  ``tot_len``, IPv6 ``payload_len``) written in a program is covered by codegen: it updates
  the L4 header parsed after that IP header if one is in scope, else it finds the L4 header
  in the packet at run time.  Inside an inlined ``fn`` there is no packet context, so the
  write is refused there; ``ipv4.protocol`` needs the L4 header in scope (its run-time
  lookup would read the new protocol) and ``ipv6.nexthdr`` is refused (it sits at a
  different byte of a 16-bit word than in the pseudo-header).  IPv6 ``daddr`` is in the
  pseudo-header only without a Routing header with segments left (RFC 8200 8.1: the
  final destination is then the routing header's last address); codegen checks that at
  run time (``backend.codegen.csum.CsumGen.pseudo_update``), so sema allows the write either way.
- ``swap(a, b)`` changes no sum only if both fields start at the same 16-bit word parity
  and are both in, or both out of, the pseudo-header; other swaps are refused.
  ``swap(ip6.saddr, ip6.daddr)`` behind such a Routing header changes the pseudo-header's
  source only; codegen updates the L4 checksum for it at run time.
"""

from __future__ import annotations

from bpfdsl.diagnostics import Diagnostic, Span
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import CORE_HEADERS, PSEUDO_FIELDS
from bpfdsl.lang.sema.symbols import ExprHost, Local, SemaHost


def l4_in_scope(ex: ExprHost, ip_obj: ast.Expr | None) -> Local | None:
    """The L4 header Local visible here parsed after the IP header ``ip_obj`` (any L4
    header with a checksum if ``ip_obj`` is None), or None."""

    ip = ex.c.sym.get(ip_obj) if isinstance(ip_obj, ast.Name) else None
    if ip is None and ip_obj is not None:
        return None
    for scope in ex.s.scopes:
        for loc in scope.values():
            if (
                isinstance(loc, Local)
                and isinstance(loc.ty, T.HeaderType)
                and loc.ty.layout.l4
                and (loc.header_parent is ip if ip is not None else loc.ty.layout.csum is not None)
            ):
                return loc
    return None


def covering_l4(ex: ExprHost, obj: ast.Expr) -> Local | None:
    """The checksummed L4 header Local that the header view ``obj`` was parsed after (on
    every path: through the chain of headers each parse started just past), or None."""
    loc = ex.c.sym.get(obj) if isinstance(obj, ast.Name) else None
    seen: set[int] = set()
    while isinstance(loc, Local) and id(loc) not in seen:
        seen.add(id(loc))
        loc = ex.s.follows.get(loc)
        if (
            isinstance(loc, Local)
            and isinstance(loc.ty, T.HeaderType)
            and loc.ty.layout.l4
            and loc.ty.layout.csum is not None
        ):
            return loc
    return None


def _sends(node: object) -> bool:
    """``node`` (an AST subtree) mentions XDP_TX / XDP_REDIRECT or calls a redirect."""
    if isinstance(node, ast.Name) and node.id in ("XDP_TX", "XDP_REDIRECT"):
        return True
    if isinstance(node, ast.Call) and "redirect" in node.name:
        return True
    if isinstance(node, list):
        return any(_sends(x) for x in node)
    if isinstance(node, ast.Node):
        return any(_sends(v) for k, v in vars(node).items() if k not in ("span", "ty"))
    return False


def payload_warnings(sema: SemaHost, prog: ast.ProgDecl) -> None:
    """Warn for payload byte writes under a checksummed L4 header in a program that can
    send the packet on (XDP_TX, XDP_REDIRECT, redirect) and never writes that header's
    checksum field itself: bpfdsl does not update L4 checksums for payload bytes."""

    by_hand = {id(loc) for span, loc in sema.payload_writes if span is None}
    if not _sends(prog.body):
        return
    for span, l4 in sema.payload_writes:
        if span is None or id(l4) in by_hand:
            continue
        assert isinstance(l4.ty, T.HeaderType)  # an L4 header (l4_in_scope, covering_l4)
        name = l4.ty.layout.name
        hint = f"update `{l4.name}.check` yourself" if name != "icmp" else "update the checksum"
        if name == "udp":
            hint = f"over IPv4 set `{l4.name}.check = 0` (no checksum), or " + hint
        sema.c.warnings.append(
            Diagnostic(
                "warning",
                "payload-checksum",
                f"this payload write leaves the {name.upper()} checksum of "
                f"`{l4.name}` (line {l4.span.line}) stale, and the packet may be sent on",
                span,
                hints=[hint + " before XDP_TX/XDP_REDIRECT"],
            )
        )


def check_write(ex: ExprHost, tgt: ast.Field) -> None:
    """Error if writing header field ``tgt`` would leave an L4 checksum stale."""
    assert isinstance(tgt.obj.ty, T.HeaderType)
    layout = tgt.obj.ty.layout
    obj = tgt.obj.id if isinstance(tgt.obj, ast.Name) else layout.name
    what = f"{obj}.{tgt.name}"
    if layout.name == "ipv6" and tgt.name == "nexthdr":
        ex.err(
            "pseudo-header",
            f"{what} cannot be written: the L4 checksum covers the upper-layer protocol",
            tgt.span,
            "bpfdsl cannot update that checksum for you; leave nexthdr as it is",
        )
        return
    f = layout.fields[tgt.name]
    view = ex.c.sym.get(tgt.obj) if isinstance(tgt.obj, ast.Name) else None
    if layout.l4 and f.offset == layout.csum and isinstance(view, Local):
        ex.s.payload_writes.append((None, view))  # checksum set by hand
    if layout.name == "byte":
        l4 = l4_in_scope(ex, None)
        if l4 is not None and ex.s.kind is not None:
            ex.s.payload_writes.append((tgt.span, l4))
        return
    if layout.name not in CORE_HEADERS and ex.s.kind is not None:
        l4 = covering_l4(ex, tgt.obj)  # a VXLAN header under UDP: in its payload
        if l4 is not None:
            ex.s.payload_writes.append((tgt.span, l4))
    kinds = PSEUDO_FIELDS.get(layout.name, {}).get(tgt.name)
    if not kinds:
        return
    l4s = "/".join(k.upper() for k in kinds)
    if ex.s.kind is None:
        ex.err(
            "pseudo-header",
            f"{what} is part of the {l4s} pseudo-header: it cannot be written in a `fn`",
            tgt.span,
            "write it in the program (there bpfdsl finds the L4 header and updates its "
            "checksum); a `fn` may compute and return the new value",
        )
    elif tgt.name == "protocol" and l4_in_scope(ex, tgt.obj) is None:
        ex.err(
            "pseudo-header",
            f"{what} is part of the {l4s} pseudo-header: parse the L4 header before "
            "writing it, in the same block, so its checksum can be updated",
            tgt.span,
        )


def check_swap(ex: ExprHost, a: ast.Field, b: ast.Field, span: Span) -> None:
    """Error unless swapping header fields ``a`` and ``b`` leaves every checksum valid."""
    assert isinstance(a.obj.ty, T.HeaderType)
    layout = a.obj.ty.layout
    fa, fb = layout.fields[a.name], layout.fields[b.name]
    if layout.csum is None and not layout.pseudo and layout.name != "ipv6":
        return  # ethernet, vlan: no checksum covers them
    pseudo = PSEUDO_FIELDS.get(layout.name, {})
    if layout.name == "udp":
        pseudo = {"len": ("udp",)}
    why = None
    if (fa.offset - fb.offset) % 2:
        why = "they sit at different byte positions of 16-bit words"
    elif (a.name in pseudo) != (b.name in pseudo) or (
        layout.name == "ipv6" and "nexthdr" in (a.name, b.name)
    ):
        why = "only one of them is in the L4 pseudo-header"
    if why:
        ex.err(
            "swap-checksum",
            f"swap({a.name}, {b.name}) would break a checksum: {why}",
            span,
            "assign through a local instead (`let t = x.a; x.a = x.b; x.b = t`): "
            "each write updates the checksums",
        )
