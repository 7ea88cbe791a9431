"""The MAP and PROG arguments of the map commands (``bpfdsl cpumap|devmap|sockmap|
progarray ...``): their help texts and the context managers that open what they name.

MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir) | id:N.
PROG := NAME (pinned in the map's pin dir) | PIN_PATH | id:N.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bpfdsl.runtime.oplock import LockKey, OpLocks

MAP_HELP = "MAP := PIN_PATH | DIR:NAME | id:N"
PROG_HELP = "PROG := NAME (pinned next to the map) | PIN_PATH | id:N"


@contextmanager
def open_map(ref: str, *, lock: bool = False) -> Iterator[tuple[int, str, str | None]]:
    """The map MAP names, open for the ``with`` block: (fd, name, the pin dir it was
    loaded into, or None).  MAP := PIN_PATH | DIR:NAME (a ``bpfdsl load --pin-dir`` dir,
    maps under DIR/maps) | id:N, as ``bpfdsl.runtime.mapview.resolve_ref`` reads it.
    ``lock``: hold the pin dir's lock (:mod:`bpfdsl.runtime.oplock`) for the block, so
    an attach replacing that dir's program (and maybe its maps) waits, and the entry
    does not go into a map being dropped."""
    from bpfdsl.runtime import oplock
    from bpfdsl.runtime.mapview import MapView, resolve_ref

    target = resolve_ref(ref)
    pin_dir = None
    if isinstance(target, str):
        pin_dir = os.path.dirname(os.path.abspath(target))
        if os.path.basename(pin_dir) == "maps":
            pin_dir = os.path.dirname(pin_dir)
    with oplock.OpLocks() as locks:
        if lock and pin_dir is not None:
            _acquire_interruptibly(locks, [oplock.pin_dir_key(pin_dir)])
        with MapView(ref) as m:
            yield int(m.fd), m.name, pin_dir


@contextmanager
def pin_dir_locked(ref: str) -> Iterator[str | None]:
    """Hold the lock of the bpfdsl pin dir (one with a manifest: made by ``bpfdsl load``
    or ``attach``) map MAP lives in, for the ``with`` block; yields that dir or None (an
    ``id:N`` ref, or a map pinned elsewhere: nothing of bpfdsl's replaces it)."""
    from bpfdsl.runtime import oplock, pins
    from bpfdsl.runtime.mapview import resolve_ref

    target = resolve_ref(ref)
    pin_dir = None
    if isinstance(target, str):
        pin_dir = os.path.dirname(os.path.abspath(target))
        if os.path.basename(pin_dir) == "maps":
            pin_dir = os.path.dirname(pin_dir)
        if pins.read_manifest(pin_dir) is None:
            pin_dir = None
    with oplock.OpLocks() as locks:
        if pin_dir is not None:
            _acquire_interruptibly(locks, [oplock.pin_dir_key(pin_dir)])
        yield pin_dir


def _acquire_interruptibly(locks: OpLocks, keys: list[LockKey]) -> None:
    """``locks.acquire(keys)`` where SIGINT/SIGTERM/SIGHUP during the wait stop the
    command (intent.Interrupted: exit 128+N, nothing changed) instead of killing it."""
    from bpfdsl.runtime import intent

    what = "stopped while waiting for a lock: nothing changed"
    with intent.Critical() as crit:
        locks.poll = lambda: crit.check(what)
        locks.acquire(keys)
    locks.poll = None
    if crit.received:  # came after the last look: still before any change
        raise intent.Interrupted(crit.received[0], what)


@contextmanager
def open_prog(ref: str | None, pin_dir: str | None) -> Iterator[tuple[int | None, str]]:
    """The program PROG names, open for the ``with`` block: (fd, name), or (None, "")
    when ``ref`` is None.  PROG := id:N | PIN_PATH (or a .o/.bpfd file, loaded) | NAME,
    the program pinned in ``pin_dir`` (the map's, from :func:`open_map`).  An unknown
    program is ``unknown-program`` (a UsageError: exit 2)."""
    if ref is None:
        yield None, ""
        return
    from bpfdsl.cli import compiled
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.inventory import open_program

    if ref.startswith("id:"):
        try:
            pid = int(ref[3:])
        except ValueError:
            raise UsageError(error("unknown-program", f"{ref!r}: id:N needs a number")) from None
        try:
            fd = syscall.get_fd_by_id("prog", pid)
        except syscall.BpfError as e:
            if isinstance(e, PermissionError):
                raise
            raise UsageError(error("unknown-program", f"no program with id {pid}")) from None
        with fd:
            yield int(fd), syscall.prog_info(fd).name.decode(errors="replace")
        return
    if os.path.exists(ref):
        with open_program(ref, data=compiled(ref)) as p:
            yield p.fd, p.name
        return
    if pin_dir is None:
        raise UsageError(
            error(
                "unknown-program",
                f"program {ref!r}: no such pin, and no pin dir to look it up in",
                hint="give the program's pin path, id:N, or a pin dir (DIR:NAME / --pin-dir)",
            )
        )
    with open_program(pin_dir, prog=ref) as p:
        yield p.fd, ref


def emit(args: argparse.Namespace, obj: object, text: str) -> None:
    """Print ``obj`` as JSON with ``--json``, else the line ``text``."""
    print(json.dumps(obj) if args.json else text)
