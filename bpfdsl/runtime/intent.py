"""Intent records and signal handling of the commands that change attachments and pins.

Before a command changes anything (attach, replace, detach, load, unload) it writes an
intent record, a JSON file in ``/run/bpfdsl/intents`` naming the operation, the
interface (namespace inode and name, ifindex), the pin dirs, what was attached and the
step reached (as bpfman records what it means to do and reconciles).  The record is
removed when the operation is complete.  A record whose writer is gone (its locks are
free: :mod:`bpfdsl.runtime.oplock`) marks an operation cut short by SIGKILL or a crash;
the next command repairs it (:mod:`bpfdsl.runtime.repair`).

SIGINT, SIGTERM and SIGHUP are blocked while an operation runs (:class:`Critical`): at
each step boundary before the point of no return a pending one rolls the operation back
(:class:`Interrupted`, exit 128 + signal number); after it the operation is finished
first.  ``BPFDSL_TEST_PAUSE_AT=STEP`` (tests only) pauses at step STEP (at most 30 s,
less when a signal arrives) so a test can kill the command there.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from types import TracebackType

from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel.netlink import NETNS_RUN_DIR
from bpfdsl.runtime.oplock import RUN_DIR, OpLocks, netns_inode

INTENT_DIR = RUN_DIR + "/intents"
HANDLED = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


class Interrupted(DiagnosticError):
    """A signal stopped an operation before its point of no return: it was rolled back.
    ``exit_code`` is 128 + the signal's number (130 SIGINT, 143 SIGTERM)."""

    def __init__(self, signo: int, what: str) -> None:
        name = signal.Signals(signo).name
        super().__init__(error("interrupted", f"{name} received: {what}"))
        self.exit_code = 128 + signo
        self.signo = signo


def netns_name(inode: int) -> str | None:
    """The name under /run/netns (as ``ip netns identify``) of the namespace ``inode``."""
    try:
        names = sorted(os.listdir(NETNS_RUN_DIR))
    except OSError:
        return None
    for n in names:
        try:
            if os.stat(os.path.join(NETNS_RUN_DIR, n)).st_ino == inode:
                return n
        except OSError:
            continue
    return None


class Intent:
    """One operation's record (``fields``: JSON-ready), written at :meth:`begin`,
    updated at each :meth:`step`, removed at :meth:`done`."""

    def __init__(self, op: str, locks: OpLocks, **fields: object) -> None:
        self.op = op
        self.id = uuid.uuid4().hex[:12]
        self.path = os.path.join(INTENT_DIR, f"{op}-{self.id}.json")
        ns = netns_inode()
        self.record: dict = {
            "op": op,
            "pid": os.getpid(),
            "started": time.time(),
            "netns": ns,
            "netns_name": netns_name(ns),
            "locks": locks.names(),
            "step": "begin",
            **fields,
        }
        self.written = False

    def begin(self) -> None:
        """Write the record (before anything is changed)."""
        os.makedirs(INTENT_DIR, mode=0o700, exist_ok=True)
        self._write()
        self.written = True
        pause_point(f"{self.op}:begin")

    def step(self, name: str, **updates: object) -> None:
        """Record that step ``name`` is done (with ``updates`` to the fields)."""
        self.record["step"] = name
        self.record.update(updates)
        if self.written:
            self._write()
        pause_point(f"{self.op}:{name}")

    def update(self, **fields: object) -> None:
        """Set ``fields`` in the record and write it (no step: what the operation is
        about to change, written before it changes it)."""
        self.record.update(fields)
        if self.written:
            self._write()

    def pinning_by_name(self, path: str, map_id: int) -> None:
        """Record, before it is pinned, that this operation pins the map ``map_id`` it
        created by name at ``path`` (``by_name_pins``: path -> map id; a repair removes
        such a pin only while it still holds that map, so never one that existed before
        or that another program pinned later)."""
        pinned = self.record.setdefault("by_name_pins", {})
        pinned[path] = map_id
        if self.written:
            self._write()

    def _write(self) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.record, f)
        os.replace(tmp, self.path)

    def done(self) -> None:
        """Remove the record: the operation is complete (or rolled back)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        self.written = False


def read_intents() -> list[tuple[str, dict]]:
    """(path, record) of every intent record, oldest first (unreadable ones skipped)."""
    try:
        names = sorted(n for n in os.listdir(INTENT_DIR) if n.endswith(".json"))
    except OSError:
        return []
    out = []
    for n in names:
        path = os.path.join(INTENT_DIR, n)
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(rec, dict):
            out.append((path, rec))
    out.sort(key=lambda pr: float(pr[1].get("started", 0)))
    return out


def _pending_signals() -> set[int]:
    return set(signal.sigpending()) & HANDLED


def pause_point(name: str) -> None:
    """Tests only: stop here while ``BPFDSL_TEST_PAUSE_AT`` names ``name`` (``OP:STEP``),
    at most 30 s and not after a handled signal arrived; says so on stderr first."""
    want = os.environ.get("BPFDSL_TEST_PAUSE_AT")
    if not want or name not in want.split(","):
        return
    print(f"bpfdsl: test pause at {name}", file=sys.stderr, flush=True)
    end = time.monotonic() + 30
    while time.monotonic() < end and not _pending_signals():
        time.sleep(0.01)


class Critical:
    """Blocks SIGINT/SIGTERM/SIGHUP for the body (main thread).  :meth:`check` raises
    :class:`Interrupted` for a pending one (call it only where rolling back is still
    possible, and roll back on it); on exit pending signals are taken (``received``)
    so that the finished operation is not cut short (:meth:`note` says they came)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._old: set[int] | None = None

    def __enter__(self) -> Critical:
        self._old = set(signal.pthread_sigmask(signal.SIG_BLOCK, HANDLED))
        return self

    def check(self, what: str) -> None:
        """Raise Interrupted (the signal taken) when one is pending."""
        pending = _pending_signals()
        if pending:
            signo = min(pending)
            signal.sigtimedwait([signo], 0)
            raise Interrupted(signo, what)

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for signo in sorted(_pending_signals()):
            if signal.sigtimedwait([signo], 0) is not None:
                self.received.append(signo)
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)

    def note(self, what: str) -> str | None:
        """A note for stderr when a signal arrived after the point of no return."""
        if not self.received:
            return None
        names = ", ".join(signal.Signals(s).name for s in self.received)
        return f"bpfdsl: {names} received during the operation: {what}"
