"""CLI: ``bpfdsl map dump|lookup|update|delete MAP ...`` (keys and values by BTF type)."""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from typing import TYPE_CHECKING, Any

from bpfdsl.abi.map_types import MapType, is_devmap
from bpfdsl.cli.commands import OK, command_help
from bpfdsl.cli.objrefs import MAP_HELP

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from collections.abc import Iterator

    from bpfdsl.cli import Subcommands
    from bpfdsl.diagnostics import DiagnosticError


_FLAGS = {"any": 0, "noexist": 1, "exist": 2}  # BPF_ANY, BPF_NOEXIST, BPF_EXIST (bpf.h)


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "map",
        help=command_help("map"),
        description=f"Read and write map entries by their BTF types. {MAP_HELP}. "
        "KEY/VALUE := 42 | 0x2a | 10.0.0.1 | 10.0.0.0/8 | fd00::1 | JSON object/array | "
        "hex:BYTES.  Integers never wrap: a value outside its type's range is refused.  "
        "Maps without BTF types (cpumap, devmap, sockmap...) take integers (little endian, "
        "the key/value size) or hex:BYTES.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    d = verbs.add_parser("dump", help="every entry of the map")
    d.add_argument("map", metavar="MAP")
    d.add_argument("--sum", action="store_true", help="per-CPU maps: print the sum over CPUs")
    d.set_defaults(func=cmd_map_dump)
    lk = verbs.add_parser("lookup", help="the value of one key")
    lk.add_argument("map", metavar="MAP")
    lk.add_argument("key", metavar="KEY")
    lk.set_defaults(func=cmd_map_lookup)
    up = verbs.add_parser(
        "update",
        help="set the value of one key, or of every entry of a file (--from)",
        usage="bpfdsl map update MAP (KEY VALUE | --from FILE) [--flags F]",
        description="Set one entry, or with --from FILE every entry of FILE, written "
        "4096 per system call (BPF_MAP_UPDATE_BATCH where the map kind has it).  FILE: "
        "what `bpfdsl map dump --json` prints (a JSON document with `entries`), JSON lines "
        '({"key": K, "value": V} per line), or CSV (a `key,value` header line, then one '
        "entry per line in the KEY/VALUE forms above); `-` reads stdin.",
    )
    up.add_argument("map", metavar="MAP")
    up.add_argument("key", metavar="KEY", nargs="?")
    up.add_argument("value", metavar="VALUE", nargs="?")
    up.add_argument("--from", dest="from_file", metavar="FILE", help="the entries to write")
    up.add_argument(
        "--flags",
        choices=tuple(_FLAGS),
        default="any",
        help="any (default), noexist (create only), exist (replace only)",
    )
    up.set_defaults(func=cmd_map_update)
    de = verbs.add_parser("delete", help="remove one key")
    de.add_argument("map", metavar="MAP")
    de.add_argument("key", metavar="KEY")
    de.set_defaults(func=cmd_map_delete)


def _text(v: object) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def _sum(values: object) -> object:
    if isinstance(values, list) and all(isinstance(v, int) for v in values):
        return sum(values)
    return values


def cmd_map_dump(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.mapview import MapView

    with MapView(args.map) as m:
        if args.sum and not m.percpu:  # not an error: one flag for every map of a script
            from bpfdsl.diagnostics import Diagnostic

            why = f"--sum has no effect: map '{m.name}' is not per-CPU (one value a key)"
            print(Diagnostic("note", "sum-not-percpu", why).render(), file=sys.stderr)
        rows = []
        for key, val in m.items():  # BPF_MAP_LOOKUP_BATCH where the map kind has it
            if args.sum and m.percpu:
                val = _sum(val)
            rows.append((key, val))
        if args.json:
            _print_dump_json(m.describe(), rows)
            return OK
        d = m.describe()
        print(
            f"map {d['name']!r} (id {d['id']}, {d['type']}, key {d['key_size']} B, "
            f"value {d['value_size']} B, max_entries {d['max_entries']}"
            f"{', per-CPU values' if m.percpu and not args.sum else ''})"
        )
        for k, v in rows:
            print(f"{_text(k)}: {_text(v) if v is not None else '<not readable>'}")
        print(f"{len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
        if m.type == MapType.CPUMAP:
            print(
                "note: values are struct bpf_cpumap_val (qsize, prog); `bpfdsl cpumap show` decodes them"
            )
        elif is_devmap(m.type):
            print(
                "note: values are struct bpf_devmap_val (ifindex, prog); `bpfdsl devmap show` decodes them"
            )
    return OK


def _print_dump_json(desc: dict, rows: list[tuple[Any, Any]]) -> None:
    """``{"map": DESC, "entries": [{"key": K, "value": V}, ...]}``, one entry per line:
    each line by json's C encoder (``indent=`` would take its pure-Python one, 10x
    slower on a 100,000-entry map)."""
    out = sys.stdout
    out.write('{"map": ' + json.dumps(desc) + ', "entries": [')
    sep = "\n  "
    for k, v in rows:
        out.write(sep + json.dumps({"key": k, "value": v}))
        sep = ",\n  "
    out.write("\n]}\n" if rows else "]}\n")


def cmd_map_lookup(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.mapview import MapView

    with MapView(args.map) as m:
        key = m.parse_key(args.key)
        v = m.lookup(key)
        val = None if v is None else m.value_value(v)
        if v is None:
            raise _not_found(args.map, _text(m.key_value(key)))
        if args.json:
            print(json.dumps({"key": m.key_value(key), "value": val, "found": True}))
        else:
            print(f"{_text(m.key_value(key))}: {_text(val)}")
        return OK


def cmd_map_update(args: argparse.Namespace) -> int:
    from bpfdsl.cli.objrefs import pin_dir_locked
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime.mapview import MapView

    if args.from_file is not None:
        if args.key is not None:
            raise UsageError(
                error("bad-args", "give KEY VALUE or --from FILE, not both", hint=_UPDATE_USAGE)
            )
        return _update_from(args)
    if args.key is None or args.value is None:
        raise UsageError(
            error("bad-args", "give KEY and VALUE (or --from FILE)", hint=_UPDATE_USAGE)
        )
    with pin_dir_locked(args.map), MapView(args.map) as m:  # not into a map being replaced
        key, value = m.parse_key(args.key), m.parse_value(args.value)
        m.update(key, value, _FLAGS[args.flags])
        if args.json:
            print(json.dumps({"key": m.key_value(key), "value": m.value_value(value)}))
        else:
            print(f"{_text(m.key_value(key))}: {_text(m.value_value(value))}")
    return OK


_UPDATE_USAGE = "bpfdsl map update MAP KEY VALUE, or bpfdsl map update MAP --from FILE"


def _update_from(args: argparse.Namespace) -> int:
    from bpfdsl.cli.objrefs import pin_dir_locked
    from bpfdsl.runtime.mapfile import read_entries
    from bpfdsl.runtime.mapview import MapView

    with pin_dir_locked(args.map), MapView(args.map) as m, _no_gc():
        n = m.update_batch(read_entries(args.from_file, m.json_line_encoder()), _FLAGS[args.flags])
        if args.json:
            print(json.dumps({"map": m.describe()["name"], "updated": n}))
        else:
            print(f"{args.map}: wrote {n} entr{'y' if n == 1 else 'ies'}")
    return OK


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """The cyclic garbage collector off while a file's entries are read and written: they
    make no cycles, and the collector's passes over the growing lists of entries (tuples
    of the file's fields) are a good part of the time of a large file."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def cmd_map_delete(args: argparse.Namespace) -> int:
    from bpfdsl.cli.objrefs import pin_dir_locked
    from bpfdsl.runtime.mapview import MapView

    with pin_dir_locked(args.map), MapView(args.map) as m:
        key = m.parse_key(args.key)
        if not m.delete(key):
            raise _not_found(args.map, _text(m.key_value(key)))
        if args.json:
            print(json.dumps({"key": m.key_value(key), "deleted": True}))
        else:
            print(f"{_text(m.key_value(key))}: deleted")
        return OK


def _not_found(map_ref: str, key: str) -> DiagnosticError:
    """The error of a lookup or delete of a key the map does not hold (exit 1, on stderr;
    ``--json``: the error document), as bpftool's "key not found"."""
    from bpfdsl.diagnostics import DiagnosticError, error

    return DiagnosticError(
        error(
            "key-not-found",
            f"{map_ref}: no entry for key {key}",
            hint=f"`bpfdsl map dump {map_ref}` lists the entries",
        )
    )
