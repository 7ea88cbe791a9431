"""bpfdsl commands run by forked children of the test process, in a network namespace.

The child runs ``bpfdsl.cli.main(argv)`` with the modules the test already imported (~20 ms
a command instead of a fresh interpreter's ~0.4 s), its stdout and stderr in pipes the
parent reads; a test can wait for a line on stderr (e.g. ``BPFDSL_TEST_PAUSE_AT``'s
``test pause at OP:STEP``), signal the child there and reap it.  Every wait is bounded;
:func:`kill_children` stops those still running (a failed test's).
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback

from bpfdsl.cli import main
from bpfdsl.kernel import netlink

_CHILDREN: list[Child] = []


class Child:
    """A bpfdsl command (``argv``, with ``env`` added) run by a forked child in the
    network namespace ``netns`` (a name under /run/netns)."""

    def __init__(self, netns: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.argv = argv
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns into pytest
            code = 99
            try:
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                os.environ.update(env or {})
                sys.stdout = os.fdopen(1, "w", closefd=False)
                sys.stderr = os.fdopen(2, "w", closefd=False)
                with netlink.in_netns(netns):
                    code = main(argv)
            except BaseException:
                code = 98  # main let an exception out: a bug, shown to the test
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(out_w)
        os.close(err_w)
        self.pid, self.out_fd, self.err_fd = pid, out_r, err_r
        self.out, self.err = b"", b""
        self.code: int | None = None
        _CHILDREN.append(self)

    def kill(self) -> None:
        """SIGKILL and reap it (a test that failed while it ran)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ChildProcessError, ProcessLookupError):
            pass
        self.code = -signal.SIGKILL

    def _read(self, timeout: float) -> None:
        r, _w, _x = select.select([self.out_fd, self.err_fd], [], [], timeout)
        for fd in r:
            data = os.read(fd, 65536)
            if fd == self.out_fd:
                self.out += data
            else:
                self.err += data

    def wait_for_err(self, text: str, timeout: float = 20) -> None:
        """Read stderr until it holds ``text`` (at most ``timeout`` s; asserts)."""
        end = time.monotonic() + timeout
        while text.encode() not in self.err and time.monotonic() < end:
            self._read(0.05)
        assert text.encode() in self.err, (self.argv, self.err.decode())

    def wait(self, timeout: float = 60) -> int:
        """Reap it (at most ``timeout`` s, then SIGKILL and AssertionError); its exit code
        (negative: the signal that ended it), with all its output read."""
        end = time.monotonic() + timeout
        while self.code is None and time.monotonic() < end:
            self._read(0.02)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
        if self.code is None:
            self.kill()
            raise AssertionError(f"{self.argv} did not end within {timeout} s")
        for _ in range(100):  # what is left in the pipes
            before = len(self.out) + len(self.err)
            self._read(0)
            if len(self.out) + len(self.err) == before:
                break
        os.close(self.out_fd)
        os.close(self.err_fd)
        return self.code

    @property
    def stderr(self) -> str:
        return self.err.decode(errors="replace")

    @property
    def stdout(self) -> str:
        return self.out.decode(errors="replace")


def kill_children() -> None:
    """SIGKILL and reap every child still running (a failed test's), before its clean-up."""
    for c in _CHILDREN:
        if c.code is None:
            c.kill()
    _CHILDREN.clear()
