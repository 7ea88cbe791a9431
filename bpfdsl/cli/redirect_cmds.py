"""CLI: ``bpfdsl cpumap|devmap set|delete|show``, ``bpfdsl sockmap|skmsg attach|detach``,
``bpfdsl sockops attach|detach`` -- thin wrappers over bpfdsl.runtime.cpumap/devmap/sockmap/cgroup.

MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir) | id:N.
PROG := NAME (pinned in the map's / given pin dir) | PIN_PATH | id:N.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from bpfdsl.cli.objrefs import MAP_HELP, PROG_HELP
from bpfdsl.cli.objrefs import emit as _emit
from bpfdsl.cli.objrefs import open_map as _open_map
from bpfdsl.cli.objrefs import open_prog as _open_prog

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands

OK = 0


def register(sub: Subcommands) -> None:
    _register_cpumap(sub)
    _register_devmap(sub)
    _register_sockmap(sub)
    _register_sockops(sub)


def _map_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("map", metavar="MAP", help=MAP_HELP)


def _register_cpumap(sub: Subcommands) -> None:
    from bpfdsl.cli import kernel_int

    cpu = kernel_int("CPU", "u32", field="the cpumap key")
    p = sub.add_parser(
        "cpumap",
        help="set, delete, show cpumap entries (CPU, queue size, on-CPU program)",
        description="cpumap entries per struct bpf_cpumap_val. " + MAP_HELP + ". " + PROG_HELP,
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = v.add_parser("set", help="send redirected frames to CPU, optionally through a program")
    _map_arg(s)
    s.add_argument("cpu", type=cpu, metavar="CPU")
    s.add_argument(
        "--qsize",
        type=kernel_int("--qsize", "u32", field="bpf_cpumap_val.qsize"),
        required=True,
        help="queue size in frames (1..16384)",
    )
    s.add_argument("--prog", metavar="PROG", help="xdp(cpumap) program run on the CPU")
    s.set_defaults(func=cmd_cpumap_set)
    d = v.add_parser("delete", help="remove a CPU from the map")
    _map_arg(d)
    d.add_argument("cpu", type=cpu, metavar="CPU")
    d.set_defaults(func=cmd_cpumap_delete)
    sh = v.add_parser("show", help="the CPUs in the map")
    _map_arg(sh)
    sh.set_defaults(func=cmd_cpumap_show)


def _register_devmap(sub: Subcommands) -> None:
    from bpfdsl.cli import kernel_int

    # the egress ifindex: an int > 0 (struct net_device), u32 in struct bpf_devmap_val
    ifindex = kernel_int("IFACE", "int", lo=1, field="an ifindex", names=True)
    p = sub.add_parser(
        "devmap",
        help="set, delete, show devmap/devmap_hash entries (egress interface, program)",
        description="devmap entries per struct bpf_devmap_val; interfaces are resolved in "
        "this network namespace (or --netns). " + MAP_HELP + ". " + PROG_HELP,
    )
    v = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    s = v.add_parser("set", help="make KEY send to interface IFACE")
    _map_arg(s)
    s.add_argument(
        "key",
        metavar="KEY",
        type=kernel_int("KEY", "u32", field="the devmap key", names=True),
        help="slot (devmap) or u32 key (devmap_hash); an interface name means its ifindex "
        "(the usual key of a port table keyed by ingress interface)",
    )
    s.add_argument("iface", metavar="IFACE", type=ifindex, help="egress interface name or ifindex")
    s.add_argument("--prog", metavar="PROG", help="xdp(devmap) program run before transmit")
    s.add_argument("--netns", metavar="NAME", help="named network namespace of IFACE")
    s.set_defaults(func=cmd_devmap_set)
    d = v.add_parser("delete", help="remove KEY")
    _map_arg(d)
    d.add_argument("key", type=kernel_int("KEY", "u32", field="the devmap key"), metavar="KEY")
    d.set_defaults(func=cmd_devmap_delete)
    sh = v.add_parser("show", help="the entries of the map")
    _map_arg(sh)
    sh.add_argument("--netns", metavar="NAME", help="name interfaces as seen in this namespace")
    sh.set_defaults(func=cmd_devmap_show)


def _register_sockmap(sub: Subcommands) -> None:
    p = sub.add_parser(
        "sockmap",
        aliases=["skmsg"],
        help="attach/detach an sk_msg program to a sockmap/sockhash",
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
        help="attach/detach a sock_ops program to a cgroup v2",
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


# ---- opening maps and programs ----------------------------------------------------


@contextmanager
def _maybe_netns(name: str | None) -> Iterator[None]:
    if not name:
        yield
        return
    from bpfdsl.kernel.netlink import in_netns

    with in_netns(name):
        yield


# ---- commands --------------------------------------------------------------------


def cmd_cpumap_set(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_set

    with (
        _open_map(args.map, lock=True) as (fd, name, pin_dir),
        _open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        cpumap_set(fd, args.cpu, args.qsize, pf, map_name=name, prog_name=pn)
    what = f" with program {pn}" if pf is not None else ""
    _emit(
        args,
        {"map": name, "cpu": args.cpu, "qsize": args.qsize, "prog": pn or None},
        f"cpumap {name}: CPU {args.cpu} qsize {args.qsize}{what}",
    )
    return OK


def cmd_cpumap_delete(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_delete

    with _open_map(args.map, lock=True) as (fd, name, _d):
        gone = cpumap_delete(fd, args.cpu, map_name=name)
    _emit(
        args,
        {"map": name, "cpu": args.cpu, "deleted": gone},
        f"cpumap {name}: CPU {args.cpu} " + ("removed" if gone else "was not set"),
    )
    return OK


def cmd_cpumap_show(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.cpumap import cpumap_entries

    with _open_map(args.map) as (fd, name, _d):
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
        _open_map(args.map, lock=True) as (fd, name, pin_dir),
        _open_prog(args.prog, pin_dir) as (pf, pn),
    ):
        with _maybe_netns(args.netns):
            key = args.key if isinstance(args.key, int) else resolve_interface(args.key)
            idx = devmap_set(fd, key, args.iface, pf, map_name=name, prog_name=pn)
            warning = devmap_target_warning(name, key, idx)  # in IFACE's namespace
    if warning is not None:
        print(warning.render(), file=sys.stderr)
    what = f" through program {pn}" if pf is not None else ""
    _emit(
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

    with _open_map(args.map, lock=True) as (fd, name, _d):
        gone = devmap_delete(fd, args.key, map_name=name)
    _emit(
        args,
        {"map": name, "key": args.key, "deleted": gone},
        f"devmap {name}: key {args.key} " + ("removed" if gone else "was not set"),
    )
    return OK


def cmd_devmap_show(args: argparse.Namespace) -> int:
    from bpfdsl.runtime.devmap import devmap_entries

    with _open_map(args.map) as (fd, name, _d), _maybe_netns(args.netns):
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
