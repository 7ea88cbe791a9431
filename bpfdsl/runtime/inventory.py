"""Kernel side: find programs to attach and list what bpfdsl pinned and attached.

:func:`open_program` turns a CLI ``PROG`` (object file, ``.bpfd``, pinned program or pin
dir) into an open program fd plus the pin dir its link belongs in.  :func:`collect` walks
bpffs pin dirs and the interfaces of this namespace for ``bpfdsl show``; it returns
plain dicts (JSON-ready).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import IntEnum

from bpfdsl.abi.btf.run_config import RunConfig, read_run_config
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, LinkType, ProgramType
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import netlink, syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.config import parse_config
from bpfdsl.obj.spec import CollectionSpec, choose_program
from bpfdsl.runtime import attach, cgroup, intent, loader, pins, sockmap
from bpfdsl.runtime.objfiles import object_bytes

MANIFEST_NAMES = ("bpfdsl.json", "manifest", "bpfdsl_manifest")  # files the loader may write


@dataclass(slots=True)
class OpenProgram:
    """A program ready to attach: ``fd`` (owned by the context), kernel ``name``, and
    ``pin_dir`` (where its link gets pinned; None when nothing is pinned)."""

    fd: int
    name: str
    pin_dir: str | None
    loaded_from: str | None = None  # the object file loaded and pinned by this call
    reused: list[str] = field(default_factory=list)  # maps kept from the replaced program


def _type_name(enum: type[IntEnum], value: int) -> str:
    try:
        return enum(value).name.lower()
    except ValueError:
        return str(value)


def pinned_programs(directory: str) -> dict[str, str]:
    """Pin name -> path of the programs pinned in ``directory`` or ``directory/progs``."""
    out: dict[str, str] = {}
    for d in (directory, os.path.join(directory, "progs")):
        try:
            names = sorted(os.listdir(d))
        except PermissionError:
            raise syscall.NoPermission(f"listing {d}") from None
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and _kind_at(p) == "prog":
                out.setdefault(n, p)
    return out


def _kind_at(path: str) -> str:
    """fd_kind of the object pinned at ``path`` ("" when none); raises NoPermission."""
    try:
        with syscall.obj_get(path) as fd:
            return syscall.fd_kind(int(fd))
    except PermissionError:
        if attach.is_bpffs(path):  # elsewhere EACCES only says "no pin"
            raise syscall.NoPermission(f"opening {path}") from None
        return ""
    except (syscall.BpfError, OSError):
        return ""


def _owner_dir(prog_path: str) -> str:
    parent = os.path.dirname(prog_path)
    return os.path.dirname(parent) if os.path.basename(parent) == "progs" else parent


@contextmanager
def open_program(
    ref: str,
    *,
    prog: str | None = None,
    pin_dir: str | None = None,
    config_items: list[str] | None = None,
    data: bytes | None = None,
    reuse_from: str | None = None,
    pin_root: str | None = None,
    dev: str | None = None,
    before_pin: Callable[[str, int], None] | None = None,
) -> Iterator[OpenProgram]:
    """Open the program ``ref`` names (see module docstring); closes its fd on exit.

    An object file is loaded (``bpfdsl.runtime.loader``) and pinned under ``pin_dir`` (default
    /sys/fs/bpf/bpfdsl/<object name>); if the body raises, those pins are removed again.
    ``reuse_from``: a pin dir whose ``maps/`` hold the maps of the program being replaced;
    the object's maps of those names are reused (their state stays) if their definitions
    match, else LoadError ``map-incompatible``.  ``pin_root``: PIN_ROOT of maps pinned by
    name (default /sys/fs/bpf).  ``dev``: the interface the object's device-bound programs
    (those calling the XDP metadata kfuncs) are loaded for (prog_ifindex; a pinned program
    is bound already, or not).
    ``data``: the object's ELF bytes when the caller has them already (``.bpfd`` source is
    compiled by the caller, e.g. :func:`bpfdsl.cli.object_bytes`), else the file ``ref``
    is read.  ``before_pin``: as ``loader.load_collection``'s (maps pinned by name).
    Raises UsageError for a missing file, no/ambiguous program, or a pin that is no program.
    """
    if os.path.isdir(ref):
        progs = pinned_programs(ref)
        path = _choose_pinned(ref, progs, prog)
        with _open_pinned(path) as fd:
            yield OpenProgram(int(fd), _prog_name(fd), pin_dir or ref)
        return
    if os.path.isfile(ref) and _kind_at(ref) == "prog":
        with _open_pinned(ref) as fd:
            yield OpenProgram(int(fd), _prog_name(fd), pin_dir or _owner_dir(ref))
        return
    alias = os.path.join(os.path.dirname(ref), "progs", os.path.basename(ref))
    if not os.path.exists(ref) and os.path.isfile(alias) and _kind_at(alias) == "prog":
        with _open_pinned(alias) as fd:  # DIR/NAME for DIR/progs/NAME of `bpfdsl load`
            yield OpenProgram(int(fd), _prog_name(fd), pin_dir or _owner_dir(alias))
        return
    if not os.path.isfile(ref):
        raise UsageError(error("no-such-file", f"{ref}: no such object, pinned program or pin dir"))
    ifindex = netlink.ifindex(dev) if dev else 0
    yield from _load_and_open(
        ref, prog, pin_dir, config_items, data, reuse_from, pin_root, ifindex, before_pin
    )


def _load_and_open(
    ref: str,
    prog: str | None,
    pin_dir: str | None,
    config_items: list[str] | None,
    data: bytes | None,
    reuse_from: str | None = None,
    pin_root: str | None = None,
    ifindex: int = 0,
    before_pin: Callable[[str, int], None] | None = None,
) -> Iterator[OpenProgram]:
    spec = read_object(object_bytes(ref) if data is None else data, name=ref)
    config = parse_config(config_items, spec.configs) if config_items else {}
    if prog is None:
        xdp = [
            p.name
            for p in spec.programs.values()
            if p.program_type == ProgramType.XDP and p.attach_type == AttachType.XDP
        ]
        if len(xdp) == 1:
            prog = xdp[0]
    name, kind = choose_program(spec, prog)
    if kind.program_type != ProgramType.XDP or kind.attach_type != AttachType.XDP:
        raise DiagnosticError(
            error(
                "attach-failed",
                f"program {name!r} (section {spec.programs[name].section}) is "
                "not a plain XDP program and cannot be attached to an interface",
                hint="xdp(cpumap)/xdp(devmap) programs go into cpumap/devmap entries",
            )
        )
    pin_dir = pin_dir or default_pin_dir(ref)
    attach.ensure_bpffs()
    if pin_dir.startswith(attach.DEFAULT_PIN_ROOT + "/"):
        os.makedirs(attach.DEFAULT_PIN_ROOT, exist_ok=True)
    reuse = reusable_maps(spec, reuse_from) if reuse_from else None
    with loader.load_collection(
        spec,
        config=config,
        reuse_maps=reuse,
        pin_dir=pin_root,
        ifindex=ifindex,
        before_pin=before_pin,
    ) as coll:
        pins.pin_collection(coll, pin_dir, source=os.path.abspath(ref), made_by="attach")
        try:
            kept = sorted(n for n, m in coll.maps.items() if m.reused and reuse and n in reuse)
            yield OpenProgram(int(coll.programs[name].fd), name, pin_dir, ref, kept)
        except BaseException:
            pins.unpin_dir(pin_dir)  # a failed attach leaves nothing pinned
            raise


def reusable_maps(spec: CollectionSpec, pin_dir: str) -> dict[str, str]:
    """Map name -> pin path of the maps pinned in ``pin_dir/maps`` (by ``bpfdsl attach`` or
    ``bpfdsl load``) that ``spec`` declares too: what a program update reuses.  Data
    sections (.rodata configs, .bss) are not reused: a new object brings its own."""
    out = {}
    for name in spec.maps:
        path = os.path.join(pin_dir, "maps", pins.pin_name(name))
        if os.path.exists(path):
            out[name] = path
    return out


def default_pin_dir(ref: str) -> str:
    """Where ``bpfdsl attach xdp FILE.o`` pins what it loads without ``--pin-dir``:
    /sys/fs/bpf/bpfdsl/<object name, characters other than [A-Za-z0-9_] as _>."""
    stem = "".join(c if c in _STEM_CHARS else "_" for c in os.path.basename(ref).rsplit(".", 1)[0])
    return os.path.join(attach.DEFAULT_PIN_ROOT, stem)


def is_object_file(ref: str) -> bool:
    """True when ``ref`` names an object or source file (what :func:`open_program` loads),
    not a pin dir or a pinned program."""
    return os.path.isfile(ref) and _kind_at(ref) != "prog"


_STEM_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def _choose_pinned(directory: str, progs: dict[str, str], prog: str | None) -> str:
    if not progs:
        raise UsageError(
            error(
                "unknown-program",
                f"no program pinned in {directory}",
                hint="load one with `bpfdsl load FILE.o --pin-dir DIR`",
            )
        )
    if prog is not None:
        if prog in progs:
            return progs[prog]
        raise UsageError(
            error(
                "unknown-program",
                f"no program {prog!r} pinned in {directory}",
                hint=f"programs there: {', '.join(progs)}",
            )
        )
    if len(progs) == 1:
        return next(iter(progs.values()))
    raise UsageError(
        error(
            "unknown-program",
            f"{len(progs)} programs pinned in {directory}",
            hint=f"pick one with --prog: {', '.join(progs)}",
        )
    )


def _open_pinned(path: str) -> syscall.Fd:
    try:
        fd = syscall.obj_get(path)
    except syscall.BpfError as e:
        if isinstance(e, PermissionError):
            raise
        raise UsageError(
            error("no-such-file", f"{path}: cannot open pin: {os.strerror(e.errno)}")
        ) from None
    if syscall.fd_kind(int(fd)) != "prog":
        fd.close()
        raise UsageError(error("unknown-program", f"{path} is pinned but is not a program"))
    return fd


def _prog_name(fd: int | syscall.Fd) -> str:
    return syscall.prog_info(fd).name.decode(errors="replace")


# ---- bpfdsl show ---------------------------------------------------------------------


def _describe(path: str) -> dict | None:
    try:
        fd = syscall.obj_get(path)
    except PermissionError:
        raise syscall.NoPermission(f"reading {path}") from None
    except (syscall.BpfError, OSError):
        return None
    try:
        with fd:
            kind = syscall.fd_kind(int(fd))
            if kind == "prog":
                i = syscall.prog_info(fd)
                return {
                    "kind": "prog",
                    "id": int(i.id),
                    "name": os.path.basename(path),
                    "detail": _type_name(ProgramType, int(i.type)),
                    "path": path,
                }
            if kind == "map":
                mi = syscall.map_info(fd)
                return {
                    "kind": "map",
                    "id": int(mi.id),
                    "name": os.path.basename(path),
                    "detail": _type_name(MapType, int(mi.type)),
                    "path": path,
                }
            if kind == "link":
                li = syscall.link_info(fd)
                detail = _type_name(LinkType, int(li.type))
                if li.type == LinkType.XDP:
                    detail += f" ifindex {li.xdp_ifindex}" if li.xdp_ifindex else " (detached)"
                return {
                    "kind": "link",
                    "id": int(li.id),
                    "name": os.path.basename(path),
                    "detail": f"{detail} prog {int(li.prog_id)}",
                    "path": path,
                    "prog_id": int(li.prog_id),
                }
    except (syscall.BpfError, OSError):
        return None
    return None


def _is_ours(directory: str) -> bool:
    if directory.startswith(attach.DEFAULT_PIN_ROOT + "/"):
        return True
    return any(
        os.path.lexists(os.path.join(d, m))
        for m in MANIFEST_NAMES
        for d in (directory, os.path.dirname(directory))
    )


def pin_dirs(
    *, all_dirs: bool = False, root: str = attach.BPFFS, max_dirs: int = 10_000
) -> list[str]:
    """Pin dirs to list: bpfdsl's (under /sys/fs/bpf/bpfdsl or with a manifest), or all."""
    out: list[str] = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        if len(out) >= max_dirs:
            break
        if (files or dirs) and (all_dirs or _is_ours(dirpath)):
            out.append(dirpath)
    return out


def _prog_name_by_id(prog_id: int) -> str:
    try:
        with syscall.get_fd_by_id("prog", prog_id) as fd:
            return _prog_name(fd)
    except (syscall.BpfError, OSError):
        return ""


def _links(limit: int = 100_000) -> dict[tuple[str, int, int], int]:
    """Cgroup and sockmap links: (kind, target id, prog id) -> link id, where the target
    is the cgroup id (its directory's inode) or the map id (bpf_link_info.cgroup/.sockmap)."""
    out: dict[tuple[str, int, int], int] = {}
    link_id = 0
    for _ in range(limit):
        try:
            next_id = syscall.get_next_id("link", link_id)
        except syscall.BpfError:
            break
        if next_id is None:
            break
        link_id = next_id
        try:
            with syscall.get_fd_by_id("link", link_id) as fd:
                i = syscall.link_info(fd)
        except (syscall.BpfError, OSError):
            continue
        if i.type == LinkType.CGROUP:
            out["cgroup", int(i.u[0]) | int(i.u[1]) << 32, int(i.prog_id)] = link_id
        elif i.type == LinkType.SOCKMAP:
            out["sockmap", int(i.u[0]), int(i.prog_id)] = link_id
    return out


def sock_ops_attachments(links: dict, *, max_dirs: int = 10_000) -> dict:
    """sock_ops programs attached to the cgroup v2 hierarchy, per cgroup (as ``bpftool
    cgroup tree`` lists them): ``{"root": mount, "attachments": [{cgroup, prog_id,
    prog_name, via, link_id, multi}]}``; root None when no cgroup v2 is mounted."""
    try:
        root = cgroup.cgroup2_mount(mount_if_missing=False)
    except DiagnosticError:
        return {"root": None, "attachments": []}
    out = []
    seen = 0
    for dirpath, dirs, _files in os.walk(root):
        dirs.sort()
        seen += 1
        if seen > max_dirs:
            break
        try:
            fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            ids, flags = syscall.prog_query(fd, AttachType.CGROUP_SOCK_OPS)
            cg_id = os.fstat(fd).st_ino  # the cgroup id (kernfs node id) on 64-bit
        except (syscall.BpfError, OSError):
            continue
        finally:
            os.close(fd)
        for prog_id in ids:
            link_id = links.get(("cgroup", cg_id, prog_id))
            out.append(
                {
                    "cgroup": dirpath,
                    "prog_id": prog_id,
                    "prog_name": _prog_name_by_id(prog_id),
                    "via": "link" if link_id else "prog_attach",
                    "link_id": link_id,
                    "multi": bool(flags & 2),  # BPF_F_ALLOW_MULTI
                }
            )
    return {"root": root, "attachments": out}


def sk_msg_attachments(links: dict, *, limit: int = 100_000) -> list:
    """sk_msg programs attached to sockmaps/sockhashes (BPF_SK_MSG_VERDICT; an sk_msg
    program is attached to a map, not to a socket): ``[{map_id, map_name, map_type,
    map_pin, sockets, prog_id, prog_name, via, link_id}]``, walking every map by id."""
    out = []
    map_id = 0
    for _ in range(limit):
        try:
            next_id = syscall.get_next_id("map", map_id)
        except syscall.BpfError:
            break
        if next_id is None:
            break
        map_id = next_id
        try:
            fd = syscall.get_fd_by_id("map", map_id)
        except (syscall.BpfError, OSError):
            continue
        with fd:
            try:
                info = syscall.map_info(fd)
                if info.type not in (MapType.SOCKMAP, MapType.SOCKHASH):
                    continue
                ids, _flags = syscall.prog_query(fd, AttachType.SK_MSG_VERDICT)
            except (syscall.BpfError, OSError):
                continue
            if not ids:
                continue
            name = info.name.decode(errors="replace")
            try:
                count = sockmap.sockmap_count(int(fd), map_name=name, limit=100_000)
            except (DiagnosticError, syscall.BpfError):
                count = None
        for prog_id in ids:
            link_id = links.get(("sockmap", map_id, prog_id))
            out.append(
                {
                    "map_id": map_id,
                    "map_name": name,
                    "map_type": _type_name(MapType, int(info.type)),
                    "map_pin": None,  # filled by collect()
                    "sockets": count,
                    "prog_id": prog_id,
                    "prog_name": _prog_name_by_id(prog_id),
                    "via": "link" if link_id else "prog_attach",
                    "link_id": link_id,
                }
            )
    return out


def run_config_of(prog_id: int, names: list[str]) -> RunConfig | None:
    """The libxdp run config (priority, chain-call actions) XDP program ``prog_id``
    declares, read from the BTF loaded with it as ``xdp-loader status`` reads it; the
    variable is looked up under each of ``names`` (the function name: a pin's name
    holds it whole, the kernel keeps 15 characters).  None: it declares none (libxdp
    then runs it at priority 50, chain-calling on XDP_PASS), or has no BTF."""
    try:
        with syscall.get_fd_by_id("prog", prog_id) as fd:
            btf = syscall.kernel_btf(int(syscall.prog_info(fd).btf_id))
    except syscall.BpfError:
        return None
    if btf is None:
        return None
    for name in dict.fromkeys(n for n in names if n):
        rc = read_run_config(btf, name)
        if rc is not None:
            return rc
    return None


def _run_config_dict(rc: RunConfig | None) -> dict | None:
    return {"priority": rc.priority, "chain_call": list(rc.chain_call)} if rc else None


def collect(*, all_dirs: bool = False) -> dict:
    """``{"attachments": [...], "sock_ops": {...}, "sk_msg": [...], "pins": [{"dir",
    "objects": [...]}, ...]}`` (JSON-ready): XDP on this namespace's interfaces, sock_ops
    on cgroups (:func:`sock_ops_attachments`), sk_msg on socket maps
    (:func:`sk_msg_attachments`), and what bpfdsl pinned (a ``progs`` dir of a bpfdsl
    pin dir says ``attached``: whether one of its programs runs on an interface here)."""
    pin_list: list[dict] = []
    link_pins: dict[int, str] = {}
    for d in pin_dirs(all_dirs=all_dirs):
        objs = []
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if os.path.isfile(p) and (o := _describe(p)) is not None:
                objs.append(o)
                if o["kind"] == "link":
                    link_pins.setdefault(o["id"], p)
        if objs:
            pin_list.append({"dir": d, "objects": objs})
    atts = []
    for dev, st in netlink.xdp_states().items():
        if st.mode is None:
            continue
        cur = attach.xdp_attachment(dev)
        if cur is None:
            continue
        att = cur.to_dict()
        tx = attach.attached_xdp_tx_warning(cur)  # XDP_TX frames the kernel drops
        att["warnings"] = [tx.message] if tx is not None else []
        if cur.link_id is not None:
            att["link_pin"] = link_pins.get(cur.link_id)
        atts.append(att)
    pinned_as: dict[int, list[str]] = {}  # prog id -> its pins' names (function names)
    for entry in pin_list:
        for obj in entry["objects"]:
            if obj["kind"] == "prog":
                pinned_as.setdefault(obj["id"], []).append(obj["name"])
    for a in atts:
        names = [*pinned_as.get(a["prog_id"], []), a["prog_name"]]
        a["run_config"] = _run_config_dict(run_config_of(a["prog_id"], names))
    on: dict[int, list[str]] = {}
    for a in atts:
        on.setdefault(a["prog_id"], []).append(a["dev"])
    for entry in pin_list:
        for obj in entry["objects"]:
            if obj["kind"] == "prog":  # XDP on this namespace's interfaces
                obj["attached_on"] = on.get(obj["id"], [])
    for entry in pin_list:  # DIR/progs of a bpfdsl pin dir: is any program of it attached?
        owner = os.path.dirname(entry["dir"])
        if os.path.basename(entry["dir"]) == "progs" and pins.read_manifest(owner) is not None:
            in_owner = [x for other in pin_list if other["dir"] == owner for x in other["objects"]]
            live = any(x["kind"] == "link" and x.get("prog_id") for x in in_owner)
            entry["attached"] = live or any(x.get("attached_on") for x in entry["objects"])
    links = _links()
    sk_msg = sk_msg_attachments(links)
    pinned = _map_pins({a["map_id"] for a in sk_msg})
    for a in sk_msg:
        a["map_pin"] = pinned.get(a["map_id"])
    return {
        "attachments": atts,
        "sock_ops": sock_ops_attachments(links),
        "sk_msg": sk_msg,
        "pins": pin_list,
        "interrupted": interrupted_operations(),
    }


def interrupted_operations() -> list[dict]:
    """Intent records (:mod:`bpfdsl.runtime.intent`) whose command is gone (killed or
    crashed): what the next attach/detach/load/unload repairs.  Each: ``op``, ``pid``,
    ``step`` reached, ``dev`` and ``target``/``dir`` where the record has them."""
    out = []
    for _path, rec in intent.read_intents():
        try:
            os.kill(int(rec.get("pid", 0)), 0)
            continue  # still running
        except ProcessLookupError:
            pass
        except (OSError, ValueError):
            continue
        keep = ("op", "pid", "step", "dev", "target", "staging", "dir", "pin_dir")
        out.append({k: rec[k] for k in keep if rec.get(k) is not None})
    return out


def _map_pins(ids: set[int]) -> dict[int, str]:
    """Map id -> a bpffs path pinning it, for the maps ``ids`` (any pin dir, not only
    bpfdsl's; the walk stops once all are found)."""
    found: dict[int, str] = {}
    if not ids:
        return found
    for d in pin_dirs(all_dirs=True):
        for n in sorted(os.listdir(d)):
            p = os.path.join(d, n)
            if os.path.isfile(p) and (o := _describe(p)) is not None and o["id"] in ids:
                if o["kind"] == "map":
                    found.setdefault(o["id"], p)
        if len(found) == len(ids):
            break
    return found
