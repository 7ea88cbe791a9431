"""The journal of a topology ``apply`` and ``down`` (:mod:`bpfdsl.runtime.topology_ops`):
what each change does, written into the command's intent record
(:mod:`bpfdsl.runtime.intent`) before the change is made.  The command itself undoes
them from it (a failure, SIGINT/SIGTERM) and so does the next command after a SIGKILL or
a crash (:mod:`bpfdsl.runtime.repair`): one code path for both.

An apply's record (op ``topology-apply``) holds:

- ``pin_dir``; ``made_root``: true when this apply made PIN_DIR (a rollback removes it
  again when nothing else is in it);
- ``staging``: object name -> its staging dir ``PIN_DIR/OBJECT_next_XXXXXXXX`` (written
  before the dir is made); ``by_name_pins`` (:meth:`bpfdsl.runtime.intent.Intent.pinning_by_name`);
- ``undo``: one entry per change, in the order made, naming kernel objects by id (an id
  stays valid while its object lives; the old programs stay pinned in their object dirs
  until the commit, so they live):

  - ``{"undo": "map", "map_id", "rows": [[KEY_HEX, OLD_VALUE_HEX | null], ...]}``;
  - ``{"undo": "slot", "kind": cpumap|devmap|prog_array, "map_id", "key", "old": HEX | null}``
    (the slot's lookup before: the kernel reports programs by id);
  - ``{"undo": "sk_msg", "map_id", "new": PROG_ID | 0, "old": [PROG_ID, ...]}``;
  - ``{"undo": "sock_ops", "cgroup", "new": PROG_ID | 0, "old": PROG_ID | 0}``;
  - ``{"undo": "xdp", "dev", "ifindex", "mode", "new": PROG_ID, "old": PROG_ID | 0,
    "old_mode", "old_link_pin"}``;

- ``commit`` (written at step ``no-return``, once every change is made and checked):
  ``detach`` ([interface, ifindex]: those no longer in the file), ``links`` ([interface,
  ifindex, object]: where each XDP link is pinned), ``remove`` (objects no longer in the file), ``record`` (the
  state record to write).

Before step ``no-return`` a repair rolls back (:func:`roll_back`): each entry is undone
in reverse, where the kernel still shows the change (an entry written just before a kill
undoes nothing), then the staging dirs and the maps pinned by name go.  From it on the
apply is finished (:func:`finish`: the same steps the command makes, each one skipped
when it is done).  A down's record (op ``topology-down``: ``pin_dir``, ``hooks``) is
finished the same way (:func:`take_down`).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Callable

from bpfdsl.abi.map_types import SOCK_MAP_TYPES
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import attach, cgroup, pins, sockmap

STATE = "bpfdsl_topology_"  # + chunk number: the record of the last apply
_CHUNK = 3000  # characters of JSON per symlink (a symlink target is at most PATH_MAX 4096)
APPLY, DOWN = "topology-apply", "topology-down"
NO_RETURN = "no-return"  # the step from which an apply is finished, not rolled back

Step = Callable[[str], None]


def _no_step(_name: str) -> None:
    return None


# ---- the record of the last apply (in PIN_DIR: bpffs holds no regular files)


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


def write_record(pin_dir: str, rec: dict) -> None:
    """Replace the record in ``pin_dir`` with ``rec`` (JSON in symlinks ``STATE0..``)."""
    text = json.dumps(rec, separators=(",", ":"), sort_keys=True)
    chunks = [text[i : i + _CHUNK] for i in range(0, len(text), _CHUNK)] or [""]
    for i in range(10_000):  # the old record first
        path = os.path.join(pin_dir, f"{STATE}{i}")
        if not os.path.lexists(path):
            break
        os.unlink(path)
    for i, c in enumerate(chunks):
        os.symlink(c, os.path.join(pin_dir, f"{STATE}{i}"))


# ---- undoing one change


def _fd_of(kind: str, obj_id: int) -> S.Fd | None:
    """An fd of the live ``kind`` object ``obj_id`` (None: 0, or it is gone)."""
    if not obj_id:
        return None
    try:
        return S.get_fd_by_id(kind, obj_id)
    except S.BpfError:
        return None


def restore_slot(kind: str, fd: int, key: int, raw: bytes | None) -> None:
    """Put back slot ``key`` of a cpumap/devmap/prog_array as ``raw`` (its lookup: the
    kernel reports the program's id, written back through an fd of that id)."""
    k = struct.pack("<I", key)
    if raw is None:
        with contextlib.suppress(S.BpfError):  # absent already
            S.map_delete(fd, k)
        return
    if kind == "prog_array":
        prog = _fd_of("prog", struct.unpack("<I", raw[:4])[0])
        if prog is None:
            raise OSError(f"slot {key}: its old program is gone")
        with prog:
            S.map_update(fd, k, struct.pack("<I", int(prog)))
        return
    first, prog_id = struct.unpack("<II", raw.ljust(8, b"\0")[:8])
    if not prog_id:
        S.map_update(fd, k, raw)
        return
    prog = _fd_of("prog", prog_id)
    if prog is None:
        raise OSError(f"slot {key}: its old entry program (id {prog_id}) is gone")
    with prog:
        S.map_update(fd, k, struct.pack("<Ii", first, int(prog))[: len(raw)])


def sock_ops_ids(path: str) -> list[int]:
    """Ids of the sock_ops programs attached to cgroup ``path`` (BPF_PROG_QUERY)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return S.prog_query(fd, AttachType.CGROUP_SOCK_OPS)[0]
    finally:
        os.close(fd)


def _undo_map(e: dict) -> None:
    fd = _fd_of("map", int(e["map_id"]))
    if fd is None:
        return  # gone: a map of a staging dir
    with fd:
        for k, v in e["rows"]:
            if v is None:
                with contextlib.suppress(S.BpfError):
                    S.map_delete(fd, bytes.fromhex(k))
            else:
                S.map_update(fd, bytes.fromhex(k), bytes.fromhex(v))


def _undo_slot(e: dict) -> None:
    fd = _fd_of("map", int(e["map_id"]))
    if fd is None:
        return
    with fd:
        old = e.get("old")
        restore_slot(e["kind"], int(fd), int(e["key"]), bytes.fromhex(old) if old else None)


def _undo_sk_msg(e: dict) -> None:
    fd = _fd_of("map", int(e["map_id"]))
    if fd is None:
        return
    with fd:
        have = S.prog_query(fd, AttachType.SK_MSG_VERDICT)[0]
        new = _fd_of("prog", int(e.get("new") or 0))
        if new is not None:
            with new:
                if int(e["new"]) in have:
                    sockmap.sk_msg_detach(fd, int(new))
        for old_id in e.get("old") or []:
            old = _fd_of("prog", int(old_id))
            if old is not None and old_id not in have:
                with old:
                    sockmap.sk_msg_attach(fd, int(old))


def _undo_sock_ops(e: dict) -> None:
    path = e["cgroup"]
    try:
        have = sock_ops_ids(path)
    except OSError:
        return  # the cgroup is gone, and its programs with it
    old_id, new_id = int(e.get("old") or 0), int(e.get("new") or 0)
    old = _fd_of("prog", old_id)
    if old is not None and old_id not in have:  # the old one first: one always runs
        with old:
            cgroup.sock_ops_attach(path, int(old))
    new = _fd_of("prog", new_id)
    if new is not None and new_id in have:
        with new:
            cgroup.sock_ops_detach(path, int(new))


def _here(dev: str, ifindex: int) -> bool:
    """True when interface ``dev`` of this namespace is the one with ``ifindex`` (it
    was not deleted, nor made again with another index, since)."""
    try:
        return int(netlink.ifindex(dev)) == int(ifindex)
    except DiagnosticError:
        return False


def _undo_xdp(e: dict, pin_dir: str) -> None:
    dev = e["dev"]
    if not _here(dev, int(e["ifindex"])):
        return  # the interface is gone, and its program with it
    cur = attach.xdp_attachment(dev)
    now = cur.prog_id if cur is not None else 0
    old, new = int(e.get("old") or 0), int(e.get("new") or 0)
    if cur is not None and now == old and cur.mode == e.get("old_mode"):
        return  # not changed (killed before), or undone already
    if now and now != new:
        raise OSError(f"{dev} runs XDP program id {now}, which this apply did not attach")
    old_fd = _fd_of("prog", old)
    try:
        if cur is not None and old_fd is not None and cur.mode == e.get("old_mode"):
            attach.attach_xdp(old_fd, dev, mode=cur.mode, replace=True)  # atomically back
            return
        if cur is not None:
            attach.detach_xdp(dev, pin_roots=(pin_dir,))
        if old_fd is not None:
            attach.attach_xdp(old_fd, dev, mode=e["old_mode"], link_pin=e.get("old_link_pin"))
        elif old:
            raise OSError(f"{dev}: its old XDP program (id {old}) is gone")
    finally:
        if old_fd is not None:
            old_fd.close()


def undo_entry(e: dict, pin_dir: str) -> None:
    """Undo the change journal entry ``e`` describes, where it was made (see the module
    docstring).  Raises DiagnosticError or OSError (S.BpfError) when the kernel refuses."""
    kind = e.get("undo")
    if kind == "map":
        _undo_map(e)
    elif kind == "slot":
        _undo_slot(e)
    elif kind == "sk_msg":
        _undo_sk_msg(e)
    elif kind == "sock_ops":
        _undo_sock_ops(e)
    elif kind == "xdp":
        _undo_xdp(e, pin_dir)


def release_sockmaps(obj_dir: str) -> list[str]:
    """Detach the sk_msg programs from the sockmaps and sockhashes pinned in
    ``obj_dir/maps`` (before the dir is removed: a map someone else still holds must not
    keep running a program of a removed object).  Returns ``MAP (prog N)`` per detach."""
    out = []
    maps = os.path.join(obj_dir, "maps")
    for name in sorted(os.listdir(maps)) if os.path.isdir(maps) else []:
        try:
            with S.obj_get(os.path.join(maps, name)) as fd:
                if S.fd_kind(int(fd)) != "map" or S.map_info(fd).type not in SOCK_MAP_TYPES:
                    continue
                for prog_id in S.prog_query(fd, AttachType.SK_MSG_VERDICT)[0]:
                    prog = _fd_of("prog", prog_id)
                    if prog is not None:
                        with prog:
                            if sockmap.sk_msg_detach(fd, int(prog)):
                                out.append(f"{name} (prog {prog_id})")
        except (S.BpfError, OSError):
            continue
    return out


def roll_back(rec: dict) -> list[str]:
    """Undo an apply from its record ``rec``: the ``undo`` entries in reverse, then its
    staging dirs, then PIN_DIR when it made it and nothing else is there.  (The maps it
    pinned by name: :func:`bpfdsl.runtime.repair.remove_by_name_pins`.)  Returns what
    could not be undone, one line each ([]: the state before the apply is back)."""
    pin_dir = str(rec["pin_dir"])
    failed = []
    for e in reversed(rec.get("undo") or []):
        if e.get("undo") == "xdp" and rec.get("netns_gone"):
            continue  # its interfaces went with their namespace
        try:
            undo_entry(e, pin_dir)
        except (DiagnosticError, OSError) as err:
            failed.append(str(err))
    for d in sorted((rec.get("staging") or {}).values()):
        try:
            if os.path.isdir(d) and pins.read_manifest(d) is not None:
                release_sockmaps(d)
                pins.unpin_dir(d)  # its links detached too: none of them stays attached
            elif os.path.isdir(d):
                pins.remove_tree(d)  # pinned in part (killed while pinning): no link yet
        except (DiagnosticError, OSError) as err:
            failed.append(f"removing {d}: {err}")
    if rec.get("made_root") and os.path.isdir(pin_dir):
        left = set(os.listdir(pin_dir)) - {pins.MANIFEST, "by_name"}
        by_name = os.path.join(pin_dir, "by_name")
        if not left and (not os.path.isdir(by_name) or not os.listdir(by_name)):
            pins.remove_tree(pin_dir)
    return failed


# ---- finishing


def finish(rec: dict, step: Step = _no_step) -> list[str]:
    """Finish an apply past its point of no return from its record ``rec`` (``commit``):
    detach XDP from the interfaces no longer in the file, pin each XDP link in its
    program's object dir, move the staging dirs into place, remove the objects no longer
    in the file, write the state record.  Each part is skipped where it is done (a repair
    finishing what a kill left); ``step(NAME)`` is called after each.  Returns notes."""
    pin_dir = str(rec["pin_dir"])
    commit = rec["commit"]
    staging: dict[str, str] = rec.get("staging") or {}
    notes = []
    xdp_here = not rec.get("netns_gone")
    for dev, ifindex in commit.get("detach") or []:
        if not xdp_here or not _here(dev, ifindex):
            continue  # the interface is gone, and its program with it
        cur = attach.xdp_attachment(dev)
        if cur is not None and cur.link_id is not None and _link_pinned_in(cur, pin_dir):
            attach.detach_xdp(dev, pin_roots=(pin_dir,))
            notes.append(f"detached XDP from {dev}")
    step("detached")
    for dev, ifindex, obj in commit.get("links") or []:
        if not xdp_here or not _here(dev, ifindex):
            continue
        cur = attach.xdp_attachment(dev)
        if cur is None or cur.link_id is None or not _link_pinned_in(cur, pin_dir):
            continue
        home = staging.get(obj, "")
        if not os.path.isdir(home):
            home = os.path.join(pin_dir, obj)
        attach.move_link_pin(cur, attach.link_pin_path(home, dev))
    step("links-moved")
    for obj, d in sorted(staging.items()):
        final = os.path.join(pin_dir, obj)
        if not os.path.isdir(d):
            continue  # moved already
        if os.path.isdir(final):
            release_sockmaps(final)
            pins.remove_tree(final)
        os.rename(d, final)
    for obj in commit.get("remove") or []:
        d = os.path.join(pin_dir, obj)
        if os.path.isdir(d) and pins.read_manifest(d) is not None:
            release_sockmaps(d)
            pins.unpin_dir(d)
    step("renamed")
    write_record(pin_dir, commit["record"])
    step("recorded")
    return notes


def _link_pinned_in(cur: attach.XdpAttachment, pin_dir: str) -> bool:
    return bool(attach._pins_of_link(cur.link_id, (pin_dir,)))


# ---- down


def hooks_of(pin_dir: str, record: dict) -> list[dict]:
    """The sock_ops and sk_msg attachments the last apply (``record``) made, by id, as a
    down's record lists them: ``kind``, ``target`` (cgroup path, or OBJECT:MAP),
    ``prog_id``, ``map_id`` (sk_msg)."""
    out = []
    for r in record.get("hooks") or []:
        obj, name = str(r["program"]).split(":", 1)
        h = {"kind": r["kind"], "target": r["target"], "program": r["program"]}
        h["prog_id"] = _pinned_id(os.path.join(pin_dir, obj, "progs", pins.pin_name(name)))
        if r["kind"] == "sk_msg":
            mobj, mname = str(r["target"]).split(":", 1)
            path = os.path.join(pin_dir, mobj, "maps", pins.pin_name(mname))
            h["map_id"] = _pinned_id(path)
        out.append(h)
    return out


def _pinned_id(path: str) -> int:
    try:
        with S.obj_get(path) as fd:
            kind = S.fd_kind(int(fd))
            if kind == "prog":
                return int(S.prog_info(fd).id)
            if kind == "map":
                return int(S.map_info(fd).id)
    except (S.BpfError, OSError):
        pass
    return 0


def take_down(pin_dir: str, hooks: list[dict], step: Step = _no_step) -> list[str]:
    """Remove what a topology made in ``pin_dir``: detach its sock_ops and sk_msg
    programs (``hooks``: :func:`hooks_of`), then every object dir (their XDP links
    detached first), then PIN_DIR.  What is gone already is skipped (a repair finishing
    a killed down).  Returns what was done, one line each."""
    done: list[str] = []
    for h in hooks:
        prog = _fd_of("prog", int(h.get("prog_id") or 0))
        if prog is None:
            continue  # gone: nothing runs it
        with prog:
            if h["kind"] == "sock_ops":
                with contextlib.suppress(OSError):
                    if cgroup.sock_ops_detach(h["target"], int(prog)):
                        done.append(f"detached sock_ops {h['program']} from {h['target']}")
                continue
            m = _fd_of("map", int(h.get("map_id") or 0))
            if m is not None:
                with m:
                    if sockmap.sk_msg_detach(m, int(prog)):
                        done.append(f"detached sk_msg {h['program']} from {h['target']}")
    step("hooks-detached")
    if not os.path.isdir(pin_dir):
        return done
    for name in sorted(os.listdir(pin_dir)):
        d = os.path.join(pin_dir, name)
        if os.path.isdir(d) and pins.read_manifest(d) is not None:
            detached = [f"sk_msg from {m}" for m in release_sockmaps(d)]
            pins.unpin_dir(d, detached)
            done += [f"detached {w}" for w in detached]
            done.append(f"removed {d}")
    step("unpinned")
    pins.remove_tree(pin_dir)
    done.append(f"removed {pin_dir}")
    return done
