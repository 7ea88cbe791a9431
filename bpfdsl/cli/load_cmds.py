"""CLI: ``bpfdsl load FILE [--pin-dir DIR] [--set NAME=VALUE]... [--log]`` and
``bpfdsl unload DIR`` (≈ ``bpftool prog loadall`` / ``rm -r`` of what it pinned)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import OK, command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands
    from bpfdsl.obj.spec import CollectionSpec
    from bpfdsl.runtime.intent import Critical, Intent
    from bpfdsl.runtime.loader import Collection
    from bpfdsl.runtime.pins import PinnedCollection


def register(sub: Subcommands) -> None:
    from bpfdsl.cli import kernel_int

    p = sub.add_parser(
        "load",
        help=command_help("load"),
        description="Load every program and map of FILE (.o, or .bpfd compiled first) and pin "
        "them under DIR/progs and DIR/maps, with a manifest so `bpfdsl show`/`unload` know "
        "them.  Needs root (CAP_BPF + CAP_NET_ADMIN).",
    )
    p.add_argument("file", metavar="FILE", help="FILE := OBJ.o | PROG.bpfd")
    p.add_argument(
        "--pin-dir",
        metavar="DIR",
        help="bpffs directory to pin into (default /sys/fs/bpf/bpfdsl/<file stem>)",
    )
    p.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="set a load-time config (.rodata variable); repeatable",
    )
    p.add_argument(
        "--pin-root",
        metavar="DIR",
        help="where maps declared with `pinning: LIBBPF_PIN_BY_NAME` are pinned and found "
        "(PIN_ROOT/NAME; default /sys/fs/bpf, as libbpf); such pins stay after `unload`",
    )
    p.add_argument(
        "--dev",
        metavar="IFACE",
        help="the interface device-bound programs (xdp(dev_bound): they call the XDP "
        "metadata kfuncs rx_hash/rx_timestamp/rx_vlan_tag) are loaded for; they can then "
        "be attached to IFACE only (native mode)",
    )
    p.add_argument(
        "--log",
        action="store_true",
        help="print the whole verifier log of every program (also on rejection)",
    )
    p.add_argument(
        "--log-level",
        # bpf_attr.log_level is a u32; kernel/bpf/log.c refuses bits outside BPF_LOG_MASK (15)
        type=kernel_int("--log-level", "u32", hi=15, field="bpf_attr.log_level"),
        default=1,
        metavar="N",
        help="verifier log level with --log (1 = instructions, 2 = + states)",
    )
    p.set_defaults(func=cmd_load)
    u = sub.add_parser(
        "unload",
        help=command_help("unload"),
        description="Detach the links pinned in DIR (printing each detached attachment), "
        "then remove every pin `bpfdsl load`/`bpfdsl attach` made there and the directory "
        "itself.  Directories without a bpfdsl manifest are refused and left untouched.",
    )
    u.add_argument("pin_dir", metavar="DIR", help="a pin dir of `bpfdsl load --pin-dir DIR`")
    u.set_defaults(func=cmd_unload)


def default_pin_dir(path: str) -> str:
    from bpfdsl.runtime.attach import DEFAULT_PIN_ROOT

    stem = re.sub(r"[^A-Za-z0-9_]", "_", os.path.basename(path).rsplit(".", 1)[0])
    return os.path.join(DEFAULT_PIN_ROOT, stem)


def cmd_load(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.obj import collection as objfile
    from bpfdsl.obj.config import parse_config
    from bpfdsl.runtime import intent, oplock, repair

    spec = objfile.read_object(object_bytes(args.file), name=args.file)
    config = parse_config(args.set, spec.configs) if args.set else {}
    pin_dir = args.pin_dir or default_pin_dir(args.file)
    level = args.log_level if args.log else 0
    ifindex = 0
    if args.dev:
        from bpfdsl.kernel import netlink

        ifindex = netlink.ifindex(args.dev)
    with oplock.OpLocks() as locks:
        with intent.Critical() as crit:  # a signal during the wait stops it (exit 128+N)
            locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
            locks.acquire([oplock.pin_dir_key(pin_dir)])
            for line in repair.repair_stale(locks):
                print(line, file=sys.stderr)
            rec = intent.Intent("load", locks, dir=os.path.normpath(os.path.abspath(pin_dir)))
            rec.begin()
            try:
                rows, coll = _load_and_pin(args, spec, config, level, ifindex, pin_dir, crit, rec)
            finally:
                rec.done()  # pinned in full, or nothing (pin_collection removes a part)
    if args.json:
        doc = {"pin_dir": pin_dir, "objects": rows, "warnings": coll.warnings}
        print(json.dumps({**doc, "btf_changes": coll.btf_changes}))
        return OK
    print(f"loaded {args.file} into {pin_dir}")
    for r in rows:
        print(f"  {r['kind']:<4} {r['name']:<20} id {r['id']:<6} {r['type']:<14} {r['pin']}")
    return OK


def _load_and_pin(
    args: argparse.Namespace,
    spec: CollectionSpec,
    config: dict[str, str],
    level: int,
    ifindex: int,
    pin_dir: str,
    crit: Critical,
    rec: Intent,
) -> tuple[list[dict], Collection]:
    from bpfdsl.runtime import loader, pins

    try:
        coll = loader.load_collection(
            spec,
            config=config,
            log_level=level,
            pin_dir=args.pin_root,
            ifindex=ifindex,
            before_pin=rec.pinning_by_name,  # a repair after SIGKILL removes them
        )
    except loader.VerifierError as e:
        if args.log:
            print(e.log, file=sys.stderr)
        raise
    with coll:
        for w in coll.warnings:
            print(f"warning: {w}", file=sys.stderr)
        if args.verbose and coll.btf_changes:  # a kernel older than the object's BTF
            print(f"BTF rewritten for this kernel: {'; '.join(coll.btf_changes)}", file=sys.stderr)
        if args.log:
            for p in coll.programs.values():
                print(f"== verifier log of {p.name} ==\n{p.log}", file=sys.stderr)
        try:
            crit.check("stopped before pinning: nothing was pinned")
            res = pins.pin_collection(coll, pin_dir, source=os.path.abspath(args.file))
        except BaseException:
            for path in coll.pins:  # maps pinned by name for this load only
                if os.path.lexists(path):
                    os.unlink(path)
            raise
        return _rows(coll, res), coll


def _rows(coll: Collection, res: PinnedCollection) -> list[dict]:
    from bpfdsl.abi.map_types import MapType
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.kernel import syscall as S

    rows = []
    for name, p in coll.programs.items():
        info = S.prog_info(p.fd)
        rows.append(
            {
                "kind": "prog",
                "name": name,
                "id": info.id,
                "pin": res.programs[name],
                "type": ProgramType(info.type).name.lower(),
                "section": p.spec.section,
            }
        )
    for name, m in coll.maps.items():
        minfo = S.map_info(m.fd)
        try:
            t = MapType(minfo.type).name.lower()
        except ValueError:
            t = str(minfo.type)
        rows.append(
            {
                "kind": "map",
                "name": name,
                "id": minfo.id,
                "pin": res.maps[name],
                "type": t,
                "max_entries": minfo.max_entries,
            }
        )
    return rows


def cmd_unload(args: argparse.Namespace) -> int:
    from bpfdsl.runtime import intent, oplock, pins, repair

    detached: list[str] = []
    with oplock.OpLocks() as locks:
        with intent.Critical() as crit:  # a signal during the wait stops it (exit 128+N)
            locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
            locks.acquire([oplock.pin_dir_key(args.pin_dir)])
            for line in repair.repair_stale(locks):
                print(line, file=sys.stderr)
            rec = intent.Intent(
                "unload", locks, dir=os.path.normpath(os.path.abspath(args.pin_dir))
            )
            pins.check_unpinnable(args.pin_dir)  # refusals come before the record
            rec.begin()
            try:
                crit.check("stopped before removing anything")
            except BaseException:
                rec.done()
                raise
            removed = pins.unpin_dir(args.pin_dir, detached)
            pins.remove_root_if_empty()
            rec.done()
        late = crit.note("the unload was finished first")
    if late:
        print(late, file=sys.stderr)
    if args.json:
        print(json.dumps({"pin_dir": args.pin_dir, "removed": removed, "detached": detached}))
        return OK
    for d in detached:
        print(f"detached {d}")
    print(f"unloaded {args.pin_dir}: removed {len(removed)} pins and directories")
    return OK
