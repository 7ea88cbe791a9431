"""Bring the system to a topology file's state, report drift from it, take it down.

Everything a topology makes lives under its ``pin_dir`` (PIN_DIR, bpffs):

- ``PIN_DIR/OBJECT/`` per object, the layout of :func:`bpfdsl.runtime.pins.pin_collection`
  (``progs/``, ``maps/``, manifest ``made_by: topology``), with the XDP link of each
  interface running one of its programs at ``OBJECT/link_xdp_DEV``
  (:func:`bpfdsl.runtime.attach.link_pin_path`);
- ``PIN_DIR/by_name/``: the pin root of maps declared ``pinning: LIBBPF_PIN_BY_NAME``
  (shared by the topology's objects);
- ``PIN_DIR/bpfdsl_manifest`` (``made_by: topology``) and ``PIN_DIR/bpfdsl_topology_N``:
  the record of the last apply (JSON in symlinks: bpffs holds no regular files): object
  digests, what was attached where and which map slots were set, the programs' tags.

:func:`plan` compares the file with the kernel's state and lists the changes; :func:`apply`
makes them: every object that is new or changed is compiled (before anything else),
loaded (the kernel verifier) and pinned into a staging dir ``PIN_DIR/OBJECT_next_XXXXXXXX``
first, so a broken program changes nothing; then map contents, cpumap/devmap/prog_array
slots, sk_msg and sock_ops attachments and the XDP programs are changed, each with its
undo, and a failure undoes them in reverse; last the staging dirs replace the old ones.
An edited object keeps the maps of the one it replaces where the definitions match
(libbpf's bpf_map__reuse_fd), except the maps that hold programs or interfaces (cpumap,
devmap, prog_array, sockmap/sockhash, map-in-map): those are made anew and filled again,
so no slot keeps a program of the old object.  XDP is replaced atomically (BPF_LINK_UPDATE
with BPF_F_REPLACE, :func:`bpfdsl.runtime.attach.attach_xdp`).  Commands hold the locks of
:mod:`bpfdsl.runtime.oplock` (the pin dirs and the interfaces) throughout.
"""

from __future__ import annotations

import json
import os
import struct
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import (
    attach,
    cgroup,
    cpumap,
    devmap,
    intent,
    oplock,
    pins,
    progarray,
    repair,
    sockmap,
)
from bpfdsl.runtime.loader import Collection, load_collection
from bpfdsl.runtime.mapview import MapCodec
from bpfdsl.runtime.topology import Built, EntryDecl, HookDecl, Ref, Topology, XdpDecl

Undo = Callable[[], None]
Step = Callable[["Run"], "Undo | None"]

STATE = "bpfdsl_topology_"  # + chunk number: the record of the last apply
BY_NAME = "by_name"
_CHUNK = 3000  # characters of JSON per symlink (a symlink target is at most PATH_MAX 4096)
# maps that hold programs, sockets or interfaces: made anew when their object changes
WIRING = frozenset(
    {
        MapType.PROG_ARRAY,
        MapType.CPUMAP,
        MapType.DEVMAP,
        MapType.DEVMAP_HASH,
        MapType.SOCKMAP,
        MapType.SOCKHASH,
        MapType.ARRAY_OF_MAPS,
        MapType.HASH_OF_MAPS,
        MapType.XSKMAP,
    }
)


@dataclass(slots=True)
class Change:
    """One change of a plan: ``op`` (``+`` add, ``~`` change, ``-`` remove), ``kind``
    (object, xdp, cpumap, devmap, prog_array, sk_msg, sock_ops, map), ``what`` and the
    ``detail`` (why, from what to what)."""

    op: str
    kind: str
    what: str
    detail: str = ""
    do: Step | None = field(default=None, repr=False)

    def text(self) -> str:
        return f"{self.op} {self.kind} {self.what}" + (f": {self.detail}" if self.detail else "")

    def to_dict(self) -> dict:
        return {"op": self.op, "kind": self.kind, "what": self.what, "detail": self.detail}


@dataclass(slots=True)
class Live:
    """What the pin dir holds now: the last apply's record (None: never applied),
    the object dirs with their digests."""

    pin_dir: str
    record: dict | None
    digests: dict[str, str]


@dataclass(slots=True)
class Run:
    """An apply in progress: the staged collections and dirs, fds opened on the way."""

    top: Topology
    built: dict[str, Built]
    live: Live
    staged: dict[str, Collection] = field(default_factory=dict)
    staging: dict[str, str] = field(default_factory=dict)
    by_name_made: list[str] = field(default_factory=list)
    fds: list[S.Fd] = field(default_factory=list)
    xdp_done: dict[str, attach.XdpAttachment] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def close(self) -> None:
        for fd in self.fds:
            fd.close()
        for c in self.staged.values():
            c.close()

    def obj_dir(self, obj: str) -> str:
        """Where ``obj``'s pins are now (its staging dir during an apply)."""
        return self.staging.get(obj) or os.path.join(self.top.pin_dir, obj)

    def prog_fd(self, ref: Ref) -> int:
        if ref.obj in self.staged:
            return int(self.staged[ref.obj].programs[ref.name].fd)
        fd = S.obj_get(os.path.join(self.obj_dir(ref.obj), "progs", pins.pin_name(ref.name)))
        self.fds.append(fd)
        return int(fd)

    def map_fd(self, ref: Ref) -> int:
        if ref.obj in self.staged:
            return int(self.staged[ref.obj].maps[ref.name].fd)
        fd = S.obj_get(os.path.join(self.obj_dir(ref.obj), "maps", pins.pin_name(ref.name)))
        self.fds.append(fd)
        return int(fd)


# ---- reading what is there


def read_record(pin_dir: str) -> dict | None:
    """The record of the last apply into ``pin_dir`` (None: none, or not a topology's)."""
    m = pins.read_manifest(pin_dir)
    if m is None or m.get("made_by") != "topology":
        return None
    parts = []
    for i in range(10_000):
        try:
            parts.append(os.readlink(os.path.join(pin_dir, f"{STATE}{i}")))
        except OSError:
            break
    try:
        rec = json.loads("".join(parts))
    except ValueError:
        return None
    return rec if isinstance(rec, dict) else None


def _write_record(pin_dir: str, rec: dict) -> None:
    text = json.dumps(rec, separators=(",", ":"), sort_keys=True)
    chunks = [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)] or [""]
    for i in range(10_000):  # the old record first
        path = os.path.join(pin_dir, f"{STATE}{i}")
        if not os.path.lexists(path):
            break
        os.unlink(path)
    for i, c in enumerate(chunks):
        os.symlink(c, os.path.join(pin_dir, f"{STATE}{i}"))


def _ensure_root(top: Topology) -> None:
    """Make PIN_DIR (and its manifest) unless it is there; refuse a dir that is not a
    topology's."""
    d = top.pin_dir
    attach.ensure_bpffs()
    if os.path.isdir(d) and os.listdir(d):
        if (pins.read_manifest(d) or {}).get("made_by") != "topology":
            raise UsageError(
                error(
                    "pin-dir-busy",
                    f"{d} is not empty and not a topology's pin dir",
                    hint="give the topology another pin_dir",
                )
            )
        return
    os.makedirs(d, exist_ok=True)
    manifest = {"bpfdsl": 1, "object": top.path, "programs": [], "maps": [], "made_by": "topology"}
    os.symlink(
        "bpfdsl:" + json.dumps(manifest, separators=(",", ":"))[:3900],
        os.path.join(d, pins.MANIFEST),
    )


def read_live(top: Topology) -> Live:
    rec = read_record(top.pin_dir) if os.path.isdir(top.pin_dir) else None
    digests = {}
    for name, o in ((rec or {}).get("objects") or {}).items():
        if os.path.isdir(os.path.join(top.pin_dir, name)):
            digests[name] = str(o.get("digest", ""))
    return Live(top.pin_dir, rec, digests)


def _pinned_prog_id(top: Topology, ref: Ref) -> int:
    path = os.path.join(top.pin_dir, ref.obj, "progs", pins.pin_name(ref.name))
    try:
        with S.obj_get(path) as fd:
            return int(S.prog_info(fd).id)
    except (S.BpfError, OSError):
        return 0


def _prog_tag(prog_id: int) -> str:
    try:
        with S.get_fd_by_id("prog", prog_id) as fd:
            return bytes(S.prog_info(fd).tag).hex()
    except (S.BpfError, OSError):
        return ""


def _pinned_map(top: Topology, ref: Ref) -> S.Fd | None:
    path = os.path.join(top.pin_dir, ref.obj, "maps", pins.pin_name(ref.name))
    try:
        return S.obj_get(path)
    except (S.BpfError, OSError):
        return None


def _owned(top: Topology, cur: attach.XdpAttachment) -> bool:
    """True when XDP attachment ``cur`` is this topology's (its link pinned under PIN_DIR)."""
    if cur.link_id is None:
        return False
    return bool(attach._pins_of_link(cur.link_id, (top.pin_dir,)))


# ---- the plan


def _reusable(built: Built, old_dir: str) -> tuple[dict[str, str], list[str], list[str]]:
    """(map name -> pin path to reuse, names kept, names made anew with why) for an
    edited object replacing the pins in ``old_dir``."""
    reuse: dict[str, str] = {}
    kept: list[str] = []
    fresh: list[str] = []
    for name, m in built.spec.maps.items():
        path = os.path.join(old_dir, "maps", pins.pin_name(name))
        if m.map_type in WIRING or not os.path.exists(path):
            continue
        try:
            with S.obj_get(path) as fd:
                info = S.map_info(fd)
        except (S.BpfError, OSError):
            continue
        want = (int(m.map_type), m.key_size, m.value_size, m.max_entries, m.map_flags)
        got = (info.type, info.key_size, info.value_size, info.max_entries, info.map_flags)
        if want == got:
            reuse[name] = path
            kept.append(name)
        else:
            fresh.append(f"{name} (definition changed: its entries are dropped)")
    return reuse, kept, fresh


def plan(top: Topology, built: dict[str, Built], live: Live) -> list[Change]:
    """The changes that bring the system to ``top`` (empty: it is there), in the order
    :func:`apply` makes them.  Reads the kernel's state; changes nothing."""
    out: list[Change] = []
    rec = live.record or {}
    changed = set()  # objects loaded anew by this apply
    for name, b in built.items():
        old = live.digests.get(name)
        if old is None:
            out.append(Change("+", "object", name, f"load {b.decl.path}", _do_stage(name)))
            changed.add(name)
        elif old != b.digest:
            _r, kept, fresh = _reusable(b, os.path.join(top.pin_dir, name))
            what = "the file or its configs changed"
            if kept:
                what += f"; maps kept: {', '.join(sorted(kept))}"
            if fresh:
                what += f"; new maps: {', '.join(fresh)}"
            out.append(Change("~", "object", name, what, _do_stage(name)))
            changed.add(name)
    for c in top.contents:
        b = built[c.map.obj]
        codec = MapCodec.for_spec(b.spec, c.map.name, S.possible_cpus())
        rows = [(codec.encode_key(k), codec.all_cpus(codec.encode_value(v))) for k, v in c.entries]
        fd = None if c.map.obj in changed else _pinned_map(top, c.map)
        todo = rows
        if fd is not None:
            with fd:
                vsize = len(rows[0][1]) if rows else 0
                todo = [(k, v) for k, v in rows if S.map_lookup(fd, k, vsize) != v]
        if c.map.obj in changed and c.map.obj in live.digests:
            # reused maps keep their entries: only those that differ are written
            b_old = os.path.join(top.pin_dir, c.map.obj)
            reuse, _k, _f = _reusable(b, b_old)
            if c.map.name in reuse:
                with S.obj_get(reuse[c.map.name]) as rfd:
                    vsize = len(rows[0][1]) if rows else 0
                    todo = [(k, v) for k, v in rows if S.map_lookup(rfd, k, vsize) != v]
        if todo:
            out.append(
                Change(
                    "+" if c.map.obj not in live.digests else "~",
                    "map",
                    str(c.map),
                    f"write {len(todo)} of {len(rows)} entries ({c.source})",
                    _do_contents(c.map, todo),
                )
            )
    want_entries = {(e.map, e.key): e for e in top.entries}
    for e in top.entries:
        why = _entry_drift(top, e, changed, live.digests)
        if why:
            out.append(
                Change(
                    "+" if why == "absent" else "~",
                    e.kind,
                    _entry_what(e),
                    _entry_desc(e) + ("" if why == "absent" else f" ({why})"),
                    _do_entry(e),
                )
            )
    for r in rec.get("entries") or []:
        ref = Ref(*str(r["map"]).split(":"))
        if (ref, int(r["key"])) in want_entries or ref.obj not in built or ref.obj in changed:
            continue  # a map of an object made anew, or dropped, starts empty
        out.append(
            Change(
                "-",
                r["kind"],
                f"{ref} key {r['key']}",
                "no longer in the file",
                _do_entry_delete(r["kind"], ref, int(r["key"])),
            )
        )
    want_hooks = {(h.kind, str(h.program), h.target) for h in top.hooks}
    for h in top.hooks:
        why = _hook_drift(top, h, changed)
        if why:
            out.append(
                Change(
                    "+" if why == "absent" else "~",
                    h.kind,
                    f"{h.program} on {h.target}",
                    why if why != "absent" else "",
                    _do_hook(h),
                )
            )
    for r in rec.get("hooks") or []:
        if (r["kind"], r["program"], r["target"]) in want_hooks:
            continue
        out.append(
            Change(
                "-",
                r["kind"],
                f"{r['program']} on {r['target']}",
                "no longer in the file",
                _do_hook_remove(r),
            )
        )
    want_devs = {x.dev for x in top.xdp}
    for x in top.xdp:
        ch = _xdp_change(top, x, changed)
        if ch is not None:
            out.append(ch)
    for r in rec.get("xdp") or []:
        if r["dev"] in want_devs:
            continue
        out.append(
            Change(
                "-",
                "xdp",
                f"{r['program']} on {r['dev']}",
                "no longer in the file",
                _do_xdp_detach(r["dev"]),
            )
        )
    for name in rec.get("objects") or {}:
        if name not in built:
            out.append(Change("-", "object", name, "no longer in the file", _do_unstage(name)))
    return out


def _entry_what(e: EntryDecl) -> str:
    k = {"cpumap": "cpu", "devmap": "key", "prog_array": "slot"}[e.kind]
    return f"{e.map} {k} {e.key}"


def _entry_desc(e: EntryDecl) -> str:
    parts = []
    if e.kind == "cpumap":
        parts.append(f"qsize {e.qsize}")
    if e.kind == "devmap":
        parts.append(f"to {e.interface}")
    if e.program is not None:
        parts.append(f"program {e.program}")
    return ", ".join(parts)


def _entry_drift(top: Topology, e: EntryDecl, changed: set[str], live: dict[str, str]) -> str:
    """ "" when the slot is as declared; else "absent" or what differs."""
    if e.map.obj in changed:
        # its map is made anew with the object: absent, or set again when it replaces one
        return "absent" if e.map.obj not in live else "set again in the new object's map"
    if e.program is not None and e.program.obj in changed:
        return "its program is loaded anew"
    fd = _pinned_map(top, e.map)
    if fd is None:
        return "absent"
    with fd:
        info = S.map_info(fd)
        raw = S.map_lookup(fd, struct.pack("<I", e.key), info.value_size)
    if raw is None:
        return "absent"
    want_prog = _pinned_prog_id(top, e.program) if e.program is not None else 0
    if e.kind == "prog_array":
        have = struct.unpack("<I", raw[:4])[0]
        return "" if have == want_prog else f"slot runs prog id {have}, not {want_prog}"
    first, prog_id = struct.unpack("<II", raw.ljust(8, b"\0")[:8])
    if e.kind == "cpumap" and first != e.qsize:
        return f"qsize {first}, not {e.qsize}"
    if e.kind == "devmap":
        try:
            idx = devmap.resolve_interface(e.interface)
        except DiagnosticError:
            idx = -1
        if first != idx:
            return f"sends to ifindex {first}, not {e.interface}"
    if prog_id != want_prog:
        return f"entry program id {prog_id or 'none'}, not {want_prog or 'none'}"
    return ""


def _hook_drift(top: Topology, h: HookDecl, changed: set[str]) -> str:
    if h.program.obj in changed or (h.map is not None and h.map.obj in changed):
        return "absent" if not _hook_recorded(top, h) else "its program is loaded anew"
    want = _pinned_prog_id(top, h.program)
    try:
        ids = _hook_ids(top, h)
    except (DiagnosticError, OSError):
        return "absent"
    return "" if want and want in ids else "absent"


def _hook_recorded(top: Topology, h: HookDecl) -> bool:
    rec = read_record(top.pin_dir) or {}
    return any(
        (r["kind"], r["program"], r["target"]) == (h.kind, str(h.program), h.target)
        for r in rec.get("hooks") or []
    )


def _hook_ids(top: Topology, h: HookDecl) -> list[int]:
    if h.kind == "sk_msg":
        assert h.map is not None
        fd = _pinned_map(top, h.map)
        if fd is None:
            return []
        with fd:
            return S.prog_query(fd, AttachType.SK_MSG_VERDICT)[0]
    cg = os.open(h.target, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return S.prog_query(cg, AttachType.CGROUP_SOCK_OPS)[0]
    finally:
        os.close(cg)


def _xdp_change(top: Topology, x: XdpDecl, changed: set[str]) -> Change | None:
    cur = attach.xdp_attachment(x.dev)  # an unknown interface: HostError here, before anything
    what = f"{x.program} on {x.dev}"
    if cur is not None and not _owned(top, cur):
        raise DiagnosticError(
            error(
                "foreign-program",
                f"{x.dev} runs XDP program {cur.prog_name or '?'!r} (id {cur.prog_id}), which "
                f"this topology ({top.pin_dir}) did not attach; nothing was changed",
                hint=f"remove it with the tool that attached it (`bpfdsl detach {x.dev}` for "
                "bpfdsl's), or leave the interface out of the file",
            )
        )
    if cur is None:
        return Change("+", "xdp", what, f"{x.mode} mode", _do_xdp(x, None))
    if cur.mode != x.mode:
        detail = (
            f"{cur.mode} -> {x.mode} mode (detached, then attached: no atomic swap across modes)"
        )
        return Change("~", "xdp", what, detail, _do_xdp(x, cur))
    if x.program.obj in changed:
        return Change(
            "~",
            "xdp",
            what,
            f"replace prog id {cur.prog_id} atomically (link update)",
            _do_xdp(x, cur),
        )
    want = _pinned_prog_id(top, x.program)
    if cur.prog_id != want:
        return Change(
            "~",
            "xdp",
            what,
            f"runs prog id {cur.prog_id}, not {want}: replace atomically",
            _do_xdp(x, cur),
        )
    return None


# ---- the steps of an apply: each returns its undo (None: nothing to undo)


def _do_stage(name: str) -> Step:
    def do(run: Run) -> Undo | None:
        b = run.built[name]
        final = os.path.join(run.top.pin_dir, name)
        staging = f"{final}_next_{uuid.uuid4().hex[:8]}"
        reuse = _reusable(b, final)[0] if os.path.isdir(final) else {}
        by_name = os.path.join(run.top.pin_dir, BY_NAME)
        os.makedirs(by_name, exist_ok=True)
        coll = load_collection(
            b.spec,
            config=b.config,
            pin_dir=by_name,
            reuse_maps=reuse,
            before_pin=lambda path, _id: run.by_name_made.append(path),
        )
        run.staged[name] = coll
        pins.pin_collection(coll, staging, source=b.decl.path, made_by="topology")
        run.staging[name] = staging
        return None  # the staging dirs are removed by the rollback itself

    return do


def _do_unstage(name: str) -> Step:
    def do(run: Run) -> Undo | None:
        return None  # removed at the commit (after every detach)

    return do


def _do_contents(ref: Ref, rows: list[tuple[bytes, bytes]]) -> Step:
    def do(run: Run) -> Undo | None:
        fd = run.map_fd(ref)
        vsize = len(rows[0][1])
        old = [(k, S.map_lookup(fd, k, vsize)) for k, _v in rows]
        for k, v in rows:
            S.map_update(fd, k, v)

        def undo() -> None:
            for k, v in old:
                if v is None:
                    S.map_delete(fd, k)
                else:
                    S.map_update(fd, k, v)

        return undo

    return do


def _restore_slot(kind: str, fd: int, key: int, raw: bytes | None) -> None:
    """Put back slot ``key`` of a cpumap/devmap/prog_array as ``raw`` (its lookup: the
    kernel reports the program's id, written back through an fd of that id)."""
    if raw is None:
        S.map_delete(fd, struct.pack("<I", key))
        return
    if kind == "prog_array":
        with S.get_fd_by_id("prog", struct.unpack("<I", raw[:4])[0]) as p:
            S.map_update(fd, struct.pack("<I", key), struct.pack("<I", int(p)))
        return
    first, prog_id = struct.unpack("<II", raw.ljust(8, b"\0")[:8])
    if not prog_id:
        S.map_update(fd, struct.pack("<I", key), raw)
        return
    with S.get_fd_by_id("prog", prog_id) as p:
        S.map_update(fd, struct.pack("<I", key), struct.pack("<Ii", first, int(p))[: len(raw)])


def _do_entry(e: EntryDecl) -> Step:
    def do(run: Run) -> Undo | None:
        fd = run.map_fd(e.map)
        info = S.map_info(fd)
        old = S.map_lookup(fd, struct.pack("<I", e.key), info.value_size)
        pfd = run.prog_fd(e.program) if e.program is not None else None
        pname = str(e.program) if e.program is not None else ""
        if e.kind == "cpumap":
            cpumap.cpumap_set(fd, e.key, e.qsize, pfd, map_name=str(e.map), prog_name=pname)
        elif e.kind == "devmap":
            devmap.devmap_set(fd, e.key, e.interface, pfd, map_name=str(e.map), prog_name=pname)
        else:
            assert pfd is not None
            progarray.prog_array_set(fd, e.key, pfd, map_name=str(e.map), prog_name=pname)
        return lambda: _restore_slot(e.kind, fd, e.key, old)

    return do


def _do_entry_delete(kind: str, ref: Ref, key: int) -> Step:
    def do(run: Run) -> Undo | None:
        fd = run.map_fd(ref)
        info = S.map_info(fd)
        old = S.map_lookup(fd, struct.pack("<I", key), info.value_size)
        S.map_delete(fd, struct.pack("<I", key))
        return lambda: _restore_slot(kind, fd, key, old)

    return do


def _do_hook(h: HookDecl) -> Step:
    def do(run: Run) -> Undo | None:
        pfd = run.prog_fd(h.program)
        old_fd = None
        if h.program.obj in run.staging:  # the program of the dir being replaced
            path = os.path.join(
                run.top.pin_dir, h.program.obj, "progs", pins.pin_name(h.program.name)
            )
            if os.path.exists(path):
                old_fd = S.obj_get(path)
                run.fds.append(old_fd)
        if h.kind == "sk_msg":
            assert h.map is not None
            mfd = run.map_fd(h.map)
            sockmap.sk_msg_attach(mfd, pfd, map_name=str(h.map), prog_name=str(h.program))

            def undo_sk_msg() -> None:
                sockmap.sk_msg_detach(mfd, pfd, map_name=str(h.map))

            return undo_sk_msg
        cgroup.sock_ops_attach(h.target, pfd, prog_name=str(h.program))
        if old_fd is not None:  # the old program runs next to the new one until here
            cgroup.sock_ops_detach(h.target, int(old_fd))

        def undo() -> None:
            if old_fd is not None:
                cgroup.sock_ops_attach(h.target, int(old_fd))
            cgroup.sock_ops_detach(h.target, pfd)

        return undo

    return do


def _recorded_prog_fd(run: Run, program: str) -> int | None:
    ref = Ref(*program.split(":"))
    path = os.path.join(run.top.pin_dir, ref.obj, "progs", pins.pin_name(ref.name))
    try:
        fd = S.obj_get(path)
    except (S.BpfError, OSError):
        return None
    run.fds.append(fd)
    return int(fd)


def _do_hook_remove(r: dict) -> Step:
    def do(run: Run) -> Undo | None:
        pfd = _recorded_prog_fd(run, r["program"])
        if pfd is None:
            return None
        if r["kind"] == "sock_ops":
            if cgroup.sock_ops_detach(r["target"], pfd):
                return lambda: cgroup.sock_ops_attach(r["target"], pfd)
            return None
        ref = Ref(*str(r["target"]).split(":"))
        fd = _pinned_map(run.top, ref)
        if fd is None:
            return None
        run.fds.append(fd)
        if sockmap.sk_msg_detach(fd, pfd):
            return lambda: sockmap.sk_msg_attach(fd, pfd)
        return None

    return do


def _do_xdp(x: XdpDecl, cur: attach.XdpAttachment | None) -> Step:
    def do(run: Run) -> Undo | None:
        pfd = run.prog_fd(x.program)
        link_pin = attach.link_pin_path(run.obj_dir(x.program.obj), x.dev)
        if cur is not None and cur.mode != x.mode:
            with S.get_fd_by_id("prog", cur.prog_id) as old:
                old_fd = S.Fd(os.dup(int(old)))
            run.fds.append(old_fd)
            attach.detach_xdp(x.dev, pin_roots=(run.top.pin_dir,))
            res = attach.attach_xdp(pfd, x.dev, mode=x.mode, link_pin=link_pin)
            run.xdp_done[x.dev] = res

            def undo_mode() -> None:
                attach.detach_xdp(x.dev, pin_roots=(run.top.pin_dir,))
                old_pin = attach.link_pin_path(os.path.join(run.top.pin_dir, x.program.obj), x.dev)
                attach.attach_xdp(old_fd, x.dev, mode=cur.mode, link_pin=old_pin)

            return undo_mode
        if cur is None:
            res = attach.attach_xdp(pfd, x.dev, mode=x.mode, link_pin=link_pin)
            run.xdp_done[x.dev] = res

            def undo_new() -> None:
                attach.detach_xdp(x.dev, pin_roots=(run.top.pin_dir,))

            return undo_new
        with S.get_fd_by_id("prog", cur.prog_id) as old:
            old_fd = S.Fd(os.dup(int(old)))
        run.fds.append(old_fd)
        res = attach.attach_xdp(pfd, x.dev, mode=x.mode, replace=True)
        run.xdp_done[x.dev] = res

        def undo() -> None:
            attach.attach_xdp(old_fd, x.dev, mode=x.mode, replace=True)

        return undo

    return do


def _do_xdp_detach(dev: str) -> Step:
    def do(run: Run) -> Undo | None:
        try:
            cur = attach.xdp_attachment(dev)
        except DiagnosticError:
            return None  # the interface is gone, and its program with it
        if cur is None or not _owned(run.top, cur):
            return None
        attach.detach_xdp(dev, pin_roots=(run.top.pin_dir,))
        return None  # after the last undoable step (see apply)

    return do


# ---- apply, down, status


@dataclass(slots=True)
class Result:
    changes: list[Change]
    applied: bool
    notes: list[str] = field(default_factory=list)


def _locks_for(top: Topology, live: Live) -> list[oplock.LockKey]:
    keys = [oplock.pin_dir_key(top.pin_dir)]
    names = set(top.objects) | set((live.record or {}).get("objects") or {})
    keys += [oplock.pin_dir_key(os.path.join(top.pin_dir, n)) for n in names]
    devs = {x.dev for x in top.xdp} | {r["dev"] for r in (live.record or {}).get("xdp") or []}
    for d in sorted(devs):
        try:
            keys.append(oplock.interface_key(d))
        except DiagnosticError:
            continue  # gone: nothing to lock (an xdp entry naming it fails in the plan)
    return keys


def apply(top: Topology, built: dict[str, Built], *, dry_run: bool = False) -> Result:
    """Bring the system to ``top`` (``built``: :func:`bpfdsl.runtime.topology.build`,
    everything compiled before this is called).  ``dry_run``: only the plan.
    Returns the changes made (or planned).  On a failure every change made is undone and
    the staging dirs are removed: the old state keeps running; the error is raised with a
    note saying so."""
    live = read_live(top)
    with oplock.OpLocks() as locks, intent.Critical() as crit:
        locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
        locks.acquire(_locks_for(top, live))
        notes = list(repair.repair_stale(locks))
        for name in top.objects:
            notes += repair.orphan_staging(os.path.join(top.pin_dir, name))
        live = read_live(top)  # under the locks
        changes = plan(top, built, live)
        if dry_run or not changes:
            return Result(changes, False, notes)
        _ensure_root(top)
        run = Run(top, built, live)
        undo: list[Callable[[], None]] = []
        try:
            for ch in changes:
                if ch.kind == "xdp" and ch.op == "-":
                    continue  # detaches are not undone: they come after the last failure point
                if ch.kind == "object" and ch.op == "-":
                    continue
                crit.check("stopped before a change: what was changed was undone")
                assert ch.do is not None
                u = ch.do(run)
                if u is not None:
                    undo.append(u)
            _verify_xdp(run)
        except BaseException as e:
            failed = _rollback(run, undo)
            run.close()
            if isinstance(e, DiagnosticError):
                e.diagnostics[0].notes.append(
                    "nothing was changed: the running state is the one before this apply"
                    if not failed
                    else "rolled back with errors: " + "; ".join(failed)
                )
            raise
        for ch in changes:  # the point of no return
            if ch.op == "-" and ch.kind == "xdp":
                assert ch.do is not None
                ch.do(run)
        notes += _commit(run, changes)
        run.close()
    late = crit.note("the apply was finished first")
    if late:
        notes.append(late)
    return Result(changes, True, notes)


def _verify_xdp(run: Run) -> None:
    for dev, res in run.xdp_done.items():
        cur = attach.xdp_attachment(dev)
        if cur is None or cur.prog_id != res.prog_id:
            raise DiagnosticError(
                error("attach-lost", f"{dev}: another tool changed the XDP program meanwhile")
            )


def _rollback(run: Run, undo: list[Callable[[], None]]) -> list[str]:
    failed = []
    for u in reversed(undo):
        try:
            u()
        except (DiagnosticError, OSError) as e:
            failed.append(str(e))
    for d in run.staging.values():
        try:
            pins.remove_tree(d)
        except OSError as e:
            failed.append(f"removing {d}: {e}")
    for path in run.by_name_made:
        try:
            os.unlink(path)
        except OSError:
            pass
    return failed


def _commit(run: Run, changes: list[Change]) -> list[str]:
    top = run.top
    notes: list[str] = []
    for x in top.xdp:  # each XDP link pinned in its program's object dir (staging or final)
        res = run.xdp_done.get(x.dev) or attach.xdp_attachment(x.dev)
        if res is not None and res.link_id is not None:
            attach.move_link_pin(res, attach.link_pin_path(run.obj_dir(x.program.obj), x.dev))
    for name, staging in run.staging.items():
        final = os.path.join(top.pin_dir, name)
        if os.path.isdir(final):
            pins.remove_tree(final)
        os.rename(staging, final)
    run.staging.clear()
    for ch in changes:
        if ch.kind == "object" and ch.op == "-":
            d = os.path.join(top.pin_dir, ch.what)
            if os.path.isdir(d):
                pins.unpin_dir(d)
    rec = {
        "file": top.path,
        "objects": {n: {"digest": b.digest, "path": b.decl.path} for n, b in run.built.items()},
        "xdp": [{"dev": x.dev, "mode": x.mode, "program": str(x.program)} for x in top.xdp],
        "entries": [{"kind": e.kind, "map": str(e.map), "key": e.key} for e in top.entries],
        "hooks": [
            {"kind": h.kind, "program": str(h.program), "target": h.target} for h in top.hooks
        ],
        "tags": {
            f"{n}:{p}": _prog_tag(_pinned_prog_id(top, Ref(n, p)))
            for n, b in run.built.items()
            for p in b.spec.programs
        },
    }
    _write_record(top.pin_dir, rec)
    return notes


def down(top: Topology) -> list[str]:
    """Remove everything ``top`` made: its XDP links detached, its sock_ops and sk_msg
    programs detached, every pin under its pin dir removed.  Returns what was done, one
    line each ([] when nothing was there)."""
    live = read_live(top)
    if not os.path.isdir(top.pin_dir):
        return []
    if (
        pins.read_manifest(top.pin_dir) is None
        or (pins.read_manifest(top.pin_dir) or {}).get("made_by") != "topology"
    ):
        raise UsageError(
            error("not-ours", f"{top.pin_dir} is not a topology's pin dir: nothing was removed")
        )
    done: list[str] = []
    with oplock.OpLocks() as locks, intent.Critical():
        locks.acquire(_locks_for(top, live))
        rec = read_record(top.pin_dir) or {}
        for r in rec.get("hooks") or []:
            ref = Ref(*str(r["program"]).split(":"))
            path = os.path.join(top.pin_dir, ref.obj, "progs", pins.pin_name(ref.name))
            try:
                pfd = S.obj_get(path)
            except (S.BpfError, OSError):
                continue
            with pfd:
                if r["kind"] == "sock_ops":
                    if cgroup.sock_ops_detach(r["target"], int(pfd)):
                        done.append(f"detached sock_ops {r['program']} from {r['target']}")
                else:
                    fd = _pinned_map(top, Ref(*str(r["target"]).split(":")))
                    if fd is not None:
                        with fd:
                            if sockmap.sk_msg_detach(fd, int(pfd)):
                                done.append(f"detached sk_msg {r['program']} from {r['target']}")
        for name in sorted(os.listdir(top.pin_dir)):
            d = os.path.join(top.pin_dir, name)
            if os.path.isdir(d) and pins.read_manifest(d) is not None:
                detached: list[str] = []
                pins.unpin_dir(d, detached)
                done += [f"detached {w}" for w in detached]
                done.append(f"removed {d}")
        pins.remove_tree(top.pin_dir)
        done.append(f"removed {top.pin_dir}")
    return done


@dataclass(slots=True)
class Drift:
    """One difference between the file and the system: ``state`` missing / changed /
    extra / not-applied, ``kind``, ``what``, ``detail``."""

    state: str
    kind: str
    what: str
    detail: str = ""

    def text(self) -> str:
        return f"{self.state}: {self.kind} {self.what}" + (
            f" ({self.detail})" if self.detail else ""
        )

    def to_dict(self) -> dict:
        return {"state": self.state, "kind": self.kind, "what": self.what, "detail": self.detail}


def status(top: Topology, built: dict[str, Built]) -> list[Drift]:
    """How the system differs from ``top`` ([]: as declared): what an apply would change,
    as drift (missing, changed, extra, not applied), and pinned programs whose kernel tag
    is not the one recorded at the apply."""
    live = read_live(top)
    out: list[Drift] = []
    try:
        changes = plan(top, built, live)
    except DiagnosticError as e:  # a foreign program on an interface: drift too
        return [Drift("changed", "xdp", "", e.diagnostics[0].message)]
    for ch in changes:
        if ch.kind == "object":
            state = "missing" if ch.op == "+" else "not-applied" if ch.op == "~" else "extra"
        else:
            state = {"+": "missing", "~": "changed", "-": "extra"}[ch.op]
        out.append(Drift(state, ch.kind, ch.what, ch.detail))
    tags = (live.record or {}).get("tags") or {}
    for ref_text, tag in sorted(tags.items()):
        ref = Ref(*ref_text.split(":"))
        if ref.obj not in live.digests:
            continue
        have = _prog_tag(_pinned_prog_id(top, ref))
        if have != tag:
            out.append(
                Drift("changed", "program", ref_text, f"tag {have or 'none'}, applied {tag}")
            )
    return out


def print_notes(notes: list[str]) -> None:
    for n in notes:
        print(n, file=sys.stderr)


def describe_json(changes: list[Change]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in changes]
