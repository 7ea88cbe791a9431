"""Locks serialising the commands that change an interface's XDP program or a pin dir.

One lock per interface (network namespace + ifindex) and per pin dir (its normalised
path; a staging dir ``DIR_next_*`` shares the lock of ``DIR``): an ``flock(LOCK_EX)`` on
a file in ``/run/bpfdsl/locks`` (bpffs holds no regular files; libxdp's
``xdp_lock_acquire`` in xdp-tools lib/libxdp/libxdp.c flocks its bpffs dir, or a dir in
/run when there is none).  The holder writes its pid and command line into the file, so
a command that waits can name it.  A lock dies with its holder (the kernel drops an
flock when the last fd closes), so a killed command never leaves one behind; the
holder unlinks the file on release (a waiter that then locks the unlinked file sees
its inode is no longer the path's and tries again).

:class:`OpLocks` holds a set of them, taken in one global order (sorted names) so two
commands never wait for each other; a lock found to be needed later is tried without
waiting, and when it is busy all are released and taken again in order.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import netlink, syscall

RUN_DIR = "/run/bpfdsl"
LOCK_DIR = RUN_DIR + "/locks"
DEFAULT_TIMEOUT = 30.0  # seconds a command waits for a lock; BPFDSL_LOCK_TIMEOUT overrides
_STAGING = re.compile(r"_next_[0-9a-f]{8}$")


@dataclass(frozen=True, slots=True, order=True)
class LockKey:
    """``name``: the lock file's name (its identity and the global order); ``what``: for
    messages."""

    name: str
    what: str = field(compare=False)


def netns_inode() -> int:
    """Inode of this thread's network namespace (``/proc/thread-self/ns/net``)."""
    return os.stat("/proc/thread-self/ns/net").st_ino


def interface_key(dev: str, index: int | None = None) -> LockKey:
    """The lock of interface ``dev`` of this network namespace (ifindexes repeat across
    namespaces: the key holds the namespace's inode too).  Raises UsageError/HostError
    for an unknown interface."""
    index = netlink.ifindex(dev) if index is None else index
    ns = netns_inode()
    return LockKey(f"xdp-{ns}-{index}", f"interface {dev} (ifindex {index}, netns {ns})")


def target_of(pin_dir: str) -> str:
    """The pin dir a staging dir ``DIR_next_<8 hex>`` stands in for (else ``pin_dir``),
    as a normalised absolute path."""
    return _STAGING.sub("", os.path.normpath(os.path.abspath(pin_dir)))


def pin_dir_key(pin_dir: str) -> LockKey:
    """The lock of pin dir ``pin_dir`` (shared with its ``_next_`` staging dirs)."""
    path = target_of(pin_dir)
    digest = hashlib.sha256(path.encode()).hexdigest()[:24]
    return LockKey(f"pin-{digest}", f"pin dir {path}")


def timeout_from_env() -> float:
    """``BPFDSL_LOCK_TIMEOUT`` (seconds, 0: do not wait) or :data:`DEFAULT_TIMEOUT`."""
    raw = os.environ.get("BPFDSL_LOCK_TIMEOUT", "")
    try:
        return max(0.0, float(raw)) if raw else DEFAULT_TIMEOUT
    except ValueError:
        return DEFAULT_TIMEOUT


def holder(key: LockKey) -> str:
    """Who holds ``key`` by what its file says (``pid N (COMMAND)``), or ``""``."""
    try:
        with open(os.path.join(LOCK_DIR, key.name + ".lock")) as f:
            text = f.read(4096)
    except OSError:
        return ""
    fields = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)
    pid, cmd = fields.get("pid", ""), fields.get("cmd", "")
    if not pid:
        return ""
    return f"pid {pid} (`{cmd}`)" if cmd else f"pid {pid}"


def is_held(name: str) -> bool:
    """True when a process holds the lock ``name`` (a :class:`LockKey` name) now.  Read
    only: no lock file is made (what ``apply --plan`` may do); a lock this process holds
    counts as held too (flock is per open file)."""
    path = os.path.join(LOCK_DIR, name + ".lock")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False  # released (the holder unlinks it), or never taken
    except PermissionError:
        raise syscall.NoPermission(f"reading the lock {path}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        raise
    finally:
        os.close(fd)  # drops the shared lock taken just now
    return False


class LockBusy(DiagnosticError):
    """A lock stayed held by another command for the whole wait (exit 1: refused)."""


def _busy(key: LockKey, waited: float) -> LockBusy:
    who = holder(key) or "another process"
    return LockBusy(
        error(
            "locked",
            f"{key.what} is locked by {who}; waited {waited:.0f} s",
            hint="another bpfdsl command is changing it: let it finish and try again "
            "(BPFDSL_LOCK_TIMEOUT=SECONDS waits longer)",
        )
    )


def _ensure_lock_dir() -> None:
    try:
        os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    except PermissionError:
        raise syscall.NoPermission(f"creating {LOCK_DIR}") from None


def _try_lock(key: LockKey) -> int | None:
    """An fd holding ``key`` (the file's inode is the path's), or None when it is busy."""
    path = os.path.join(LOCK_DIR, key.name + ".lock")
    for _ in range(100):  # the holder unlinked the file meanwhile: open the new one
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except PermissionError:
            raise syscall.NoPermission(f"locking {key.what}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return None
            raise
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            info = f"pid={os.getpid()}\ncmd={_command_line()}\nsince={time.time():.3f}\n"
            os.ftruncate(fd, 0)
            os.pwrite(fd, info.encode(), 0)
            return fd
        os.close(fd)
    raise OSError(errno.EAGAIN, f"cannot lock {path}")


def _command_line() -> str:
    argv = sys.argv[1:] if sys.argv and sys.argv[0].endswith(("bpfdsl", "__main__.py")) else []
    return " ".join(["bpfdsl", *argv])[:200].replace("\n", " ")


class OpLocks:
    """Locks held by one command (a context manager releasing them all on exit)."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout_from_env() if timeout is None else timeout
        self.held: dict[LockKey, int] = {}
        # called while waiting (e.g. intent.Critical.check: a signal held back during an
        # operation stops the wait); may raise
        self.poll: Callable[[], None] | None = None

    def __enter__(self) -> OpLocks:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_all()

    def names(self) -> list[str]:
        """Names of the locks held (what an intent record lists)."""
        return sorted(k.name for k in self.held)

    def acquire(self, keys: list[LockKey]) -> None:
        """Take ``keys`` (waiting, bounded) in the global order; all locks are held
        after it.  Raises LockBusy naming the holder after the timeout."""
        _ensure_lock_dir()
        for key in sorted(set(keys)):
            if key not in self.held:
                self.held[key] = self._wait(key)

    def _wait(self, key: LockKey) -> int:
        start = time.monotonic()
        said = False
        while True:
            fd = _try_lock(key)
            if fd is not None:
                return fd
            waited = time.monotonic() - start
            if waited >= self.timeout:
                raise _busy(key, waited)
            if not said:
                who = holder(key) or "another process"
                print(
                    f"bpfdsl: waiting for {key.what}: locked by {who} (up to {self.timeout:.0f} s)",
                    file=sys.stderr,
                    flush=True,
                )
                said = True
            if self.poll is not None:
                self.poll()
            time.sleep(0.02)

    def try_add(self, keys: list[LockKey]) -> bool:
        """Take ``keys`` too without waiting; True when they are held now.  False: one
        was busy and nothing was added (the caller may :meth:`reacquire`)."""
        _ensure_lock_dir()
        got: dict[LockKey, int] = {}
        for key in sorted(set(keys) - set(self.held)):
            fd = _try_lock(key)
            if fd is None:
                for k, f in got.items():
                    _release(k, f)
                return False
            got[key] = fd
        self.held.update(got)
        return True

    def add(self, keys: list[LockKey]) -> bool:
        """Hold ``keys`` too.  Returns True when the locks held before stayed held
        throughout; False when they were released and taken again in order (what
        the caller read under them may have changed: read it again)."""
        if self.try_add(keys):
            return True
        want = list(self.held) + list(keys)
        self.release_all()
        self.acquire(want)
        return False

    def release(self, keys: list[LockKey]) -> None:
        """Release ``keys`` (those held)."""
        for key in keys:
            fd = self.held.pop(key, None)
            if fd is not None:
                _release(key, fd)

    def release_all(self) -> None:
        """Release every lock held."""
        for key in sorted(self.held, reverse=True):
            _release(key, self.held.pop(key))


def _release(key: LockKey, fd: int) -> None:
    try:
        os.unlink(os.path.join(LOCK_DIR, key.name + ".lock"))  # still ours: we hold it
    except OSError:
        pass
    os.close(fd)
