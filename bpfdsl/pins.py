"""Pins (kernel side): put a loaded Collection in a bpffs directory, and take it out again.

Layout of a pin dir made by ``bpfdsl load`` (bpftool ``prog loadall PATH pinmaps PATH/maps``
style): ``DIR/progs/<program>``, ``DIR/maps/<map>`` (dots become ``_``: bpffs refuses
dots in names), links pinned later by ``bpfdsl attach`` as ``DIR/link_*``, and a manifest
``DIR/bpfdsl_manifest``: a symlink (bpffs holds no regular files) whose target is
``bpfdsl:`` + JSON ``{"bpfdsl": 1, "object": PATH, "programs": [...], "maps": [...]}``.
:func:`unpin_dir` removes only directories carrying that manifest.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from bpfdsl import syscall as S
from bpfdsl.attach import BPFFS, ensure_bpffs, fd_kind
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.loader import Collection

MANIFEST = "bpfdsl_manifest"
_PREFIX = "bpfdsl:"
BPF_FS_MAGIC = 0xCAFE4A11


@dataclass(slots=True)
class PinnedCollection:
    """Where things were pinned: program/map name -> absolute pin path."""

    dir: str
    programs: dict[str, str] = field(default_factory=dict)
    maps: dict[str, str] = field(default_factory=dict)


def pin_name(name: str) -> str:
    """A bpffs-safe file name: ``.rodata`` -> ``rodata``, other dots and slashes -> ``_``."""
    return name.lstrip(".").replace(".", "_").replace("/", "_") or "_"


def _is_bpffs(path: str) -> bool:
    import ctypes  # noqa: PLC0415

    class StatFs(ctypes.Structure):
        _fields_ = [("f_type", ctypes.c_long), ("_rest", ctypes.c_long * 15)]

    libc = ctypes.CDLL(None, use_errno=True)
    st = StatFs()
    if libc.statfs(os.fsencode(path), ctypes.byref(st)) != 0:
        return False
    return st.f_type & 0xFFFFFFFF == BPF_FS_MAGIC


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


def pin_collection(coll: Collection, pin_dir: str, *, source: str = "") -> PinnedCollection:
    """Pin every program and map of ``coll`` under ``pin_dir`` (mounting bpffs at
    /sys/fs/bpf if missing) and write the manifest.  ``pin_dir`` must not exist or be
    empty.  On failure everything pinned here is removed.  Raises UsageError."""
    if pin_dir.startswith(BPFFS + "/") or pin_dir == BPFFS:
        ensure_bpffs(BPFFS)
    parent = os.path.dirname(os.path.abspath(pin_dir))
    probe = pin_dir if os.path.isdir(pin_dir) else parent
    if not os.path.isdir(probe) or not _is_bpffs(probe):
        raise UsageError(
            error(
                "not-bpffs",
                f"{pin_dir}: not inside a bpffs mount",
                hint=f"use a directory under {BPFFS}",
            )
        )
    if os.path.isdir(pin_dir) and os.listdir(pin_dir):
        hint = (
            f"it holds an earlier load: bpfdsl unload {pin_dir}"
            if read_manifest(pin_dir)
            else "pick an empty or new directory"
        )
        raise UsageError(error("pin-dir-busy", f"{pin_dir} is not empty", hint=hint))
    made: list[str] = []  # files and dirs in creation order, removed in reverse on failure
    res = PinnedCollection(pin_dir)
    try:
        for d in (pin_dir, os.path.join(pin_dir, "progs"), os.path.join(pin_dir, "maps")):
            if not os.path.isdir(d):
                os.mkdir(d)
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


def _remove(paths: list[str]) -> None:
    for p in reversed(paths):
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.rmdir(p)
            else:
                os.unlink(p)
        except OSError:
            pass


def unpin_dir(pin_dir: str) -> list[str]:
    """Remove everything ``bpfdsl load`` pinned in ``pin_dir``: links there are detached
    first (BPF_LINK_DETACH, so XDP stops even if another process holds the link), then
    every pin, the manifest and the directories.  Returns the removed paths.  Raises
    UsageError when ``pin_dir`` does not exist or has no bpfdsl manifest."""
    if not os.path.isdir(pin_dir):
        raise UsageError(error("no-pin-dir", f"{pin_dir}: no such directory"))
    if read_manifest(pin_dir) is None:
        raise UsageError(
            error(
                "not-ours",
                f"{pin_dir} was not made by `bpfdsl load` (no {MANIFEST}); refusing to remove it",
                hint=f"remove it yourself: rm -r {pin_dir}",
            )
        )
    removed: list[str] = []
    for dirpath, _dirs, files in os.walk(pin_dir, topdown=False):  # children first
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if not os.path.islink(path):
                _detach_if_link(path)
            try:
                os.unlink(path)
                removed.append(path)
            except FileNotFoundError:
                pass
        if dirpath != pin_dir:
            os.rmdir(dirpath)
            removed.append(dirpath)
    os.rmdir(pin_dir)
    removed.append(pin_dir)
    return removed


def _detach_if_link(path: str) -> None:
    try:
        with S.obj_get(path) as fd:
            if fd_kind(int(fd)) == "link":
                S.link_detach(fd)
    except S.BpfError:
        pass
