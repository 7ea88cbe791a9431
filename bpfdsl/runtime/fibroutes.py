"""The routes ``bpf_fib_lookup`` finds in a test run on the interpreter.

``bpfdsl run --fib-route PREFIX=ifindex:N[,smac:MAC][,dmac:MAC|none]`` (repeatable) and
``--fib-routes FILE`` (JSON) give :class:`bpfdsl.interp.state.FibRoute` entries, the FIB of
the interpreter's machine (``Env.fib_routes``): a lookup of a destination in ``PREFIX``
answers ``BPF_FIB_LKUP_RET_SUCCESS`` with ``ifindex``, ``smac`` and ``dmac`` written into
the ``struct bpf_fib_lookup``; ``dmac:none`` is a route whose next hop has no neighbour
entry (``BPF_FIB_LKUP_RET_NO_NEIGH``); longest prefix wins; no route is
``BPF_FIB_LKUP_RET_NOT_FWDED``.  ``smac``/``dmac`` default to 00:00:00:00:00:00 (as
``FibRoute``).  A later route for the same prefix replaces an earlier one (``ip route
replace``): the command line's come after the file's.

The kernel engine has no such table: its ``bpf_fib_lookup`` reads the kernel's own routing
and neighbour tables (``ip route``, ``ip neigh``), so routes given here are refused there.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any

from bpfdsl.abi.helpers import HELPERS
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.interp.state import FibRoute

FORM = "PREFIX=ifindex:N[,smac:MAC][,dmac:MAC|none]"
EXAMPLE = "--fib-route 10.2.0.0/24=ifindex:3,smac:02:00:00:00:00:03,dmac:02:00:00:00:00:04"
_MAC = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
_IFINDEX_MAX = (1 << 31) - 1  # ifindex is an int in the kernel (dev_new_index: 1..INT_MAX)


def _bad(where: str, why: str) -> UsageError:
    return UsageError(
        error("bad-fib-route", f"{where}: {why}", hint=f"give {FORM}, e.g. {EXAMPLE}")
    )


def _network(text: Any, where: str) -> str:
    try:
        return str(ipaddress.ip_network(str(text).strip(), strict=True))
    except ValueError as e:
        raise _bad(where, f"bad prefix {text!r}: {e}") from None


def _ifindex(v: Any, where: str) -> int:
    try:
        n = v if isinstance(v, int) and not isinstance(v, bool) else int(str(v).strip(), 0)
    except ValueError:
        n = None
    if n is None or not 1 <= n <= _IFINDEX_MAX:
        raise _bad(where, f"ifindex {v!r}: give an interface index 1..{_IFINDEX_MAX}")
    return n


def _mac(v: Any, what: str, where: str, *, none_ok: bool) -> bytes | None:
    if none_ok and (v is None or str(v).strip().lower() == "none"):
        return None
    t = str(v).strip()
    if not _MAC.match(t):
        also = " or none (no neighbour entry: NO_NEIGH)" if none_ok else ""
        raise _bad(where, f"{what} {v!r}: give a MAC address like 02:00:00:00:00:01{also}")
    return bytes.fromhex(t.replace(":", ""))


def _route(prefix: Any, fields: dict[str, Any], where: str) -> FibRoute:
    unknown = [k for k in fields if k not in ("ifindex", "smac", "dmac")]
    if unknown:
        raise _bad(where, f"unknown field {unknown[0]!r} (fields: ifindex, smac, dmac)")
    if "ifindex" not in fields:
        raise _bad(where, "no ifindex: the interface the route leaves by")
    smac = _mac(fields.get("smac", "00:00:00:00:00:00"), "smac", where, none_ok=False)
    assert smac is not None
    return FibRoute(
        _network(prefix, where),
        _ifindex(fields["ifindex"], where),
        smac,
        _mac(fields.get("dmac", "00:00:00:00:00:00"), "dmac", where, none_ok=True),
    )


def parse_route(text: str, where: str = "--fib-route") -> FibRoute:
    """One route from ``PREFIX=ifindex:N[,smac:MAC][,dmac:MAC|none]`` (MACs as
    ``aa:bb:cc:dd:ee:ff``; the prefix without host bits, IPv4 or IPv6).  Raises UsageError
    (``bad-fib-route``) naming ``where`` and the part that is wrong."""
    where = f"{where} {text!r}"
    prefix, eq, rest = text.partition("=")
    if not eq or not rest.strip():
        raise _bad(where, "expected PREFIX=ifindex:N,...")
    fields: dict[str, Any] = {}
    for part in rest.split(","):
        key, colon, value = part.strip().partition(":")
        if not colon or not value.strip():
            raise _bad(where, f"{part.strip()!r} is no FIELD:VALUE")
        if key.strip().lower() in fields:
            raise _bad(where, f"{key.strip()!r} given twice")
        fields[key.strip().lower()] = value.strip()
    return _route(prefix, fields, where)


def read_routes(path: str) -> list[FibRoute]:
    """The routes of a JSON file: a list whose items are ``--fib-route`` strings or
    objects ``{"prefix": "10.2.0.0/24", "ifindex": 3, "smac": "02:..", "dmac": "02:.." |
    null}``.  Raises UsageError (``bad-fib-route``) for a file that is no such list."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise _bad(path, f"cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise _bad(f"{path}:{e.lineno}:{e.colno}", f"not JSON: {e.msg}") from None
    if not isinstance(doc, list):
        raise _bad(path, 'expected a JSON list of routes: ["PREFIX=ifindex:N,...", {...}]')
    out = []
    for i, item in enumerate(doc):
        where = f"{path}: route {i + 1}"
        if isinstance(item, str):
            out.append(parse_route(item, where))
        elif isinstance(item, dict) and "prefix" in item:
            fields = {k: v for k, v in item.items() if k != "prefix"}
            out.append(_route(item["prefix"], fields, where))
        else:
            raise _bad(where, f"{item!r}: give a string {FORM} or an object with a prefix")
    return out


def fib_routes(items: list[str] | None, path: str | None = None) -> list[FibRoute]:
    """The routes of ``--fib-routes FILE`` (``path``) then of the ``--fib-route`` ``items``;
    a later route for the same prefix replaces the earlier one."""
    routes = (read_routes(path) if path else []) + [parse_route(t) for t in items or []]
    by_prefix = {r.prefix: r for r in routes}  # dicts keep the first position of a key
    return list(by_prefix.values())


def calls_fib_lookup(program: Any) -> bool:
    """Whether a :class:`bpfdsl.obj.spec.ProgramSpec` (subprograms included) calls
    ``bpf_fib_lookup``."""
    hid = HELPERS["fib_lookup"].id
    return any(i.is_helper_call and i.imm == hid for i in program.insns)
