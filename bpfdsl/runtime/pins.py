"""Pins (kernel side): put a loaded Collection in a bpffs directory, and take it out again.

Layout of a pin dir made by ``bpfdsl load`` (bpftool ``prog loadall PATH pinmaps PATH/maps``
style): ``DIR/progs/<program>``, ``DIR/maps/<map>`` (dots become ``_``: bpffs refuses
dots in names), links pinned later by ``bpfdsl attach`` as ``DIR/link_*``, and a manifest
``DIR/bpfdsl_manifest``: a symlink (bpffs holds no regular files) whose target is
``bpfdsl:`` + JSON ``{"bpfdsl": 1, "object": PATH, "programs": [...], "maps": [...],
"made_by": "load"|"attach"}``.
:func:`unpin_dir` removes only directories carrying that manifest.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bpfdsl.abi.prog_types import LinkType
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.attach import BPFFS, DEFAULT_PIN_ROOT, ensure_bpffs, is_bpffs

if TYPE_CHECKING:  # the loader is not imported by `bpfdsl unload`
    from bpfdsl.runtime.loader import Collection

MANIFEST = "bpfdsl_manifest"
_PREFIX = "bpfdsl:"


@dataclass(slots=True)
class PinnedCollection:
    """Where things were pinned: program/map name -> absolute pin path."""

    dir: str
    programs: dict[str, str] = field(default_factory=dict)
    maps: dict[str, str] = field(default_factory=dict)


def pin_name(name: str) -> str:
    """A bpffs-safe file name: ``.rodata`` -> ``rodata``, other dots and slashes -> ``_``."""
    return name.lstrip(".").replace(".", "_").replace("/", "_") or "_"


def read_manifest(pin_dir: str) -> dict | None:
    """The manifest of ``pin_dir`` or None when it has none (not made by ``bpfdsl load``)."""
    try:
        target = os.readlink(os.path.join(pin_dir, MANIFEST))
    except OSError:
        return None
    if not target.startswith(_PREFIX):
        return None
    try:
        return json.loads(target[len(_PREFIX) :])
    except json.JSONDecodeError:
        return None


def pin_collection(
    coll: Collection, pin_dir: str, *, source: str = "", made_by: str = "load"
) -> PinnedCollection:
    """Pin every program and map of ``coll`` under ``pin_dir`` (mounting bpffs at
    /sys/fs/bpf if missing) and write the manifest (``made_by``: ``load`` or ``attach``,
    the command that pinned it; `bpfdsl detach` removes the pins of ``attach``).
    ``pin_dir`` must not exist or be empty.  On failure everything pinned here is
    removed.  Raises UsageError."""
    if pin_dir.startswith(BPFFS + "/") or pin_dir == BPFFS:
        ensure_bpffs(BPFFS)
    parent = os.path.dirname(os.path.abspath(pin_dir))
    if parent == DEFAULT_PIN_ROOT:
        os.makedirs(parent, exist_ok=True)
    probe = pin_dir if os.path.isdir(pin_dir) else parent
    if not os.path.isdir(probe) or not is_bpffs(probe):
        raise UsageError(
            error(
                "not-bpffs",
                f"{pin_dir}: not inside a bpffs mount",
                hint=f"use a directory under {BPFFS}",
            )
        )
    name = os.path.basename(os.path.normpath(pin_dir))
    if not os.path.isdir(pin_dir) and "." in name:
        # kernel/bpf/inode.c bpf_lookup(): a name with '.' is refused with EPERM
        raise UsageError(
            error(
                "bad-pin-dir",
                f"{pin_dir}: bpffs does not allow '.' in names",
                hint=f"use a name without dots, e.g. {name.replace('.', '_')}",
            )
        )
    if os.path.isdir(pin_dir) and os.listdir(pin_dir):
        manifest = read_manifest(pin_dir)
        if manifest is None:
            hint = "pick an empty or new directory"
        elif manifest.get("made_by") == "attach":
            hint = (
                "it holds an earlier `bpfdsl attach`: to replace that program atomically, "
                f"attach with another --pin-dir, then `bpfdsl unload {pin_dir}`; or "
                f"`bpfdsl detach --dev IFACE` first (it removes {pin_dir})"
            )
        else:
            hint = f"it holds an earlier load: bpfdsl unload {pin_dir}"
        raise UsageError(error("pin-dir-busy", f"{pin_dir} is not empty", hint=hint))
    made: list[str] = []  # files and dirs in creation order, removed in reverse on failure
    res = PinnedCollection(pin_dir)
    try:
        for d in (pin_dir, os.path.join(pin_dir, "progs"), os.path.join(pin_dir, "maps")):
            if not os.path.isdir(d):
                _mkdir(d)
                made.append(d)
        for name, p in coll.programs.items():
            path = os.path.join(pin_dir, "progs", pin_name(name))
            S.obj_pin(p.fd, path)
            made.append(path)
            res.programs[name] = path
        for name, m in coll.maps.items():
            path = os.path.join(pin_dir, "maps", pin_name(name))
            S.obj_pin(m.fd, path)
            made.append(path)
            res.maps[name] = path
        manifest = {
            "bpfdsl": 1,
            "object": source,
            "programs": sorted(res.programs),
            "maps": sorted(res.maps),
            "made_by": made_by,
        }
        target = _PREFIX + json.dumps(manifest, separators=(",", ":"))
        os.symlink(target[:4000], os.path.join(pin_dir, MANIFEST))
        made.append(os.path.join(pin_dir, MANIFEST))
    except (OSError, S.BpfError) as e:
        _remove(made)
        if isinstance(e, PermissionError):
            raise
        raise UsageError(error("pin-failed", f"cannot pin under {pin_dir}: {e}")) from None
    return res


def _mkdir(path: str) -> None:
    """mkdir ``path``; /sys/fs/bpf/bpfdsl is made again when a detach removed it, empty,
    meanwhile (a few tries: it is removed only when empty)."""
    for _ in range(5):
        try:
            os.mkdir(path)
            return
        except FileNotFoundError:
            if os.path.dirname(path) != DEFAULT_PIN_ROOT:
                raise
            os.makedirs(DEFAULT_PIN_ROOT, exist_ok=True)
    os.mkdir(path)


def _remove(paths: list[str]) -> None:
    for p in reversed(paths):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
            else:
                os.unlink(p)
        except OSError:
            pass


def unpin_dir(pin_dir: str, detached: list[str] | None = None) -> list[str]:
    """Remove everything ``bpfdsl load`` pinned in ``pin_dir``: links there are detached
    first (BPF_LINK_DETACH, so XDP stops even if another process holds the link), then
    every pin, the manifest and the directories.  Returns the removed paths; appends a
    description of each detached attachment (``XDP on eth0 (link 7, prog 42)``) to
    ``detached``.  Raises UsageError when ``pin_dir`` does not exist, is a bpffs root or
    has no bpfdsl manifest (then nothing is touched); NoPermission when not root."""
    check_unpinnable(pin_dir)
    removed: list[str] = []
    try:
        for f in sorted(os.listdir(pin_dir)):  # links first: XDP stops before pins go
            path = os.path.join(pin_dir, f)
            if (
                os.path.isfile(path)
                and not os.path.islink(path)
                and (what := _detach_if_link(path))
            ):
                if detached is not None:
                    detached.append(what)
        removed = remove_tree(pin_dir)
    except PermissionError as e:
        raise S.NoPermission(f"removing {e.filename or pin_dir}") from None
    return removed


def remove_tree(pin_dir: str) -> list[str]:
    """Remove every pin and directory under ``pin_dir`` and ``pin_dir`` itself, the
    manifest last (a dir cut short keeps it, so it stays known as bpfdsl's); links are
    unpinned, not detached.  Missing entries are skipped (a repair finishing an earlier
    removal).  Returns the removed paths; raises OSError (PermissionError)."""
    removed: list[str] = []
    manifest = os.path.join(pin_dir, MANIFEST)
    for dirpath, _dirs, files in os.walk(pin_dir, topdown=False):  # children first
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if path == manifest:
                continue
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
        if dirpath != pin_dir:
            try:
                os.rmdir(dirpath)
                removed.append(dirpath)
            except FileNotFoundError:
                pass
    if os.path.lexists(manifest):
        os.unlink(manifest)
        removed.append(manifest)
    try:
        os.rmdir(pin_dir)
        removed.append(pin_dir)
    except FileNotFoundError:
        pass
    if os.path.dirname(os.path.normpath(pin_dir)) == DEFAULT_PIN_ROOT:
        remove_root_if_empty()
    return removed


def remove_root_if_empty() -> None:
    """Remove /sys/fs/bpf/bpfdsl when nothing is pinned there any more (an attach
    making a dir in it meanwhile makes it again: :func:`pin_collection`)."""
    try:
        os.rmdir(DEFAULT_PIN_ROOT)
    except OSError:
        pass


def check_unpinnable(pin_dir: str) -> None:
    """Raise what :func:`unpin_dir` refuses: UsageError when ``pin_dir`` does not exist,
    is a bpffs root or has no bpfdsl manifest; NoPermission when not root."""
    if not os.path.isdir(pin_dir):
        raise UsageError(error("no-pin-dir", f"{pin_dir}: no such directory"))
    real = os.path.realpath(pin_dir)
    if real in (BPFFS, DEFAULT_PIN_ROOT) or os.path.ismount(real) or read_manifest(pin_dir) is None:
        raise UsageError(
            error(
                "not-ours",
                f"{pin_dir} is not a bpfdsl pin dir (no {MANIFEST}: `bpfdsl load` did not "
                "make it); nothing was removed",
                hint="`bpfdsl show` lists the pin dirs bpfdsl made; unload one of those",
            )
        )
    if not os.access(pin_dir, os.W_OK | os.X_OK):
        raise S.NoPermission(f"removing pins in {pin_dir}")


def _detach_if_link(path: str) -> str:
    """Detach the link pinned at ``path``; a description of what ran there ("" when
    ``path`` is no link or was detached already)."""
    try:
        with S.obj_get(path) as fd:
            if S.fd_kind(int(fd)) != "link":
                return ""
            info = S.link_info(fd)
            S.link_detach(fd)
    except S.BpfError:
        return ""
    if not info.prog_id:  # detached earlier (its interface or program went away)
        return ""
    where = f"link {info.id}, prog {info.prog_id}"
    if info.type == LinkType.XDP and info.xdp_ifindex:
        try:
            dev = socket.if_indextoname(int(info.xdp_ifindex))
        except OSError:
            dev = f"ifindex {info.xdp_ifindex}"
        return f"XDP on {dev} ({where})"
    return f"link {info.id} (prog {info.prog_id})"


def dirs_pinning_prog(prog_id: int, root: str = BPFFS) -> list[str]:
    """bpfdsl pin dirs (with a manifest) under ``root`` holding a pin of program ``prog_id``
    in ``DIR/progs``."""
    out: list[str] = []
    for dirpath, dirs, _files in os.walk(root):
        dirs.sort()
        if os.path.basename(dirpath) != "progs":
            continue
        owner = os.path.dirname(dirpath)
        if read_manifest(owner) is None:
            continue
        try:
            names = sorted(os.listdir(dirpath))
        except OSError:  # removed meanwhile (another command's unpin)
            continue
        for f in names:
            try:
                with S.obj_get(os.path.join(dirpath, f)) as fd:
                    if S.fd_kind(int(fd)) == "prog" and S.prog_info(fd).id == prog_id:
                        out.append(owner)
                        break
            except S.BpfError:
                continue
    return out
