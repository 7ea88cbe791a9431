"""Object level: map entries given as text or JSON values (pure, no kernel), for preloading
the maps of a test run (``bpfdsl run --map NAME KEY VALUE``, ``--maps FILE``).

A key or value is parsed by the map's BTF type as ``bpfdsl map update`` does
(:mod:`bpfdsl.abi.btf.values`: ``42``, ``0x2a``, ``10.0.0.1``, ``10.0.0.0/8`` for an LPM
key, a JSON object for a struct, ``hex:BYTES``); maps without BTF key/value types (devmap,
cpumap, ...) take unsigned integers (little endian, the key/value size) or ``hex:BYTES``.
"""

from __future__ import annotations

import json
from typing import Any

from bpfdsl.abi.btf.values import encode_value, int_range, parse_value
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.obj.spec import CollectionSpec


def _fail(msg: str, hint: str | None = None) -> UsageError:
    return UsageError(error("bad-map-entry", msg, hint=hint))


def _untyped(v: Any, size: int) -> bytes:
    if isinstance(v, str) and v.strip().startswith("hex:"):
        return bytes.fromhex(v.strip()[4:].replace(" ", ""))
    n = int(v.replace("_", ""), 0) if isinstance(v, str) else v
    if not isinstance(n, int) or isinstance(n, bool):
        raise ValueError(f"expected an integer or hex:BYTES, got {v!r}")
    lo, hi = int_range(size, signed=False)
    if not lo <= n <= hi:
        raise ValueError(f"{n} does not fit in {size} bytes")
    return n.to_bytes(size, "little")


def _encode(spec: CollectionSpec, tid: int, v: Any, size: int) -> bytes:
    if spec.btf is not None and tid:
        return (
            parse_value(spec.btf, tid, v) if isinstance(v, str) else encode_value(spec.btf, tid, v)
        )
    return _untyped(v, size)


def entry_bytes(spec: CollectionSpec, name: str, key: Any, value: Any) -> tuple[bytes, bytes]:
    """(key bytes, value bytes) of an entry of map ``name`` of ``spec``; ``key``/``value``
    are text (parsed by the BTF type) or JSON values.  Raises UsageError naming the map."""
    m = spec.maps.get(name)
    if m is None:
        raise _fail(
            f"no map {name!r} in {spec.path}", hint="maps: " + (", ".join(spec.maps) or "none")
        )
    out = []
    for what, tid, size, v in (("key", m.key_type_id, m.key_size, key),
                               ("value", m.value_type_id, m.value_size, value)):  # fmt: skip
        try:
            raw = _encode(spec, tid, v, size)
        except ValueError as e:
            raise _fail(f"map {name!r}: bad {what} {v!r}: {e}") from None
        if len(raw) != size:
            raise _fail(f"map {name!r}: {what} {v!r} is {len(raw)} bytes, the map wants {size}")
        out.append(raw)
    return out[0], out[1]


def read_entries(path: str) -> list[tuple[str, Any, Any]]:
    """Entries of a JSON file ``{"MAP": [[KEY, VALUE], ...] | {"KEY": VALUE, ...}, ...}``
    as (map, key, value).  Raises UsageError for a file that is no such JSON."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise _fail(f"{path}: cannot read: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise _fail(f"{path}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    shape = 'expected {"MAP": [[KEY, VALUE], ...]} or {"MAP": {"KEY": VALUE, ...}}'
    if not isinstance(doc, dict):
        raise _fail(f"{path}: {shape}")
    out = []
    for name, entries in doc.items():
        if isinstance(entries, dict):
            out.extend((name, k, v) for k, v in entries.items())
        elif isinstance(entries, list) and all(
            isinstance(e, list) and len(e) == 2 for e in entries
        ):
            out.extend((name, k, v) for k, v in entries)
        else:
            raise _fail(f"{path}: map {name!r}: {shape}")
    return out
