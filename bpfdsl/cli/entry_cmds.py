"""CLI: ``bpfdsl cpumap|devmap|progarray set|delete|show`` -- the entries of the maps whose
values name kernel objects (a CPU's queue, an egress interface, a program), over
bpfdsl.runtime.cpumap/devmap/progarray.

One table, :data:`MAP_VERBS`, holds each command's verbs, their help and arguments and the
function that runs them; :func:`register` makes the argparse sub-parsers from it.

MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir) | id:N.
PROG := NAME (pinned in the map's pin dir) | PIN_PATH | id:N.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bpfdsl.cli import kernel_int
from bpfdsl.cli.commands import OK, command_help
from bpfdsl.cli.objrefs import MAP_HELP, PROG_HELP, emit, open_map, open_prog

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands


# ---- commands --------------------------------------------------------------------


@contextmanager
def _maybe_netns(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    from bpfdsl.kernel.netlink import in_netns

    with in_netns(name):
        yield


def cmd_cpumap_set(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_set

    with (
        open_map(args.map, lock=True) as (fd, name, pin_dir),
        open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        cpumap_set(fd, args.cpu, args.qsize, pf, map_name=name, prog_name=pn)
    what = f" with program {pn}" if pf is not None else ""
    emit(
        args,
        {"map": name, "cpu": args.cpu, "qsize": args.qsize, "prog": pn or None},
        f"cpumap {name}: CPU {args.cpu} qsize {args.qsize}{what}",
    )
    return OK


def cmd_cpumap_delete(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_delete

    with open_map(args.map, lock=True) as (fd, name, _d):
        gone = cpumap_delete(fd, args.cpu, map_name=name)
    emit(
        args,
        {"map": name, "cpu": args.cpu, "deleted": gone},
        f"cpumap {name}: CPU {args.cpu} " + ("removed" if gone else "was not set"),
    )
    return OK


def cmd_cpumap_show(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_entries

    with open_map(args.map) as (fd, name, _d):
        rows = cpumap_entries(fd, map_name=name)
    if args.json:
        print(json.dumps([{"cpu": e.cpu, "qsize": e.qsize, "prog_id": e.prog_id} for e in rows]))
        return OK
    print(f"cpumap {name}: {len(rows)} CPU(s)")
    for e in rows:
        prog = f"  prog id {e.prog_id}" if e.prog_id else ""
        print(f"  cpu {e.cpu}: qsize {e.qsize}{prog}")
    return OK


def cmd_devmap_set(args: argparse.Namespace) -> int:
    import sys

    from bpfdsl.runtime.attach import devmap_target_warning
    from bpfdsl.runtime.devmap import devmap_set, resolve_interface

    with (
        open_map(args.map, lock=True) as (fd, name, pin_dir),
        open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        with _maybe_netns(args.netns):
            key = args.key if isinstance(args.key, int) else resolve_interface(args.key)
            idx = devmap_set(fd, key, args.iface, pf, map_name=name, prog_name=pn)
            warning = devmap_target_warning(name, key, idx)  # in IFACE's namespace
    if warning is not None:
        print(warning.render(), file=sys.stderr)
    what = f" through program {pn}" if pf is not None else ""
    emit(
        args,
        {
            "map": name,
            "key": key,
            "ifindex": idx,
            "iface": args.iface,
            "prog": pn or None,
            "warnings": [warning.message] if warning is not None else [],
        },
        f"devmap {name}: key {key} -> {args.iface} (ifindex {idx}){what}",
    )
    return OK


def cmd_devmap_delete(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.devmap import devmap_delete

    with open_map(args.map, lock=True) as (fd, name, _d):
        gone = devmap_delete(fd, args.key, map_name=name)
    emit(
        args,
        {"map": name, "key": args.key, "deleted": gone},
        f"devmap {name}: key {args.key} " + ("removed" if gone else "was not set"),
    )
    return OK


def cmd_devmap_show(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.devmap import devmap_entries

    with open_map(args.map) as (fd, name, _d), _maybe_netns(args.netns):
        rows = devmap_entries(fd, map_name=name)
    if args.json:
        print(
            json.dumps(
                [
                    {"key": e.key, "ifindex": e.ifindex, "iface": e.ifname, "prog_id": e.prog_id}
                    for e in rows
                ]
            )
        )
        return OK
    print(f"devmap {name}: {len(rows)} entr{'y' if len(rows) == 1 else 'ies'}")
    for e in rows:
        prog = f"  prog id {e.prog_id}" if e.prog_id else ""
        print(f"  key {e.key}: {e.ifname} (ifindex {e.ifindex}){prog}")
    return OK


def cmd_progarray_set(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.progarray import prog_array_set

    with open_map(args.map) as (fd, name, pin_dir), open_prog(args.prog, pin_dir) as (pf, pn):
        assert pf is not None  # PROG is a required argument
        prog_array_set(fd, args.key, pf, map_name=name, prog_name=pn)
    emit(
        args,
        {"map": name, "key": args.key, "prog": pn},
        f"prog_array {name}: slot {args.key} -> {pn}",
    )
    return OK


def cmd_progarray_delete(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.progarray import prog_array_delete

    with open_map(args.map) as (fd, name, _d):
        gone = prog_array_delete(fd, args.key, map_name=name)
    emit(
        args,
        {"map": name, "key": args.key, "deleted": gone},
        f"prog_array {name}: slot {args.key} " + ("emptied" if gone else "was empty"),
    )
    return OK


def cmd_progarray_show(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.progarray import prog_array_slots

    with open_map(args.map) as (fd, name, _d):
        rows = prog_array_slots(fd, map_name=name)
    if args.json:
        print(
            json.dumps(
                [{"key": r.index, "prog_id": r.prog_id, "prog_name": r.prog_name} for r in rows]
            )
        )
        return OK
    print(f"prog_array {name}: {len(rows)} slot(s) filled")
    for r in rows:
        print(f"  slot {r.index}: {r.prog_name or '?'} (prog id {r.prog_id})")
    return OK


# ---- the table -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Arg:
    """One argument of a verb: ``add_argument(*flags, **options)`` (argparse's names:
    ``metavar``, ``type``, ``required``, ``help``)."""

    flags: tuple[str, ...]
    options: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Verb:
    """``bpfdsl COMMAND NAME``: its one-line ``help``, its ``args`` in order, and ``run``,
    the function that carries it out (returns the exit code)."""

    name: str
    help: str
    args: tuple[Arg, ...]
    run: Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class MapCommand:
    """``bpfdsl NAME VERB ...``: the ``description`` of ``bpfdsl NAME --help`` and its
    verbs (its line of ``bpfdsl --help``: cli.commands.COMMANDS)."""

    description: str
    verbs: tuple[Verb, ...]


def _arg(*flags: str, **options: Any) -> Arg:
    return Arg(flags, options)


_MAP = _arg("map", metavar="MAP", help=MAP_HELP)
_CPU = _arg("cpu", type=kernel_int("CPU", "u32", field="the cpumap key"), metavar="CPU")
# the egress ifindex: an int > 0 (struct net_device), u32 in struct bpf_devmap_val
_IFACE = kernel_int("IFACE", "int", lo=1, field="an ifindex", names=True)

# command -> its verbs (the cli.COMMANDS entries of these commands name this module)
MAP_VERBS: dict[str, MapCommand] = {
    "cpumap": MapCommand(
        "cpumap entries per struct bpf_cpumap_val. " + MAP_HELP + ". " + PROG_HELP,
        (
            Verb(
                "set",
                "send redirected frames to CPU, optionally through a program",
                (
                    _MAP,
                    _CPU,
                    _arg(
                        "--qsize",
                        type=kernel_int("--qsize", "u32", field="bpf_cpumap_val.qsize"),
                        required=True,
                        help="queue size in frames (1..16384)",
                    ),
                    _arg("--prog", metavar="PROG", help="xdp(cpumap) program run on the CPU"),
                ),
                cmd_cpumap_set,
            ),
            Verb("delete", "remove a CPU from the map", (_MAP, _CPU), cmd_cpumap_delete),
            Verb("show", "the CPUs in the map", (_MAP,), cmd_cpumap_show),
        ),
    ),
    "devmap": MapCommand(
        "devmap entries per struct bpf_devmap_val; interfaces are resolved in "
        "this network namespace (or --netns). " + MAP_HELP + ". " + PROG_HELP,
        (
            Verb(
                "set",
                "make KEY send to interface IFACE",
                (
                    _MAP,
                    _arg(
                        "key",
                        metavar="KEY",
                        type=kernel_int("KEY", "u32", field="the devmap key", names=True),
                        help="slot (devmap) or u32 key (devmap_hash); an interface name means "
                        "its ifindex (the usual key of a port table keyed by ingress interface)",
                    ),
                    _arg(
                        "iface",
                        metavar="IFACE",
                        type=_IFACE,
                        help="egress interface name or ifindex",
                    ),
                    _arg("--prog", metavar="PROG", help="xdp(devmap) program run before transmit"),
                    _arg("--netns", metavar="NAME", help="named network namespace of IFACE"),
                ),
                cmd_devmap_set,
            ),
            Verb(
                "delete",
                "remove KEY",
                (
                    _MAP,
                    _arg(
                        "key", type=kernel_int("KEY", "u32", field="the devmap key"), metavar="KEY"
                    ),
                ),
                cmd_devmap_delete,
            ),
            Verb(
                "show",
                "the entries of the map",
                (
                    _MAP,
                    _arg(
                        "--netns", metavar="NAME", help="name interfaces as seen in this namespace"
                    ),
                ),
                cmd_devmap_show,
            ),
        ),
    ),
    "progarray": MapCommand(
        "The slots of a prog_array: which program `tail_call(map, slot)` runs. "
        "A slot takes only a program of the kind of the ones that tail-call through the "
        "map. " + MAP_HELP + ". " + PROG_HELP,
        (
            Verb(
                "set",
                "put PROG into slot KEY",
                (
                    _MAP,
                    _arg("key", type=int, metavar="KEY", help="the slot (u32, below max_entries)"),
                    _arg("prog", metavar="PROG", help=PROG_HELP),
                ),
                cmd_progarray_set,
            ),
            Verb(
                "delete",
                "empty slot KEY",
                (_MAP, _arg("key", type=int, metavar="KEY")),
                cmd_progarray_delete,
            ),
            Verb(
                "show",
                "the filled slots and their programs (name and id)",
                (_MAP,),
                cmd_progarray_show,
            ),
        ),
    ),
}


def register(sub: Subcommands) -> None:
    """The sub-parsers of every command of :data:`MAP_VERBS` and of their verbs."""
    for command, c in MAP_VERBS.items():
        p = sub.add_parser(command, help=command_help(command), description=c.description)
        v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
        for verb in c.verbs:
            s = v.add_parser(verb.name, help=verb.help)
            for a in verb.args:
                s.add_argument(*a.flags, **a.options)
            s.set_defaults(func=verb.run)
