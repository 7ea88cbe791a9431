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
  digests, what was attached where and which map slots were set, the programs' tags
  (:func:`bpfdsl.runtime.topology_journal.read_record`).

:func:`plan` compares the file with the kernel's state and lists the changes; :func:`apply`
makes them: every object that is new or changed is compiled (before anything else),
loaded (the kernel verifier) and pinned into a staging dir ``PIN_DIR/OBJECT_next_XXXXXXXX``
first, so a broken program changes nothing; then map contents, cpumap/devmap/prog_array
slots, sk_msg and sock_ops attachments and the XDP programs are changed, each with its
undo, and a failure undoes them in reverse; last the staging dirs replace the old ones.
Before changing anything apply writes an intent record (op ``topology-apply``) and, before
each change, how to undo it (:mod:`bpfdsl.runtime.topology_journal`): SIGINT/SIGTERM roll
back at each step until every change is made and checked, then the apply is finished; after
a SIGKILL the next command repairs it (:mod:`bpfdsl.runtime.repair`), back or forward, so
the system runs the old state or the new one.  ``apply --plan`` (:func:`plan_only`) and
:func:`status` only read, and say when such a repair is pending.
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

from bpfdsl.abi.btf.run_config import RunConfig
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import netlink
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
from bpfdsl.runtime import topology_journal as journal
from bpfdsl.runtime.loader import Collection, load_collection
from bpfdsl.runtime.mapview import MapCodec
from bpfdsl.runtime.topology import Built, EntryDecl, HookDecl, Ref, Topology, XdpDecl

Step = Callable[["Run"], None]

BY_NAME = "by_name"
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
    """An apply in progress: its intent record (the journal), the staged collections and
    dirs, fds opened on the way."""

    top: Topology
    built: dict[str, Built]
    live: Live
    intent: intent.Intent
    staged: dict[str, Collection] = field(default_factory=dict)
    staging: dict[str, str] = field(default_factory=dict)
    fds: list[S.Fd] = field(default_factory=list)
    xdp_done: dict[str, attach.XdpAttachment] = field(default_factory=dict)

    def log(self, entry: dict) -> None:
        """Journal how to undo the change about to be made (written before it is made)."""
        self.intent.record.setdefault("undo", []).append(entry)
        self.intent.update()

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
    rec = journal.read_record(top.pin_dir) if os.path.isdir(top.pin_dir) else None
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
            )
        )
    for name in rec.get("objects") or {}:
        if name not in built:
            out.append(Change("-", "object", name, "no longer in the file"))
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
    rec = journal.read_record(top.pin_dir) or {}
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
    return journal.sock_ops_ids(h.target)


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


# ---- the steps of an apply: each journals how to undo it (Run.log) before it changes


def _do_stage(name: str) -> Step:
    def do(run: Run) -> None:
        b = run.built[name]
        final = os.path.join(run.top.pin_dir, name)
        staging = f"{final}_next_{uuid.uuid4().hex[:8]}"
        reuse = _reusable(b, final)[0] if os.path.isdir(final) else {}
        by_name = os.path.join(run.top.pin_dir, BY_NAME)
        run.staging[name] = staging
        run.intent.update(staging=dict(run.staging))  # a rollback removes it
        os.makedirs(by_name, exist_ok=True)
        coll = load_collection(
            b.spec,
            config=b.config,
            pin_dir=by_name,
            reuse_maps=reuse,
            before_pin=run.intent.pinning_by_name,  # a rollback removes the maps it made
        )
        run.staged[name] = coll
        pins.pin_collection(coll, staging, source=b.decl.path, made_by="topology")

    return do


def _map_id(fd: int | S.Fd) -> int:
    return int(S.map_info(fd).id)


def _do_contents(ref: Ref, rows: list[tuple[bytes, bytes]]) -> Step:
    def do(run: Run) -> None:
        fd = run.map_fd(ref)
        vsize = len(rows[0][1])
        old = [(k, S.map_lookup(fd, k, vsize)) for k, _v in rows]
        run.log(
            {
                "undo": "map",
                "map_id": _map_id(fd),
                "rows": [[k.hex(), v.hex() if v is not None else None] for k, v in old],
            }
        )
        for k, v in rows:
            S.map_update(fd, k, v)

    return do


def _log_slot(run: Run, kind: str, fd: int, key: int) -> None:
    old = S.map_lookup(fd, struct.pack("<I", key), S.map_info(fd).value_size)
    run.log(
        {
            "undo": "slot",
            "kind": kind,
            "map_id": _map_id(fd),
            "key": key,
            "old": old.hex() if old is not None else None,
        }
    )


def _do_entry(e: EntryDecl) -> Step:
    def do(run: Run) -> None:
        fd = run.map_fd(e.map)
        pfd = run.prog_fd(e.program) if e.program is not None else None
        pname = str(e.program) if e.program is not None else ""
        _log_slot(run, e.kind, fd, e.key)
        if e.kind == "cpumap":
            cpumap.cpumap_set(fd, e.key, e.qsize, pfd, map_name=str(e.map), prog_name=pname)
        elif e.kind == "devmap":
            devmap.devmap_set(fd, e.key, e.interface, pfd, map_name=str(e.map), prog_name=pname)
        else:
            assert pfd is not None
            progarray.prog_array_set(fd, e.key, pfd, map_name=str(e.map), prog_name=pname)

    return do


def _do_entry_delete(kind: str, ref: Ref, key: int) -> Step:
    def do(run: Run) -> None:
        fd = run.map_fd(ref)
        _log_slot(run, kind, fd, key)
        S.map_delete(fd, struct.pack("<I", key))

    return do


def _do_hook(h: HookDecl) -> Step:
    def do(run: Run) -> None:
        pfd = run.prog_fd(h.program)
        new_id = attach.prog_id_of(pfd)
        if h.kind == "sk_msg":
            assert h.map is not None
            mfd = run.map_fd(h.map)
            old_ids = S.prog_query(mfd, AttachType.SK_MSG_VERDICT)[0]
            run.log({"undo": "sk_msg", "map_id": _map_id(mfd), "new": new_id, "old": old_ids})
            sockmap.sk_msg_attach(mfd, pfd, map_name=str(h.map), prog_name=str(h.program))
            return
        old_fd = None
        if h.program.obj in run.staging:  # the program of the dir being replaced
            path = os.path.join(
                run.top.pin_dir, h.program.obj, "progs", pins.pin_name(h.program.name)
            )
            if os.path.exists(path):
                old_fd = S.obj_get(path)
                run.fds.append(old_fd)
        old_id = attach.prog_id_of(old_fd) if old_fd is not None else 0
        if old_id not in journal.sock_ops_ids(h.target):
            old_fd, old_id = None, 0  # not attached: an undo must not attach it
        run.log({"undo": "sock_ops", "cgroup": h.target, "new": new_id, "old": old_id})
        cgroup.sock_ops_attach(h.target, pfd, prog_name=str(h.program))
        if old_fd is not None:  # the old program runs next to the new one until here
            cgroup.sock_ops_detach(h.target, int(old_fd))

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
    def do(run: Run) -> None:
        pfd = _recorded_prog_fd(run, r["program"])
        if pfd is None:
            return
        old_id = attach.prog_id_of(pfd)
        if r["kind"] == "sock_ops":
            if old_id not in journal.sock_ops_ids(r["target"]):
                return  # not attached: nothing to remove, nothing to undo
            run.log({"undo": "sock_ops", "cgroup": r["target"], "new": 0, "old": old_id})
            cgroup.sock_ops_detach(r["target"], pfd)
            return
        fd = _pinned_map(run.top, Ref(*str(r["target"]).split(":")))
        if fd is None:
            return
        run.fds.append(fd)
        if old_id not in S.prog_query(fd, AttachType.SK_MSG_VERDICT)[0]:
            return
        run.log({"undo": "sk_msg", "map_id": _map_id(fd), "new": 0, "old": [old_id]})
        sockmap.sk_msg_detach(fd, pfd)

    return do


def _do_xdp(x: XdpDecl, cur: attach.XdpAttachment | None) -> Step:
    def do(run: Run) -> None:
        pfd = run.prog_fd(x.program)
        link_pin = attach.link_pin_path(run.obj_dir(x.program.obj), x.dev)
        old_pins = attach._pins_of_link(cur.link_id, (run.top.pin_dir,)) if cur else []
        run.log(
            {
                "undo": "xdp",
                "dev": x.dev,
                "ifindex": netlink.ifindex(x.dev),
                "mode": x.mode,
                "new": attach.prog_id_of(pfd),
                "old": cur.prog_id if cur is not None else 0,
                "old_mode": cur.mode if cur is not None else "",
                "old_link_pin": old_pins[0] if old_pins else None,
            }
        )
        if cur is not None and cur.mode != x.mode:  # no atomic swap across modes
            attach.detach_xdp(x.dev, pin_roots=(run.top.pin_dir,))
            run.xdp_done[x.dev] = attach.attach_xdp(pfd, x.dev, mode=x.mode, link_pin=link_pin)
        elif cur is None:
            run.xdp_done[x.dev] = attach.attach_xdp(pfd, x.dev, mode=x.mode, link_pin=link_pin)
        else:
            run.xdp_done[x.dev] = attach.attach_xdp(pfd, x.dev, mode=x.mode, replace=True)

    return do


# ---- apply, down, status


@dataclass(slots=True)
class Result:
    """What an apply did (``applied``) or would do: ``changes``; ``notes`` for stderr
    (repairs made first, a signal held back); ``pending``: for ``--plan``, the
    interrupted commands the apply would repair first (:func:`pending_repairs`)."""

    changes: list[Change]
    applied: bool
    notes: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)


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


def _lock_and_repair(locks: oplock.OpLocks, top: Topology) -> tuple[Live, list[str]]:
    """Take the locks of ``top`` (waiting, bounded, while another command holds one),
    repair what interrupted commands left, and read the state under the locks.  Locks
    needed by what the repair or another command left (an interface of the last apply)
    are added until the set covers the state read.  Returns (state, repair notes)."""
    locks.acquire(_locks_for(top, read_live(top)))
    notes: list[str] = []
    for _ in range(5):
        notes += repair.repair_stale(locks)
        more = [k for k in _locks_for(top, read_live(top)) if k not in locks.held]
        if not more:
            break
        locks.add(more)
    for name in top.objects:
        notes += repair.orphan_staging(os.path.join(top.pin_dir, name))
    return read_live(top), notes


def pending_repairs(top: Topology) -> list[str]:
    """Read only: a line per interrupted command the next apply repairs first (any:
    every command that changes the system repairs all it can), and per command at work
    on this topology's locks now (the apply would wait for it)."""
    mine = {k.name for k in _locks_for(top, read_live(top))}
    out = []
    for rec, running in repair.pending():
        if not running:
            out.append(f"interrupted {repair.describe(rec)}: the next apply repairs it first")
        elif mine & set(rec.get("locks") or []):
            out.append(f"running: {repair.describe(rec)}; an apply now waits for it")
    return out


def plan_only(top: Topology, built: dict[str, Built]) -> Result:
    """``apply --plan``: the changes an apply would make, read from the system as it is
    (no lock taken, no repair made: nothing is changed), with the repairs pending."""
    live = read_live(top)
    return Result(plan(top, built, live), False, [], pending_repairs(top))


def apply(top: Topology, built: dict[str, Built], *, dry_run: bool = False) -> Result:
    """Bring the system to ``top`` (``built``: :func:`bpfdsl.runtime.topology.build`,
    everything compiled before this is called).  ``dry_run``: only the plan
    (:func:`plan_only`).  Returns the changes made (or planned).  On a failure or a
    SIGINT/SIGTERM before every change is made every change is undone and the staging
    dirs are removed: the old state keeps running; the error is raised with a note
    saying so (:class:`bpfdsl.runtime.intent.Interrupted` for a signal, exit 128 + N).
    A signal after that is held until the apply is finished (a note says so)."""
    if dry_run:
        return plan_only(top, built)
    with oplock.OpLocks() as locks, intent.Critical() as crit:
        locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
        live, notes = _lock_and_repair(locks, top)
        changes = plan(top, built, live)
        if not changes:
            return Result(changes, False, notes)
        made_root = not os.path.isdir(top.pin_dir) or not os.listdir(top.pin_dir)
        rec = intent.Intent(
            journal.APPLY, locks, pin_dir=top.pin_dir, file=top.path, made_root=made_root
        )
        rec.begin()
        run = Run(top, built, live, rec)
        try:
            crit.check("stopped before a change: nothing was changed")
            _ensure_root(top)
            todo = [ch for ch in changes if ch.do is not None]  # detaches and removals:
            for i, ch in enumerate(todo, 1):  # after the last failure point (finish)
                assert ch.do is not None
                ch.do(run)
                rec.step(f"change-{i}")
                crit.check("stopped before a change: what was changed was undone")
            _verify_xdp(run)
            commit = _commit_plan(run)
        except BaseException as e:
            failed = repair.roll_back_topology(rec.record)
            rec.done()
            run.close()
            if isinstance(e, DiagnosticError):
                e.diagnostics[0].notes.append(
                    "nothing was changed: the running state is the one before this apply"
                    if not failed
                    else "rolled back with errors: " + "; ".join(failed)
                )
            raise
        rec.step(journal.NO_RETURN, commit=commit)  # from here on the apply is finished
        try:
            notes += journal.finish(rec.record, rec.step)
        finally:
            run.close()
        rec.done()
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


def _commit_plan(run: Run) -> dict:
    """What finishes the apply (``commit`` of the journal): the interfaces and objects
    no longer in the file, where each XDP link goes, the record of the new state."""
    top, rec = run.top, run.live.record or {}
    want_devs = {x.dev for x in top.xdp}
    detach = []
    for r in rec.get("xdp") or []:
        if r["dev"] not in want_devs:
            try:
                detach.append([r["dev"], netlink.ifindex(r["dev"])])
            except DiagnosticError:
                continue  # the interface is gone, and its program with it
    tags = {}
    for n, b in run.built.items():
        for p in b.spec.programs:
            if n in run.staged:
                pid = attach.prog_id_of(run.staged[n].programs[p].fd)
            else:
                pid = _pinned_prog_id(top, Ref(n, p))
            tags[f"{n}:{p}"] = _prog_tag(pid)
    record = {
        "file": top.path,
        "objects": {n: {"digest": b.digest, "path": b.decl.path} for n, b in run.built.items()},
        "xdp": [{"dev": x.dev, "mode": x.mode, "program": str(x.program)} for x in top.xdp],
        "entries": [{"kind": e.kind, "map": str(e.map), "key": e.key} for e in top.entries],
        "hooks": [
            {"kind": h.kind, "program": str(h.program), "target": h.target} for h in top.hooks
        ],
        "tags": tags,
    }
    return {
        "detach": detach,
        "links": [[x.dev, netlink.ifindex(x.dev), x.program.obj] for x in top.xdp],
        "remove": sorted(n for n in rec.get("objects") or {} if n not in run.built),
        "record": record,
    }


def down(top: Topology) -> tuple[list[str], list[str]]:
    """Remove everything ``top`` made: its XDP links detached, its sock_ops and sk_msg
    programs detached, every pin under its pin dir removed; an interrupted apply or down
    is repaired first.  Writes an intent record (op ``topology-down``) first: after a
    SIGKILL the next command finishes it; SIGINT/SIGTERM stop it only before it removed
    anything.  Returns (what was done, one line each, [] when nothing was there; the
    repair notes).  Raises UsageError for a pin dir that is not a topology's."""
    with oplock.OpLocks() as locks, intent.Critical() as crit:
        locks.poll = lambda: crit.check("stopped while waiting for a lock: nothing changed")
        _live, notes = _lock_and_repair(locks, top)
        if not os.path.isdir(top.pin_dir):
            return [], notes
        if (pins.read_manifest(top.pin_dir) or {}).get("made_by") != "topology":
            raise UsageError(
                error("not-ours", f"{top.pin_dir} is not a topology's pin dir: nothing was removed")
            )
        hooks = journal.hooks_of(top.pin_dir, journal.read_record(top.pin_dir) or {})
        rec = intent.Intent(journal.DOWN, locks, pin_dir=top.pin_dir, hooks=hooks)
        rec.begin()
        try:
            crit.check("stopped before removing anything")
        except BaseException:
            rec.done()
            raise
        done = journal.take_down(top.pin_dir, hooks, rec.step)
        rec.done()
    late = crit.note("the down was finished first")
    if late:
        notes.append(late)
    return done, notes


@dataclass(slots=True)
class Drift:
    """One difference between the file and the system: ``state`` missing / changed /
    extra / not-applied / pending (a repair), ``kind``, ``what``, ``detail``."""

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
    is not the one recorded at the apply; first (state ``pending``) the interrupted
    commands the next apply repairs and those at work on the topology's locks.  Read
    only, as :func:`plan_only`."""
    live = read_live(top)
    out = [Drift("pending", "repair", line) for line in pending_repairs(top)]
    try:
        changes = plan(top, built, live)
    except DiagnosticError as e:  # a foreign program on an interface: drift too
        return out + [Drift("changed", "xdp", "", e.diagnostics[0].message)]
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


def run_configs(built: dict[str, Built]) -> dict[str, RunConfig]:
    """``OBJECT:PROGRAM`` -> the libxdp run config (priority, chain-call actions) of each
    XDP program of the file's objects that declares one (CollectionSpec.run_config)."""
    out = {}
    for name, b in sorted(built.items()):
        for p in sorted(b.spec.programs):
            rc = b.spec.run_config(p)
            if rc is not None:
                out[f"{name}:{p}"] = rc
    return out


def print_notes(notes: list[str]) -> None:
    for n in notes:
        print(n, file=sys.stderr)


def describe_json(changes: list[Change]) -> list[dict[str, Any]]:
    return [c.to_dict() for c in changes]
