"""What a test run is given and what it did, in the program kind's own terms.

Context: ``bpfdsl run --ctx NAME=VALUE`` sets fields of the kernel's context struct of the
program kind (include/uapi/linux/bpf.h): ``struct xdp_md`` (``ingress_ifindex``,
``rx_queue_index``, ``egress_ifindex``; and, for the interpreter, the RX hints the XDP
metadata kfuncs return: ``rx_hash``, ``rx_rss_type``, ``rx_timestamp``, ``rx_vlan_proto``,
``rx_vlan_tci``), ``struct sk_msg_md`` (the socket the message is
sent on: ``family``, ``remote_ip4``/``local_ip4``, ``remote_ip6``/``local_ip6``,
``remote_port``/``local_port``) and ``struct bpf_sock_ops`` (``op``, ``args``, the same
socket fields, ``state``, ``snd_cwnd``, ``srtt_us``, ... see
:data:`bpfdsl.interp.ctx.BPF_SOCK_OPS_FIELDS`).  Values are what a user reads: ports as
host-order numbers (the struct's network-order ``remote_port`` is derived), addresses as
text, ``op``/``state`` by their ``BPF_SOCK_OPS_*``/``BPF_TCP_*`` names.
:func:`parse_ctx` checks and normalizes them.

Map entries: ``--map NAME KEY VALUE`` and ``--maps FILE`` (:func:`map_entries`,
:func:`read_entries`) are put into either engine's maps before the run by
:func:`fill_maps`, keys and values encoded by the map's BTF types with the codec of
``bpfdsl map update``; a sockmap/sockhash takes ``peer``/``self``, the sockets of the
``--ctx`` socket.

Outcome: :func:`describe_outcome` turns an engine's raw outcome (redirect target, empty
slot and fallback, apply/cork bytes, sock_ops reply and callback flags) and the map
changes of the run (:func:`diff_maps` over two engine snapshots) into lines and a JSON
dict, with keys and values decoded by BTF type exactly as ``bpfdsl map`` shows them
(:class:`bpfdsl.runtime.mapview.MapCodec`).
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import socket
from dataclasses import dataclass
from typing import Any

from bpfdsl.abi.ctx import XDP_MD, ctx_struct
from bpfdsl.abi.flags import (
    BPF_F_BROADCAST,
    BPF_F_EXCLUDE_INGRESS,
    BPF_F_INGRESS,
    XDP_REDIRECT_FALLBACK_MASK,
)
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import (
    AttachType,
    ProgramKind,
    SockOpsCbFlag,
    SockOpsOp,
    TcpState,
    XdpAction,
)
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.interp.ctx import CTX_FIELDS, SockInfo
from bpfdsl.interp.kfuncs import HINTS, hint_size
from bpfdsl.runtime.mapview import MapCodec

# struct xdp_md (include/uapi/linux/bpf.h) fields a test run may set: the kernel's
# BPF_PROG_TEST_RUN takes ingress_ifindex and rx_queue_index in ctx_in
# (net/bpf/test_run.c xdp_convert_md_to_buff); egress_ifindex exists for devmap programs.
XDP_MD_FIELDS: dict[str, tuple[int, int, str]] = {
    f.name: (f.off, f.size, "u32") for f in XDP_MD.fields if not f.is_pointer
}
_FIELDS = {"xdp_md": XDP_MD_FIELDS, **CTX_FIELDS}
# fields that exist but come from the run's input or the program, not from --ctx
_NOT_SETTABLE = {
    "data": "a pointer: the packet/message comes from --hex, --msg or --pcap",
    "data_end": "a pointer: the packet/message comes from --hex, --msg or --pcap",
    "data_meta": "a pointer: metadata is empty at the start of a run",
    "size": "the message length: give the message with --msg or --hex",
    "sk": "a pointer to the socket: describe the socket with the other fields",
    "skb_data": "a pointer into the TCP header, not modelled",
    "skb_data_end": "a pointer into the TCP header, not modelled",
    "reply": "written by the program (the run prints it)",
    "replylong": "written by the program (the run prints it)",
}
SOCK_FIELDS = ("family", "remote_ip4", "local_ip4", "remote_ip6", "local_ip6")
FAMILIES = {"af_inet": socket.AF_INET, "inet": socket.AF_INET, "ipv4": socket.AF_INET}
FAMILIES |= {"af_inet6": socket.AF_INET6, "inet6": socket.AF_INET6, "ipv6": socket.AF_INET6}
MAP_DIFF_LIMIT = 4096  # entries per map compared before/after a run (bigger maps: skipped)


def ctx_fields(kind: ProgramKind) -> dict[str, tuple[int, int, str]]:
    """Settable fields of ``kind``'s context struct: name -> (offset, size, form).  Plain
    XDP programs (also ``xdp(dev_bound)`` ones) take the RX hints the interpreter's
    metadata kfuncs return too (:data:`RX_HINT_FIELDS`, offset -1: not in the struct)."""
    fields = _FIELDS.get(kind.ctx, {})
    if kind.ctx == "xdp_md" and kind.attach_type == AttachType.XDP:
        return {**fields, **RX_HINT_FIELDS}
    return fields


# RX hints of a run on the interpreter (bpfdsl.interp.kfuncs): `--ctx rx_hash=0x1234` makes
# rx_hash() return 0 and that hash (numbers in host order; rx_vlan_proto is written in
# network order, as the kfunc's __be16); no kernel test run takes them (no driver)
RX_HINT_FIELDS: dict[str, tuple[int, int, str]] = {n: (-1, hint_size(n), "u") for n in HINTS}


def _bad(item: str, why: str, hint: str | None = None) -> UsageError:
    return UsageError(error("bad-ctx", f"--ctx {item!r}: {why}", hint=hint))


def _named(text: str, enum: Any, prefix: str, item: str, what: str) -> int:
    t = text.strip()
    try:
        v = int(t, 0)
    except ValueError:
        name = t.upper().removeprefix(prefix)
        if name in enum.__members__:
            return int(enum[name])
        names = ", ".join(prefix + n for n in enum.__members__)
        raise _bad(item, f"unknown {what} {t!r}", hint=f"{what}s: {names}") from None
    if v not in {int(m) for m in enum}:
        raise _bad(item, f"{v} is no {what}", hint=f"{what}s: {', '.join(enum.__members__)}")
    return v


def _number(text: str, size: int, item: str) -> int:
    try:
        v = int(text.strip().replace("_", ""), 0)
    except ValueError:
        raise _bad(item, f"expected a number, got {text.strip()!r}") from None
    if not 0 <= v < 1 << (8 * size):
        raise _bad(item, f"{v} does not fit in {size * 8} bits (0..{(1 << (8 * size)) - 1})")
    return v


def _value(name: str, form: str, size: int, text: str, item: str) -> Any:
    t = text.strip()
    if form == "family":
        if t.lower() in FAMILIES:
            return FAMILIES[t.lower()]
        v = _number(t, 4, item)
        if v not in (socket.AF_INET, socket.AF_INET6):
            raise _bad(item, f"family {v} is neither AF_INET (2) nor AF_INET6 (10)")
        return v
    if form in ("ip4", "ip6"):
        try:
            ip = (ipaddress.IPv4Address if form == "ip4" else ipaddress.IPv6Address)(t)
        except ValueError:
            example = "10.0.0.1" if form == "ip4" else "fd00::1"
            raise _bad(item, f"{t!r} is no IPv{form[-1]} address (e.g. {example})") from None
        return ip.packed
    if form in ("port_be", "port_host"):
        v = _number(t, 4, item)
        if v > 0xFFFF:
            raise _bad(item, f"port {v} is above 65535")
        return v
    if form == "op":
        return _named(t, SockOpsOp, "BPF_SOCK_OPS_", item, "callback")
    if form == "state":
        return _named(t, TcpState, "BPF_TCP_", item, "TCP state")
    if form == "cb_flags":
        bits = 0
        for part in t.split("|"):
            p = part.strip().upper().removeprefix("BPF_SOCK_OPS_").removesuffix("_CB_FLAG")
            if p in SockOpsCbFlag.__members__:
                bits |= int(SockOpsCbFlag[p])
            else:
                bits |= _number(part, 4, item)
        return bits
    if form == "args":
        parts = [p for p in t.split(",") if p.strip()]
        if len(parts) > 4:
            raise _bad(item, f"args has 4 elements, got {len(parts)}")
        return [_number(p, 4, item) for p in parts]
    return _number(t, size, item)


def parse_ctx(items: list[str] | None, kind: ProgramKind) -> dict[str, Any]:
    """``["name=value", ...]`` -> {field: value} for ``kind``'s context struct: numbers
    as int, addresses as network-order bytes, ports as host-order ints, ``args`` as a
    list of up to 4 u32 (``args=1,2`` or ``args[1]=2``).  ``family`` is derived from the
    addresses given when not set (IPv6 fields: AF_INET6, else AF_INET).

    Raises UsageError (``bad-ctx``) naming the item: unknown field (with the fields of
    this struct), a field the run derives itself, a value of the wrong form, a field
    given twice, addresses of the other family.
    """
    fields = ctx_fields(kind)
    cs = ctx_struct(kind.ctx)
    struct = {"xdp_md": "struct xdp_md"}.get(kind.ctx, f"struct {kind.ctx}")
    known = ", ".join(sorted(fields)) or "none"
    out: dict[str, Any] = {}
    for item in items or []:
        name, eq, text = item.partition("=")
        name = name.strip()
        if not eq or not name:
            raise _bad(item, "expected FIELD=VALUE", hint=f"fields of {struct}: {known}")
        index = None
        if name.startswith("args[") and name.endswith("]") and "args" in fields:
            try:
                index = int(name[5:-1])
            except ValueError:
                index = -1
            if not 0 <= index < 4:
                raise _bad(item, "args has indexes 0..3")
            name = "args"
        if name not in fields:
            if name in _NOT_SETTABLE:
                raise _bad(
                    item, f"{struct} field {name!r} is not set with --ctx: {_NOT_SETTABLE[name]}"
                )
            close = difflib.get_close_matches(name, list(fields), n=1)
            raise _bad(
                item,
                f"{struct} has no field {name!r}"
                + (f" (did you mean {close[0]!r}?)" if close else ""),
                hint=f"fields of {struct}: {known}",
            )
        member = cs[name] if cs is not None and name in cs else None
        if (
            member is not None
            and member.attach is not None
            and kind.attach_type not in member.attach
        ):
            raise _bad(item, f"{name} is readable only in xdp(devmap) programs")  # egress_ifindex
        off, size, form = fields[name]
        if index is not None:
            args = out.setdefault("args", [0, 0, 0, 0])
            args.extend([0] * (4 - len(args)))
            args[index] = _number(text, 4, item)
            continue
        if name in out:
            raise _bad(item, f"field {name!r} given twice")
        out[name] = _value(name, form, size, text, item)
    _check_family(out)
    return out


def _check_family(ctx: dict[str, Any]) -> None:
    fam = ctx.get("family")
    has4 = [f for f in ("remote_ip4", "local_ip4") if f in ctx]
    has6 = [f for f in ("remote_ip6", "local_ip6") if f in ctx]
    if has4 and has6:
        raise _bad(
            f"{has4[0]}, {has6[0]}",
            "a socket is IPv4 or IPv6, not both",
            hint="for an IPv4 peer on an IPv6 socket give the mapped address ::ffff:a.b.c.d",
        )
    if fam == socket.AF_INET and has6:
        raise _bad(has6[0], "an IPv6 address on an AF_INET socket", hint="set family=AF_INET6")
    if fam == socket.AF_INET6 and has4:
        raise _bad(
            has4[0], "an IPv4 address on an AF_INET6 socket", hint="use remote_ip6/local_ip6"
        )


def sock_of(ctx: dict[str, Any]) -> SockInfo:
    """The socket that ``ctx`` (from :func:`parse_ctx`) describes."""
    return SockInfo.from_fields(ctx)


def sock_ops_fields(ctx: dict[str, Any]) -> dict[str, int]:
    """The numeric fields of a bpf_sock_ops ``ctx`` (not op/args/socket fields)."""
    skip = {"op", "args", "state", "remote_port", "local_port", *SOCK_FIELDS}
    return {k: v for k, v in ctx.items() if k not in skip}


def family_name(family: int) -> str:
    return {int(socket.AF_INET): "AF_INET", int(socket.AF_INET6): "AF_INET6"}.get(
        family, str(family)
    )


def summary(kind: ProgramKind, ctx: dict[str, Any], data: bytes) -> str:
    """One line for a run of a socket program: the callback / the message and its socket."""
    sock = sock_of(ctx)
    where = f"{family_name(sock.family)} {sock.describe()}"
    if kind.ctx == "bpf_sock_ops":
        op = ctx.get("op", int(SockOpsOp.ACTIVE_ESTABLISHED_CB))
        return f"BPF_SOCK_OPS_{SockOpsOp(op).name} on {where}"
    return f"message {_preview(data)} on {where}"


def _preview(data: bytes, limit: int = 40) -> str:
    text = repr(data[:limit])[1:] + ("..." if len(data) > limit else "")
    return text


def flag_names(flags: int, kind: ProgramKind) -> str:
    """Redirect flags in kernel names: ``BPF_F_INGRESS``, ``BPF_F_BROADCAST|XDP_PASS``."""
    names = []
    if kind.ctx == "sk_msg_md":
        if flags & BPF_F_INGRESS:
            names.append("BPF_F_INGRESS")
        rest = flags & ~BPF_F_INGRESS
    else:
        for bit, n in (
            (BPF_F_BROADCAST, "BPF_F_BROADCAST"),
            (BPF_F_EXCLUDE_INGRESS, "BPF_F_EXCLUDE_INGRESS"),
        ):
            if flags & bit:
                names.append(n)
        names.append(f"XDP_{XdpAction(flags & XDP_REDIRECT_FALLBACK_MASK).name}")
        rest = flags & ~(BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS | XDP_REDIRECT_FALLBACK_MASK)
    if rest:
        names.append(hex(rest))
    return "|".join(names) or "0"


# ---- map changes ----------------------------------------------------------------------


def diff_maps(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, bytes, Any, Any]]:
    """(map, key, old, new) for every entry that differs between two snapshots
    (``{map: {key bytes: value} | None}``; None: not compared); old/new None = absent."""
    out = []
    for name in sorted(after):
        a, b = before.get(name), after[name]
        if a is None or b is None:
            continue
        for key in sorted(set(a) | set(b)):
            old, new = a.get(key), b.get(key)
            if old is not new and old != new:
                out.append((name, key, old, new))
    return out


def _codec(spec: Any, name: str, ncpu: int) -> MapCodec:
    return MapCodec.for_spec(spec, name, ncpu)


def _show_value(codec: MapCodec, m_type: int, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(v, SockInfo):
        return f"socket {v.describe()}"
    if not isinstance(v, (bytes, bytearray)):
        return f"socket {getattr(v, 'describe', lambda: repr(v))()}"
    v = bytes(v)
    if m_type in (MapType.DEVMAP, MapType.DEVMAP_HASH, MapType.CPUMAP) and not codec.value_tid:
        what = "qsize" if m_type == MapType.CPUMAP else "ifindex"
        word = int.from_bytes(v[:4], "little")
        prog = int.from_bytes(v[4:8], "little") if len(v) >= 8 else 0
        return {what: word, "prog": prog} if prog else {what: word}
    return codec.value_value(v)


def _text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def map_change_lines(spec: Any, changes: list, ncpu: int) -> tuple[list[str], list[dict]]:
    """Lines and JSON records of map changes, decoded like ``bpfdsl map dump``."""
    lines, records = [], []
    for name, key, old, new in changes:
        c = _codec(spec, name, ncpu)
        k = c.key_value(key)
        o, n = _show_value(c, c.type, old), _show_value(c, c.type, new)
        records.append({"map": name, "key": k, "old": o, "new": n})
        if o is None:
            lines.append(f"map {name}: added {_text(k)}: {_text(n)}")
        elif n is None:
            lines.append(f"map {name}: deleted {_text(k)} (was {_text(o)})")
        else:
            lines.append(f"map {name}: {_text(k)}: {_text(o)} -> {_text(n)}")
    return lines, records


# ---- outcome --------------------------------------------------------------------------


def describe_outcome(
    kind: ProgramKind, spec: Any, outcome: dict[str, Any], retval: int, ncpu: int = 1
) -> tuple[list[str], dict[str, Any]]:
    """Lines and a JSON dict for what one run did besides its verdict: the redirect target
    (map, key by BTF type, flags) or the empty slot and the fallback action taken, sk_msg
    apply/cork bytes, sock_ops reply and callback flags."""
    lines: list[str] = []
    info: dict[str, Any] = {}
    red, miss = outcome.get("redirect"), outcome.get("redirect_miss")
    sk = kind.ctx == "sk_msg_md"
    if red is not None:
        if red[0] == "ifindex":
            lines.append(f"redirect to ifindex {red[1]}")
            info["redirect"] = {"ifindex": red[1]}
        else:
            name, key, flags = red[0], red[1], red[-1]
            c = _codec(spec, name, ncpu) if name in spec.maps else None
            k = c.key_value(key) if c and isinstance(key, bytes) else key
            target = f" -> socket {red[2].describe()}" if sk and hasattr(red[2], "describe") else ""
            lines.append(
                f"redirect to {_map_kind(spec, name)} {name} key {_text(k)} "
                f"flags {flag_names(flags, kind)}{target}"
            )
            info["redirect"] = {"map": name, "key": k, "flags": flag_names(flags, kind)}
    if miss is not None:
        name, key, flags, why = miss
        c = _codec(spec, name, ncpu) if name in spec.maps else None
        k = c.key_value(key) if c and isinstance(key, bytes) else key  # XDP: the u32 key
        mk = _map_kind(spec, name)
        info["redirect_miss"] = {
            "map": name,
            "key": k,
            "flags": flag_names(flags, kind),
            "why": why,
        }
        if why == "flags":
            verdict = "SK_DROP" if sk else "XDP_ABORTED"
            lines.append(
                f"redirect into {mk} {name} refused: flags {flag_names(flags, kind)} are not "
                f"allowed ({verdict})"
            )
        elif sk:
            lines.append(f"redirect miss: {mk} {name} has no socket under key {_text(k)}: SK_DROP")
        else:
            fb = XdpAction(flags & XDP_REDIRECT_FALLBACK_MASK).name
            note = (
                " (fallback 0 is XDP_ABORTED: the frame is dropped and counted as an exception)"
                if fb == "ABORTED"
                else ""
            )
            lines.append(
                f"redirect miss: {mk} {name} slot {_text(k)} is empty; fallback XDP_{fb} taken{note}"
            )
    if sk:
        for f in ("apply_bytes", "cork_bytes"):
            if outcome.get(f):
                lines.append(f"msg_{f}({outcome[f]})")
                info[f] = outcome[f]
    if kind.ctx == "bpf_sock_ops":
        reply, flags = outcome.get("reply", 0), outcome.get("cb_flags", 0)
        info |= {"reply": reply, "cb_flags": flags}
        if retval == 1:
            lines.append(f"returned 1: the kernel takes reply {reply}")
        else:
            lines.append(f"returned {retval}: not 1, so the kernel fails this callback (-EPERM)")
        if flags:
            names = "|".join(f"BPF_SOCK_OPS_{f.name}_CB_FLAG" for f in SockOpsCbFlag if flags & f)
            lines.append(f"bpf_sock_ops_cb_flags: {names}")
    return lines, info


def _map_kind(spec: Any, name: str) -> str:
    m = spec.maps.get(name)
    try:
        return MapType(m.map_type).name.lower() if m is not None else "map"
    except ValueError:
        return "map"


# ---- map entries set before a run -----------------------------------------------------

_SOCKET_MAPS = (MapType.SOCKMAP, MapType.SOCKHASH)


@dataclass(slots=True)
class MapEntry:
    """One entry to put into a map before a run: ``map`` name, ``key`` and ``value`` as
    text (``--map NAME KEY VALUE``) or JSON values (``--maps FILE``), ``source`` where it
    was given (``--map`` or the file's path), for errors."""

    map: str
    key: Any
    value: Any
    source: str = "--map"


def _bad_file(msg: str) -> UsageError:
    return UsageError(
        error(
            "bad-maps-file",
            msg,
            hint='give {"MAP": [[KEY, VALUE], ...]} or {"MAP": {"KEY": VALUE, ...}}',
        )
    )


def read_entries(path: str) -> list[MapEntry]:
    """The entries of a JSON file ``{"MAP": [[KEY, VALUE], ...] | {"KEY": VALUE, ...}, ...}``
    (keys and values as ``--map`` takes them, or JSON numbers, objects for structs, lists
    for arrays).  Raises UsageError (``bad-maps-file``) for a file that is no such JSON."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise _bad_file(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise _bad_file(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    shape = 'expected {"MAP": [[KEY, VALUE], ...]} or {"MAP": {"KEY": VALUE, ...}}'
    if not isinstance(doc, dict):
        raise _bad_file(f"{path}: {shape}")
    out: list[MapEntry] = []
    for name, entries in doc.items():
        if isinstance(entries, dict):
            out.extend(MapEntry(name, k, v, path) for k, v in entries.items())
        elif isinstance(entries, list) and all(
            isinstance(e, list) and len(e) == 2 for e in entries
        ):
            out.extend(MapEntry(name, k, v, path) for k, v in entries)
        else:
            raise _bad_file(f"{path}: map {name!r}: {shape}")
    return out


def map_entries(items: list | None, path: str | None = None) -> list[MapEntry]:
    """The entries of ``--maps FILE`` (``path``) then of the ``--map NAME KEY VALUE``
    ``items``, in that order: a key given on the command line wins over the file."""
    out = read_entries(path) if path else []
    return out + [MapEntry(name, key, value) for name, key, value in items or []]


def fill_maps(engine: Any, spec: Any, entries: list[MapEntry], ctx: dict[str, Any]) -> int:
    """Put ``entries`` (:func:`map_entries`) into ``engine``'s maps before a run, on
    either engine; returns how many.  Keys and values are parsed by the map's BTF types
    as ``bpfdsl map update`` parses them, JSON values encoded by the same types
    (:class:`bpfdsl.runtime.mapview.MapCodec`); maps without BTF types take unsigned
    integers or ``hex:BYTES``; per-CPU maps get the value on every CPU.  In a
    sockmap/sockhash the value ``peer`` is the other end of the ``ctx`` socket and
    ``self`` that socket (interpreter only: the kernel needs a real socket).

    Raises UsageError: ``bad-map`` for an unknown map, ``bad-value`` for a bad key/value,
    a socket on the kernel or an entry the map refuses (full, an index past an array).
    """
    for e in entries:
        name = e.map
        if name not in spec.maps:
            raise UsageError(
                error(
                    "bad-map",
                    f"{e.source} {name}: the object has no map {name!r}",
                    hint=f"maps: {', '.join(spec.maps) or 'none'}",
                )
            )
        codec = _codec(spec, name, getattr(engine, "ncpus", 1))
        key = codec.encode_key(e.key)
        if spec.maps[name].map_type in _SOCKET_MAPS:
            which = str(e.value).strip().lower()
            if which not in ("peer", "self"):
                raise UsageError(
                    error(
                        "bad-value",
                        f"{e.source} {name}: a {_map_kind(spec, name)} holds sockets, "
                        f"not {e.value!r}",
                        hint="VALUE: peer (the other end of the --ctx socket) or self",
                    )
                )
            if not hasattr(engine, "collection"):
                raise UsageError(
                    error(
                        "bad-value",
                        f"{e.source} {name}: the kernel takes only real sockets into a "
                        f"{_map_kind(spec, name)}",
                        hint="use --engine interp, or fill it from a sock_ops program",
                    )
                )
            sock = sock_of(ctx)
            value: Any = sock.peer() if which == "peer" else sock
        else:
            value = codec.all_cpus(codec.encode_value(e.value))
        try:
            engine.set_map(name, key, value)
        except OSError as err:
            raise UsageError(
                error(
                    "bad-value",
                    f"{e.source}: map {name!r}: {e.key!r} -> {e.value!r}: {err.strerror or err}",
                )
            ) from None
    return len(entries)
