"""CLI: ``bpfdsl attach``, ``bpfdsl detach``, ``bpfdsl show``."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import uuid
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import NO_PERMISSION, OK, command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.cli import Subcommands
    from bpfdsl.diagnostics import DiagnosticError
    from bpfdsl.runtime.attach import XdpAttachment

PROG_HELP = "PROG := FILE.o | FILE.bpfd | PINNED_PROG | PIN_DIR (from `bpfdsl load --pin-dir`)"


def register(sub: Subcommands) -> None:
    a = sub.add_parser(
        "attach",
        help=command_help("attach"),
        usage="bpfdsl attach [xdp] PROG (--dev IFACE | IFACE) [options]",
        description="Attach an XDP program to an interface through a BPF link pinned in "
        "bpffs (netlink where links are unsupported).  An attached program is replaced "
        f"atomically.  Forms: `attach xdp PROG --dev IFACE`, `attach PROG IFACE`.  {PROG_HELP}.  "
        "An object file is loaded and pinned first (one process: load + pin + attach); "
        "`bpfdsl detach` removes those pins again.  A program calling the XDP metadata "
        "kfuncs (xdp(dev_bound)) is loaded for IFACE (device-bound: native mode, that "
        "interface only).  Only XDP attaches here: cpumap/devmap "
        "programs go in with `bpfdsl cpumap|devmap set`, sk_msg/sock_ops with "
        "`bpfdsl sockmap|sockops attach`.",
    )
    a.add_argument(
        "words",
        nargs="+",
        metavar="[xdp] PROG [IFACE]",
        help="the program (PROG above), after an optional `xdp`, then the interface",
    )
    a.add_argument(
        "--dev",
        metavar="IFACE",
        help="the interface (device-bound programs of an object file are loaded for it)",
    )
    a.add_argument(
        "--mode",
        default="native",
        choices=("native", "generic", "offload"),
        help="native (driver, default) or generic (skb); offload is refused",
    )
    a.add_argument("--prog", metavar="NAME", help="which program of the object / pin dir")
    a.add_argument(
        "--pin-dir",
        metavar="DIR",
        help="bpffs dir for programs, maps and the link (object files: default "
        "/sys/fs/bpf/bpfdsl/<object name>)",
    )
    a.add_argument(
        "--set",
        action="append",
        metavar="NAME=VALUE",
        help="load-time config value (.rodata) when PROG is an object file",
    )
    a.add_argument(
        "--fresh-maps",
        action="store_true",
        help="when an attach of an object file replaces an earlier one: new, empty maps "
        "(default: the old program's maps are reused if their definitions match, so "
        "counters and tables keep their state)",
    )
    a.add_argument(
        "--pin-root",
        metavar="DIR",
        help="where maps declared with `pinning: LIBBPF_PIN_BY_NAME` are pinned and found "
        "(PIN_ROOT/NAME; default /sys/fs/bpf, as libbpf)",
    )
    a.add_argument(
        "--no-replace",
        action="store_true",
        help="fail instead of replacing a program already on the interface",
    )
    a.add_argument(
        "--netlink", action="store_true", help="attach through netlink instead of a BPF link"
    )
    a.add_argument(
        "--force",
        action="store_true",
        help="replace an XDP program bpfdsl did not attach (ip, xdp-loader, a libxdp "
        "dispatcher); without it such a program is a refusal naming it",
    )
    a.set_defaults(func=cmd_attach)

    d = sub.add_parser(
        "detach",
        help=command_help("detach"),
        description="Detach the XDP program of IFACE (link or netlink) and remove the link's "
        "pins.  Programs and maps pinned by `bpfdsl attach FILE.o` are removed too; those "
        "of `bpfdsl load` stay (it says so) until `bpfdsl unload DIR`.",
    )
    d.add_argument("dev_pos", nargs="?", metavar="IFACE", help="the interface")
    d.add_argument("--dev", metavar="IFACE", help="the interface (same as IFACE)")
    d.add_argument(
        "--force",
        action="store_true",
        help="detach an XDP program bpfdsl did not attach (ip, xdp-loader, a libxdp "
        "dispatcher); without it such a program is a refusal naming it",
    )
    d.set_defaults(func=cmd_detach)

    s = sub.add_parser(
        "show",
        help=command_help("show"),
        description="XDP programs on the interfaces of this namespace, sock_ops programs on "
        "cgroups (v2), sk_msg programs on sockmaps/sockhashes, and the programs, maps and "
        "links pinned in bpffs by bpfdsl.",
    )
    s.add_argument("--all", action="store_true", help="every pin dir in /sys/fs/bpf")
    s.set_defaults(func=cmd_show)


def _dev(args: argparse.Namespace, positional: str | None) -> str:
    from bpfdsl.diagnostics import UsageError, error

    if args.dev and positional and args.dev != positional:
        raise UsageError(error("bad-args", f"two interfaces given: {positional} and {args.dev}"))
    dev = args.dev or positional
    if not dev:
        raise UsageError(error("bad-args", "no interface given", hint="add --dev IFACE"))
    return dev


def _looks_like_kind(word: str) -> bool:
    """``tc``, ``tcx``, ``cgroup``...: an attach kind word, not a path to a program."""
    import os

    return word.replace("_", "").isalnum() and not os.path.exists(word)


def cmd_attach(args: argparse.Namespace) -> int:
    from bpfdsl.cli import compiled
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.kernel import netlink
    from bpfdsl.runtime import attach, intent, inventory, oplock, repair

    words = list(args.words)
    if words[0] == "xdp" and len(words) > 1:
        words.pop(0)
    elif len(words) > 1 and _looks_like_kind(words[0]):
        raise UsageError(
            error(
                "bad-args",
                f"`bpfdsl attach {words[0]}` is not supported: bpfdsl attaches only XDP "
                "programs to interfaces (`bpfdsl attach xdp PROG --dev IFACE`)",
                hint="xdp(cpumap)/xdp(devmap) programs: `bpfdsl cpumap|devmap set`; "
                "sk_msg: `bpfdsl sockmap attach`; sock_ops: `bpfdsl sockops attach`",
            )
        )
    if len(words) > 2:
        raise UsageError(
            error(
                "bad-args",
                f"unexpected arguments: {' '.join(words[2:])}",
                hint="bpfdsl attach xdp PROG --dev IFACE",
            )
        )
    dev = _dev(args, words[1] if len(words) > 1 else None)
    attach.check_mode(args.mode)
    index = netlink.ifindex(dev)  # an unknown interface fails here, before anything is loaded
    data = compiled(words[0])  # compiled before the locks are taken: they are held briefly
    is_object = inventory.is_object_file(words[0])
    target = _target_dir(args, words[0], is_object)
    keys = [oplock.interface_key(dev, index)] + ([oplock.pin_dir_key(target)] if target else [])
    with oplock.OpLocks() as locks:
        with intent.Critical() as crit:  # a signal during the wait stops it (exit 128+N)
            locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
            locks.acquire(keys)  # waits (bounded, saying so) while another command changes them
            repaired = repair.repair_stale(locks)
            for line in repaired + (repair.orphan_staging(target) if target else []):
                print(line, file=sys.stderr)
            for _ in range(5):  # the pin dir of what runs now is locked too
                cur = attach.xdp_attachment(dev)
                owner = repair.owner_of(cur) if cur is not None else None
                over = None
                if owner is not None and oplock.target_of(owner.dir) != oplock.target_of(
                    target or owner.dir
                ):
                    over = owner.dir
                if over is None or locks.add([oplock.pin_dir_key(over)]):
                    break
            replacing = (
                target is not None and is_object and _check_target(target, dev, args.no_replace)
            )
            if cur is not None and args.no_replace:
                raise attach._occupied(dev, cur)
            if cur is not None and owner is None and not args.force:
                raise _foreign(dev, cur)
            staging = reuse = None
            if is_object and target is not None:
                staging = f"{target}_next_{uuid.uuid4().hex[:8]}"
                reuse = target if replacing and not args.fresh_maps else None
            rec = intent.Intent(
                "attach",
                locks,
                dev=dev,
                ifindex=index,
                target=target,
                staging=staging,
                over=over,
                old_prog_id=cur.prog_id if cur else 0,
            )
            rec.begin()
            try:
                crit.check("stopped before loading: nothing was changed")
                with inventory.open_program(
                    words[0],
                    prog=args.prog,
                    pin_dir=staging or args.pin_dir,
                    config_items=args.set,
                    data=data,
                    reuse_from=reuse,
                    pin_root=args.pin_root,
                    dev=dev,  # programs calling the XDP metadata kfuncs are loaded for this device
                    before_pin=rec.pinning_by_name,  # a repair after SIGKILL removes them
                ) as prog:
                    rec.step("pinned", new_prog_ids=[attach.prog_id_of(prog.fd)])
                    crit.check("stopped before attaching: the new pins were removed")
                    link_pin = attach.link_pin_path(prog.pin_dir, dev) if prog.pin_dir else None
                    res = attach.attach_xdp(
                        prog.fd,
                        dev,
                        mode=args.mode,
                        link_pin=link_pin,
                        replace=True,
                        method="netlink" if args.netlink else "auto",
                    )
                    rec.step("attached")  # the point of no return: from here on it finishes
                    if res.method == "link" and res.link_pin is None and link_pin:
                        res = attach.move_link_pin(res, link_pin)  # replaced: the link lives here
                        rec.step("link-moved")
                    # devmap entries filled before the attach: say now if their targets drop all
                    warnings = attach.devmap_warnings(prog.fd)
                    tx = attach.xdp_tx_warning(prog.fd, dev, res.mode)
                    if tx is not None:
                        warnings.append(tx)
            except BaseException:
                if rec.record["step"] in ("begin", "pinned"):
                    repair.remove_by_name_pins(rec.record)  # the maps it pinned by name
                    rec.done()  # rolled back: open_program removed the new pins
                raise
            notes = [repair.release_pin_dir(over)] if over else []
            if staging is not None and target is not None:
                res = _take_over(target, staging, res, dev)
                prog.pin_dir = target
                rec.step("renamed")
            _verify(dev, index, res)
            rec.done()
        late = crit.note("the attach was finished first")
    replaced = cur if cur is not None and cur.prog_id != res.prog_id else None
    for w in warnings:
        print(w.render(), file=sys.stderr)
    if late:
        print(late, file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    **res.to_dict(),
                    "loaded": prog.loaded_from,
                    "pin_dir": prog.pin_dir,
                    "reused_maps": prog.reused,
                    "replaced": {
                        "prog_id": replaced.prog_id,
                        "prog_name": replaced.prog_name,
                        "pin_dir": owner.dir if owner else None,
                    }
                    if replaced
                    else None,
                    "notes": [n for n in notes if n],
                    "warnings": [w.message for w in warnings],
                }
            )
        )
    else:
        if prog.loaded_from:
            print(
                f"loaded {prog.loaded_from}: programs and maps pinned under {prog.pin_dir} "
                "(`bpfdsl detach` removes them again)"
            )
        if prog.reused:
            print(f"kept the maps of the program it replaces: {', '.join(prog.reused)}")
        if replaced is not None and owner is None:
            print(
                f"replaced {replaced.prog_name or 'a program'} (id {replaced.prog_id}), "
                "which bpfdsl did not attach (--force)"
            )
        for n in notes:
            if n:
                print(n)
        via = f"link {res.link_id} pinned at {res.link_pin}" if res.method == "link" else "netlink"
        print(
            f"attached {res.prog_name or 'program'} (id {res.prog_id}) to {res.dev} "
            f"in {res.mode} mode via {via}"
        )
    return OK


def _target_dir(args: argparse.Namespace, ref: str, is_object: bool) -> str | None:
    """The pin dir this attach changes: where an object file is pinned (--pin-dir or the
    default), or where the link of a pinned program goes (--pin-dir or its dir)."""
    from bpfdsl.runtime import inventory

    if is_object:
        return os.path.normpath(args.pin_dir or inventory.default_pin_dir(ref))
    if args.pin_dir:
        return os.path.normpath(args.pin_dir)
    if os.path.isdir(ref):
        return os.path.normpath(ref)
    parent = os.path.dirname(os.path.normpath(ref))
    if os.path.basename(parent) == "progs":
        parent = os.path.dirname(parent)
    return parent or None


def _check_target(target: str, dev: str, no_replace: bool = False) -> bool:
    """True when ``target`` holds an earlier one-step attach this one replaces (the new
    object is pinned into a sibling staging dir, attached over the old program, and
    takes the old dir's place: :func:`_take_over`); False when it is absent or empty.
    Raises pin-dir-busy when it holds something else (a `bpfdsl load`, links of other
    interfaces, no manifest)."""
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime import attach, pins

    if not os.path.isdir(target) or not os.listdir(target):
        return False
    manifest = pins.read_manifest(target)
    own_link = os.path.basename(attach.link_pin_path(target, dev))
    links = [n for n in os.listdir(target) if n.startswith("link_")]
    made_by = manifest.get("made_by") if manifest is not None else None
    if made_by == "attach" and not set(links) - {own_link} and not no_replace:
        return True
    if manifest is None:
        hint = "pick an empty or new directory"
    elif made_by == "attach" and no_replace:
        hint = (
            "it holds an earlier `bpfdsl attach`: to replace that program atomically, "
            "leave out --no-replace, or attach with another --pin-dir"
        )
    elif made_by == "attach":
        hint = (
            f"it holds an earlier `bpfdsl attach` on other interfaces ({', '.join(links)}): "
            "attach with another --pin-dir, or `bpfdsl detach` them first"
        )
    else:
        hint = (
            f"it holds an earlier load: attach it with `bpfdsl attach {target} {dev}`, "
            f"or `bpfdsl unload {target}`"
        )
    raise UsageError(error("pin-dir-busy", f"{target} is not empty", hint=hint))


def _ours(cur: XdpAttachment, dev: str, link_pins: list[str]) -> bool:
    """True when attachment ``cur`` of ``dev`` is bpfdsl's: a bpfdsl pin dir holds its
    program or link, or its link is pinned under the name ``bpfdsl attach`` gives it."""
    from bpfdsl.runtime import attach, repair

    if repair.owner_of(cur) is not None:
        return True
    name = os.path.basename(attach.link_pin_path("/", dev))
    return any(os.path.basename(p) == name for p in link_pins)


def _foreign(dev: str, cur: XdpAttachment, detach: bool = False) -> DiagnosticError:
    from bpfdsl.diagnostics import DiagnosticError, error

    how = "a BPF link" if cur.method == "link" else "netlink"
    if detach:
        return DiagnosticError(
            error(
                "foreign-program",
                f"{dev} runs XDP program {cur.prog_name or '?'!r} (id {cur.prog_id}, "
                f"{cur.mode} mode, via {how}), which bpfdsl did not attach (no bpfdsl pin dir "
                "holds it: ip, xdp-loader or a libxdp dispatcher?); nothing was detached",
                hint="--force detaches it (the other tool's pins stay); or remove it with "
                "the tool that attached it",
            )
        )
    return DiagnosticError(
        error(
            "foreign-program",
            f"{dev} runs XDP program {cur.prog_name or '?'!r} (id {cur.prog_id}, {cur.mode} "
            f"mode, via {how}), which bpfdsl did not attach (no bpfdsl pin dir holds it: "
            "ip, xdp-loader or a libxdp dispatcher?)",
            hint="--force replaces it atomically (the other tool's pins stay); or remove it "
            "with the tool that attached it",
        )
    )


def _verify(dev: str, index: int, res: XdpAttachment) -> None:
    """Never report success with something else (or nothing) attached."""
    from bpfdsl.diagnostics import DiagnosticError, error
    from bpfdsl.kernel import netlink

    st = netlink.xdp_state(index)
    now = st.prog_id or st.drv_prog_id or st.skb_prog_id
    if now != res.prog_id:
        raise DiagnosticError(
            error(
                "attach-lost",
                f"{dev} runs program id {now or 'none'}, not {res.prog_id} just attached: "
                "another tool changed it meanwhile",
                hint="look with `bpfdsl show`",
            )
        )


def _take_over(target: str, staging: str, res: XdpAttachment, dev: str) -> XdpAttachment:
    """After a successful attach from ``staging``: remove the old pins of ``target`` (its
    link pin was moved to ``staging`` already, so nothing is detached) and rename
    ``staging`` to ``target``.  Returns ``res`` with the link pin's final path."""
    from bpfdsl.diagnostics import DiagnosticError, error
    from bpfdsl.runtime import attach, pins

    try:
        if os.path.isdir(target):
            pins.remove_tree(target)
        os.rename(staging, target)
    except OSError as e:
        raise DiagnosticError(
            error(
                "replace-incomplete",
                f"the new program is attached and pinned under {staging}, but the old pins "
                f"in {target} could not be replaced: {e}",
                hint="the next bpfdsl attach or detach on it finishes the move",
            )
        ) from None
    if res.link_pin is not None:
        res = dataclasses.replace(res, link_pin=attach.link_pin_path(target, dev))
    return res


def cmd_detach(args: argparse.Namespace) -> int:
    from bpfdsl.kernel import netlink
    from bpfdsl.runtime import attach, intent, oplock, pins, repair

    dev = _dev(args, args.dev_pos)
    index = netlink.ifindex(dev)
    removed: list[str] = []  # pin dirs `bpfdsl attach FILE.o` made for this program
    kept: list[str] = []  # pin dirs of `bpfdsl load`: the user unloads them
    with oplock.OpLocks() as locks:
        with intent.Critical() as crit:  # a signal during the wait stops it (exit 128+N)
            locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
            locks.acquire([oplock.interface_key(dev, index)])
            for line in repair.repair_stale(locks):
                print(line, file=sys.stderr)
            for _ in range(5):  # the pin dirs of what runs now are locked too
                cur = attach.xdp_attachment(dev)
                dirs: list[str] = []
                link_pins: list[str] = []
                if cur is not None:
                    if cur.link_id is not None:
                        link_pins = attach._pins_of_link(cur.link_id, (attach.BPFFS,))
                    dirs = pins.dirs_pinning_prog(cur.prog_id)
                keys = [
                    oplock.pin_dir_key(d) for d in dirs + [os.path.dirname(p) for p in link_pins]
                ]
                if locks.add(keys):
                    break
            res = None
            if cur is not None and not args.force and not _ours(cur, dev, link_pins):
                raise _foreign(dev, cur, detach=True)
            if cur is not None:
                for d in dirs:
                    if (pins.read_manifest(d) or {}).get("made_by") == "attach":
                        removed.append(d)
                    else:
                        kept.append(d)
                rec = intent.Intent(
                    "detach",
                    locks,
                    dev=dev,
                    ifindex=index,
                    prog_id=cur.prog_id,
                    link_id=cur.link_id,
                    link_pins=link_pins,
                    remove=removed,
                    keep=kept,
                )
                rec.begin()
                try:
                    crit.check("stopped before detaching: nothing was changed")
                except BaseException:
                    rec.done()
                    raise
                res = attach.detach_xdp(dev, pin_roots=(attach.BPFFS,), extra_pins=tuple(link_pins))
                rec.step("detached")  # the point of no return: from here on it finishes
                for d in removed:
                    if os.path.isdir(d):
                        pins.unpin_dir(d)
                pins.remove_root_if_empty()
                rec.done()
        late = crit.note("the detach was finished first")
    if late:
        print(late, file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "detached": res.to_dict() if res else None,
                    "dev": dev,
                    "removed_pin_dirs": removed,
                    "kept_pin_dirs": kept,
                }
            )
        )
        return OK
    if res is None:
        print(f"{dev}: no XDP program attached")
        return OK
    print(
        f"detached {res.prog_name or 'program'} (id {res.prog_id}) from {dev} "
        f"({res.mode} mode, via {res.method})"
    )
    for d in removed:
        print(f"removed {d} (pinned by `bpfdsl attach` when it loaded the object)")
    for d in kept:
        print(f"still pinned: {d} (programs and maps; `bpfdsl unload {d}` removes them)")
    return OK


def cmd_show(args: argparse.Namespace) -> int:
    if os.geteuid() != 0:  # bpffs is 0700 and program info by id needs CAP_SYS_ADMIN:
        print(  # without them the lists would be silently empty
            "error: bpfdsl show needs root (CAP_BPF + CAP_SYS_ADMIN: it reads /sys/fs/bpf "
            "and asks the kernel about programs by id); run: sudo bpfdsl show",
            file=sys.stderr,
        )
        return NO_PERMISSION
    from bpfdsl.runtime import inventory

    inv = inventory.collect(all_dirs=args.all)
    if args.json:
        print(json.dumps(inv, indent=2))
        return OK
    print("XDP attachments (this network namespace):")
    if not inv["attachments"]:
        print("  none")
    for a in inv["attachments"]:
        via = f"link {a['link_id']}" if a["method"] == "link" else "netlink"
        pin = f", pinned at {a['link_pin']}" if a.get("link_pin") else ""
        print(
            f"  {a['dev']}: {a['prog_name'] or '?'} (prog id {a['prog_id']}) "
            f"{a['mode']} mode via {via}{pin}"
        )
        if (rc := a.get("run_config")) is not None:
            chain = ", ".join(rc["chain_call"]) or "none"
            print(f"    run config: priority {rc['priority']}, chain_call {chain}")
        for w in a.get("warnings", []):
            print(f"    warning: {w}")
    so = inv["sock_ops"]
    where = f"cgroup v2 at {so['root']}" if so["root"] else "no cgroup v2 mounted"
    print(f"sock_ops attachments ({where}):")
    if not so["attachments"]:
        print("  none")
    for a in so["attachments"]:
        via = f"link {a['link_id']}" if a["via"] == "link" else "BPF_PROG_ATTACH"
        multi = ", multi" if a["multi"] else ""
        print(f"  {a['cgroup']}: {a['prog_name'] or '?'} (prog id {a['prog_id']}) via {via}{multi}")
    print("sk_msg attachments (to sockmaps/sockhashes):")
    if not inv["sk_msg"]:
        print("  none")
    for a in inv["sk_msg"]:
        via = f"link {a['link_id']}" if a["via"] == "link" else "BPF_PROG_ATTACH"
        pin = f", pinned at {a['map_pin']}" if a["map_pin"] else ""
        socks = f", {a['sockets']} socket(s)" if a["sockets"] is not None else ""
        print(
            f"  {a['map_type']} {a['map_name']} (map id {a['map_id']}{pin}{socks}): "
            f"{a['prog_name'] or '?'} (prog id {a['prog_id']}) via {via}"
        )
    print("pinned by bpfdsl:")
    if not inv["pins"]:
        print("  none")
    for d in inv["pins"]:
        print(f"  {d['dir']}" + ("  (not attached)" if d.get("attached") is False else ""))
        for o in d["objects"]:
            extra = f" {o['detail']}" if o.get("detail") else ""
            print(f"    {o['kind']:<4} {o['name']:<24} id {o['id']}{extra}")
    if inv.get("interrupted"):
        print("interrupted operations (the next command that changes the system repairs them):")
        for r in inv["interrupted"]:
            where = r.get("dev") or r.get("dir") or r.get("pin_dir") or ""
            print(f"  {r['op']} {where} by pid {r['pid']}, stopped after step {r['step']}")
    return OK
