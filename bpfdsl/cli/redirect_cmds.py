"""CLI: ``bpfdsl sockmap|skmsg attach|detach``, ``bpfdsl sockops attach|detach`` -- thin
wrappers over bpfdsl.runtime.sockmap/cgroup (the cpumap and devmap entry verbs: entry_cmds).

MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir) | id:N.
PROG := NAME (pinned in the map's / given pin dir) | PIN_PATH | id:N.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bpfdsl.cli.commands import OK, command_help
from bpfdsl.cli.objrefs import MAP_HELP, PROG_HELP
from bpfdsl.cli.objrefs import emit as _emit
from bpfdsl.cli.objrefs import open_map as _open_map
from bpfdsl.cli.objrefs import open_prog as _open_prog

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands


def register(sub: Subcommands) -> None:
    _register_sockmap(sub)
    _register_sockops(sub)


def _map_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("map", metavar="MAP", help=MAP_HELP)


def _register_sockmap(sub: Subcommands) -> None:
    p = sub.add_parser(
        "sockmap",
        aliases=["skmsg"],
        help=command_help("sockmap"),
        description="BPF_PROG_ATTACH of an sk_msg program to a sockmap or sockhash "
        "(BPF_SK_MSG_VERDICT); it runs for sockets added afterwards. "
        + MAP_HELP
        + ". "
        + PROG_HELP,
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, func in (("attach", cmd_sockmap_attach), ("detach", cmd_sockmap_detach)):
        a = v.add_parser(verb, help=f"{verb} the sk_msg program")
        _map_arg(a)
        a.add_argument("--prog", metavar="PROG", required=True, help="the sk_msg program")
        a.set_defaults(func=func)


def _register_sockops(sub: Subcommands) -> None:
    p = sub.add_parser(
        "sockops",
        help=command_help("sockops"),
        description="BPF_PROG_ATTACH of a sock_ops program to a cgroup v2 directory "
        "(BPF_CGROUP_SOCK_OPS, BPF_F_ALLOW_MULTI); it runs for TCP sockets created by "
        "processes in that cgroup. " + PROG_HELP + " (NAME needs --pin-dir)",
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, func in (("attach", cmd_sockops_attach), ("detach", cmd_sockops_detach)):
        a = v.add_parser(verb, help=f"{verb} the sock_ops program")
        a.add_argument("prog", metavar="PROG")
        a.add_argument("--pin-dir", metavar="DIR", help="pin dir holding the program NAME")
        a.add_argument(
            "--cgroup",
            metavar="PATH",
            required=True,
            help="cgroup v2 directory, absolute or relative to the cgroup2 mount "
            "('.' = the root of the hierarchy: every process of the machine)",
        )
        a.set_defaults(func=func)


# ---- commands --------------------------------------------------------------------


def cmd_sockmap_attach(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.sockmap import sk_msg_attach

    with (
        _open_map(args.map, lock=True) as (fd, name, pin_dir),
        _open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        assert pf is not None  # PROG is a required argument
        sk_msg_attach(fd, pf, map_name=name, prog_name=pn)
    _emit(
        args,
        {"map": name, "prog": pn, "attached": True},
        f"sk_msg {pn} attached to {name} (runs for sockets added from now on)",
    )
    return OK


def cmd_sockmap_detach(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.sockmap import sk_msg_detach

    with (
        _open_map(args.map, lock=True) as (fd, name, pin_dir),
        _open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        assert pf is not None  # PROG is a required argument
        done = sk_msg_detach(fd, pf, map_name=name, prog_name=pn)
    _emit(
        args,
        {"map": name, "prog": pn, "detached": done},
        f"sk_msg {pn} " + (f"detached from {name}" if done else f"was not attached to {name}"),
    )
    return OK


def cmd_sockops_attach(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cgroup import resolve_cgroup, sock_ops_attach

    cg = resolve_cgroup(args.cgroup)
    with _open_prog(args.prog, args.pin_dir) as (pf, pn):
        assert pf is not None  # PROG is a required argument
        sock_ops_attach(cg, pf, prog_name=pn)
    _emit(
        args, {"cgroup": cg, "prog": pn, "attached": True}, f"sock_ops {pn} attached to cgroup {cg}"
    )
    return OK


def cmd_sockops_detach(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cgroup import resolve_cgroup, sock_ops_detach

    cg = resolve_cgroup(args.cgroup)
    with _open_prog(args.prog, args.pin_dir) as (pf, pn):
        assert pf is not None  # PROG is a required argument
        done = sock_ops_detach(cg, pf, prog_name=pn)
    _emit(
        args,
        {"cgroup": cg, "prog": pn, "detached": done},
        f"sock_ops {pn} " + (f"detached from {cg}" if done else f"was not attached to {cg}"),
    )
    return OK
