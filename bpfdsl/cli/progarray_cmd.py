"""CLI: ``bpfdsl progarray set|delete|show`` -- the slots of a prog_array (the programs
``tail_call`` jumps to), over bpfdsl.runtime.progarray.

MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir) | id:N.
PROG := NAME (pinned in the map's pin dir) | PIN_PATH | id:N.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from bpfdsl.cli.objrefs import MAP_HELP, PROG_HELP, emit, open_map, open_prog

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands

OK = 0


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "progarray",
        help="set, delete, show prog_array slots (tail call targets)",
        description="The slots of a prog_array: which program `tail_call(map, slot)` runs. "
        "A slot takes only a program of the kind of the ones that tail-call through the "
        "map. " + MAP_HELP + ". " + PROG_HELP,
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = v.add_parser("set", help="put PROG into slot KEY")
    s.add_argument("map", metavar="MAP", help=MAP_HELP)
    s.add_argument("key", type=int, metavar="KEY", help="the slot (u32, below max_entries)")
    s.add_argument("prog", metavar="PROG", help=PROG_HELP)
    s.set_defaults(func=cmd_progarray_set)
    d = v.add_parser("delete", help="empty slot KEY")
    d.add_argument("map", metavar="MAP", help=MAP_HELP)
    d.add_argument("key", type=int, metavar="KEY")
    d.set_defaults(func=cmd_progarray_delete)
    sh = v.add_parser("show", help="the filled slots and their programs (name and id)")
    sh.add_argument("map", metavar="MAP", help=MAP_HELP)
    sh.set_defaults(func=cmd_progarray_show)


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
