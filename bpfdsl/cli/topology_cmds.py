"""CLI: ``bpfdsl apply [--plan] FILE``, ``bpfdsl status FILE``, ``bpfdsl down FILE``
(topology files, docs/topology.md)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from bpfdsl.cli.commands import FAILED, OK, command_help


def register(sub: Any) -> None:
    a = sub.add_parser(
        "apply",
        help=command_help("apply"),
        description="Compile every object of the topology FILE (TOML, docs/topology.md), "
        "load the new or changed ones into staging pin dirs (the kernel verifier), then "
        "change what differs: map contents, cpumap/devmap/prog_array slots, sk_msg and "
        "sock_ops attachments, XDP programs (replaced atomically).  A failure or "
        "SIGINT/SIGTERM undoes every change: the old state keeps running; after a SIGKILL "
        "the next apply, down or attach repairs it (from its record in /run/bpfdsl/intents). "
        "A second copy at once waits for the first.  A second apply changes nothing and "
        "says so.",
    )
    a.add_argument("file", metavar="FILE", help="the topology file (TOML)")
    a.add_argument(
        "--plan",
        action="store_true",
        help="print what apply would change, change nothing (no lock, no repair: an "
        "interrupted apply the next apply repairs first is named as pending)",
    )
    a.set_defaults(func=cmd_apply)
    s = sub.add_parser(
        "status",
        help=command_help("status"),
        description="Missing or changed attachments and slots, map entries absent or "
        "different, objects edited since the last apply, pinned programs whose tag is not "
        "the applied one, interrupted commands a repair waits for; then the run config "
        "(libxdp priority, chain-call actions) of each XDP program that declares one.  "
        "Exit 0: as declared; 1: drift.",
    )
    s.add_argument("file", metavar="FILE", help="the topology file (TOML)")
    s.set_defaults(func=cmd_status)
    d = sub.add_parser(
        "down",
        help=command_help("down"),
        description="Detach the topology's XDP, sock_ops and sk_msg programs and remove "
        "every pin under its pin dir (its maps and their entries go with them).",
    )
    d.add_argument("file", metavar="FILE", help="the topology file (TOML)")
    d.set_defaults(func=cmd_down)


def _read(path: str, *, compile_all: bool = True) -> tuple[Any, dict[str, Any]]:
    from bpfdsl.diagnostics import DiagnosticError
    from bpfdsl.runtime.topology import build, read_topology

    top = read_topology(path)
    if not compile_all:
        return top, {}
    try:
        return top, build(top)
    except DiagnosticError as e:
        e.diagnostics[0].notes.append(f"{path}: nothing was changed (the file does not build)")
        raise


def cmd_apply(args: argparse.Namespace) -> int:
    from bpfdsl.runtime import topology_ops

    top, built = _read(args.file)
    res = topology_ops.apply(top, built, dry_run=args.plan)
    topology_ops.print_notes(res.notes)
    if args.json:
        out = {
            "file": top.path,
            "pin_dir": top.pin_dir,
            "plan": args.plan,
            "applied": res.applied,
            "changes": topology_ops.describe_json(res.changes),
        }
        if args.plan:
            out["pending"] = res.pending
        print(json.dumps(out))
        return OK
    if not res.changes:
        print(f"no change: the system is as {args.file} declares (pin dir {top.pin_dir})")
    else:
        n = len(res.changes)
        head = "plan" if args.plan else "applied"
        print(f"{head}: {n} change{'s' if n != 1 else ''} ({args.file}, pin dir {top.pin_dir})")
        for ch in res.changes:
            print(f"  {ch.text()}")
    for line in res.pending:  # --plan only: it repairs nothing, the apply would first
        print(f"repair pending: {line}")
    if res.pending:
        print("  (this plan reads the system as the interrupted command left it)")
    return OK


def cmd_status(args: argparse.Namespace) -> int:
    from bpfdsl.runtime import topology_ops

    top, built = _read(args.file)
    drift = topology_ops.status(top, built)
    rcs = topology_ops.run_configs(built)
    if args.json:
        print(
            json.dumps(
                {
                    "file": top.path,
                    "pin_dir": top.pin_dir,
                    "in_sync": not drift,
                    "drift": [d.to_dict() for d in drift],
                    "run_config": {
                        p: {"priority": rc.priority, "chain_call": list(rc.chain_call)}
                        for p, rc in rcs.items()
                    },
                }
            )
        )
        return OK if not drift else FAILED
    if not drift:
        print(f"in sync: the system is as {args.file} declares (pin dir {top.pin_dir})")
    else:
        n = len(drift)
        print(f"drift: {n} difference{'s' if n != 1 else ''} from {args.file}")
        for d in drift:
            print(f"  {d.text()}")
    for p, rc in rcs.items():  # where each XDP program sits in a libxdp chain
        chain = ", ".join(rc.chain_call) or "none"
        print(f"run config of {p}: priority {rc.priority}, chain_call {chain}")
    if drift:
        print(f"`bpfdsl apply {args.file}` brings it back", file=sys.stderr)
    return OK if not drift else FAILED


def cmd_down(args: argparse.Namespace) -> int:
    from bpfdsl.runtime import topology_ops

    top, _ = _read(args.file, compile_all=False)
    done, notes = topology_ops.down(top)
    topology_ops.print_notes(notes)
    if args.json:
        print(json.dumps({"file": top.path, "pin_dir": top.pin_dir, "removed": done}))
        return OK
    if not done:
        print(f"nothing to remove: {top.pin_dir} does not exist")
        return OK
    for line in done:
        print(line)
    return OK
