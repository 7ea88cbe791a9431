"""Object level: configs, the global VARs of ``.rodata`` set at load time (pure, no kernel).

``--set NAME=VALUE`` items become text per name (:func:`parse_config`); a value (int,
bytes, or text parsed by the VAR's BTF type: ``53``, ``0x35``, ``10.0.0.1``) becomes the
VAR's bytes (:func:`config_bytes`), the same for the loader (the .rodata array map it
creates) and the interpreter (its in-memory .rodata).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bpfdsl.abi.btf.values import encode_value, int_range, parse_value
from bpfdsl.diagnostics import UsageError, error

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable
    from typing import Any

    from bpfdsl.obj.spec import CollectionSpec


class ConfigError(UsageError):
    """A config value that does not fit its type; exit code 2 (usage)."""

    exit_code = 2


def _fail(msg: str, hint: str | None = None) -> ConfigError:
    return ConfigError(error("bad-config", msg, hint=hint))


def parse_config(items: list[str] | None, known: Iterable[str] | None = None) -> dict[str, str]:
    """``["name=value", ...]`` from ``--set`` -> {name: text}; the loader parses each text
    by the config's BTF type (``53``, ``0x35``, ``10.0.0.1``...).  ``known``: the object's
    config names (``CollectionSpec.configs``), listed in the hints and checked.

    Raises UsageError (exit 2) on an item without ``=`` or, given ``known``, an unknown name.
    """
    names = sorted(known) if known is not None else None
    hint = None if names is None else "configs of this object: " + (", ".join(names) or "none")
    out: dict[str, str] = {}
    for item in items or []:
        name, eq, value = item.partition("=")
        if not eq or not name.strip():
            raise UsageError(error("bad-config", f"--set {item!r}: expected NAME=VALUE", hint=hint))
        if names is not None and name.strip() not in names:
            raise UsageError(error("unknown-config", f"unknown config {name.strip()!r}", hint=hint))
        out[name.strip()] = value.strip()
    return out


def config_bytes(spec: CollectionSpec, name: str, value: Any) -> bytes:
    """Bytes of config ``name`` for ``value`` (int, bytes, or text parsed by its BTF type)."""
    var = spec.configs[name]
    try:
        if isinstance(value, bytes | bytearray):
            raw = bytes(value)
        elif spec.btf is not None and var.type_id:
            f = parse_value if isinstance(value, str) else encode_value
            raw = f(spec.btf, var.type_id, value)
        else:
            v = int(value, 0) if isinstance(value, str) else int(value)
            lo, hi = int_range(var.size, signed=False)  # no BTF: unsigned, nothing wraps
            if not lo <= v <= hi:
                raise ValueError(f"{v} does not fit in {var.size} bytes ({lo}..{hi})")
            raw = v.to_bytes(var.size, "little")
    except (ValueError, OverflowError) as e:
        raise _fail(f"config '{name}': {e}") from None
    if len(raw) != var.size:
        raise _fail(f"config '{name}' is {var.size} bytes, got {len(raw)}")
    return raw
