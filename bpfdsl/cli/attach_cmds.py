"""CLI: ``bpfdsl attach``, ``bpfdsl detach``, ``bpfdsl show``."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

OK, FAILED, NO_PERMISSION = 0, 1, 3  # bpfdsl.cli's exit codes
PROG_HELP = "PROG := FILE.o | FILE.bpfd | PINNED_PROG | PIN_DIR (from `bpfdsl load --pin-dir`)"


def register(sub) -> None:
    a = sub.add_parser(
        "attach",
        help="attach an XDP program to an interface",
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
    a.set_defaults(func=cmd_attach)

    d = sub.add_parser(
        "detach",
        help="detach XDP from an interface",
        description="Detach the XDP program of IFACE (link or netlink) and remove the link's "
        "pins.  Programs and maps pinned by `bpfdsl attach FILE.o` are removed too; those "
        "of `bpfdsl load` stay (it says so) until `bpfdsl unload DIR`.",
    )
    d.add_argument("dev_pos", nargs="?", metavar="IFACE", help="the interface")
    d.add_argument("--dev", metavar="IFACE", help="the interface (same as IFACE)")
    d.set_defaults(func=cmd_detach)

    s = sub.add_parser(
        "show",
        help="list what bpfdsl has loaded, pinned and attached",
        description="XDP programs on the interfaces of this namespace, sock_ops programs on "
        "cgroups (v2), sk_msg programs on sockmaps/sockhashes, and the programs, maps and "
        "links pinned in bpffs by bpfdsl.",
    )
    s.add_argument("--all", action="store_true", help="every pin dir in /sys/fs/bpf")
    s.set_defaults(func=cmd_show)


def _dev(args, positional) -> str:
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


def cmd_attach(args) -> int:
    from bpfdsl.cli import compiled
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.kernel import netlink
    from bpfdsl.runtime import attach, inventory

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
    netlink.ifindex(dev)  # an unknown interface fails here, before anything is loaded or pinned
    target, staging = _replacing(args, words[0], dev)
    with inventory.open_program(
        words[0],
        prog=args.prog,
        pin_dir=staging or args.pin_dir,
        config_items=args.set,
        data=compiled(words[0]),
        reuse_from=target if staging is not None and not args.fresh_maps else None,
        pin_root=args.pin_root,
        dev=dev,  # programs calling the XDP metadata kfuncs are loaded for this device
    ) as prog:
        link_pin = attach.link_pin_path(prog.pin_dir, dev) if prog.pin_dir else None
        res = attach.attach_xdp(
            prog.fd,
            dev,
            mode=args.mode,
            link_pin=link_pin,
            replace=not args.no_replace,
            method="netlink" if args.netlink else "auto",
        )
        if res.method == "link" and res.link_pin is None and link_pin:
            res = attach.move_link_pin(res, link_pin)  # replaced: the link now lives here
        # devmap entries filled before the attach: say now if their targets drop all
        warnings = attach.devmap_warnings(prog.fd)
        tx = attach.xdp_tx_warning(prog.fd, dev, res.mode)
        if tx is not None:
            warnings.append(tx)
    if target is not None and staging is not None:
        res = _take_over(target, staging, res, dev)
        prog.pin_dir = target
    for w in warnings:
        print(w.render(), file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    **res.to_dict(),
                    "loaded": prog.loaded_from,
                    "pin_dir": prog.pin_dir,
                    "reused_maps": prog.reused,
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
        via = f"link {res.link_id} pinned at {res.link_pin}" if res.method == "link" else "netlink"
        print(
            f"attached {res.prog_name or 'program'} (id {res.prog_id}) to {res.dev} "
            f"in {res.mode} mode via {via}"
        )
    return OK


def _replacing(args, ref: str, dev: str) -> tuple[str | None, str | None]:
    """(pin dir, staging dir) when this one-step attach of an object file replaces what an
    earlier one-step attach pinned in the same dir: the new object is loaded into a sibling
    staging dir, attached over the old program (link update: atomic), and then takes the
    old dir's place (:func:`_take_over`).  (None, None) otherwise: a plain attach, or a
    pin-dir-busy error from the loader when the dir holds something else (a `bpfdsl load`,
    links of other interfaces, --no-replace)."""
    from bpfdsl.runtime import attach, inventory, pins

    if args.no_replace or not inventory.is_object_file(ref):
        return None, None
    target = os.path.normpath(args.pin_dir or inventory.default_pin_dir(ref))
    if not os.path.isdir(target) or not os.listdir(target):
        return None, None
    manifest = pins.read_manifest(target)
    own_link = os.path.basename(attach.link_pin_path(target, dev))
    links = [n for n in os.listdir(target) if n.startswith("link_")]
    if manifest is None or manifest.get("made_by") != "attach" or set(links) - {own_link}:
        return None, None
    import uuid

    return target, f"{target}_next_{uuid.uuid4().hex[:8]}"


def _take_over(target: str, staging: str, res, dev: str):
    """After a successful attach from ``staging``: remove the old pins of ``target`` (its
    link pin was moved to ``staging`` already, so nothing is detached) and rename
    ``staging`` to ``target``.  Returns ``res`` with the link pin's final path."""
    from bpfdsl.diagnostics import DiagnosticError, error
    from bpfdsl.runtime import attach, pins

    try:
        pins.unpin_dir(target)
        os.rename(staging, target)
    except (OSError, DiagnosticError) as e:
        raise DiagnosticError(
            error(
                "replace-incomplete",
                f"the new program is attached and pinned under {staging}, but the old pins "
                f"in {target} could not be replaced: {e}",
                hint=f"bpfdsl unload {target}, then use {staging} as the pin dir",
            )
        ) from None
    if res.link_pin is not None:
        res = dataclasses.replace(res, link_pin=attach.link_pin_path(target, dev))
    return res


def cmd_detach(args) -> int:
    from bpfdsl.runtime import attach, pins

    dev = _dev(args, args.dev_pos)
    res = attach.detach_xdp(dev, pin_roots=(attach.BPFFS,))
    removed: list[str] = []  # pin dirs `bpfdsl attach FILE.o` made for this program
    kept: list[str] = []  # pin dirs of `bpfdsl load`: the user unloads them
    if res is not None:
        for d in pins.dirs_pinning_prog(res.prog_id):
            if (pins.read_manifest(d) or {}).get("made_by") == "attach":
                pins.unpin_dir(d)
                removed.append(d)
            else:
                kept.append(d)
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


def cmd_show(args) -> int:
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
        print(f"  {d['dir']}")
        for o in d["objects"]:
            extra = f" {o['detail']}" if o.get("detail") else ""
            print(f"    {o['kind']:<4} {o['name']:<24} id {o['id']}{extra}")
    return OK
