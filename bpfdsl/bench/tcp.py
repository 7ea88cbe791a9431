"""TCP stream and request/response measurements through a C helper (``tcpbench.c``).

The helper ships with the package (``bpfdsl/bench/tcpbench.c``) and is compiled
with the host's C compiler (``$CC``, else ``cc``/``gcc``) into a temporary directory when a
benchmark starts; one ``send()``/``recv()`` system call per message keeps the measured
path in the kernel (see the C file for its options and output).  :class:`TcpHelper`
compiles it once and runs it; results are dicts of floats.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from importlib import resources

from bpfdsl.diagnostics import DiagnosticError, error

SOURCE = "tcpbench.c"


def _compiler() -> str | None:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return cand
    return None


class TcpHelper:
    """The compiled helper in a private temporary directory, removed by :meth:`close`.

    Raises DiagnosticError (``bench-no-cc``) when no C compiler is installed, and
    (``bench-helper``) when it does not compile."""

    def __init__(self) -> None:
        cc = _compiler()
        if cc is None:
            raise DiagnosticError(
                error(
                    "bench-no-cc",
                    "the TCP benchmarks need a C compiler for their sender/receiver helper",
                    hint="install one (apt-get install gcc) or set CC",
                )
            )
        self._dir = tempfile.mkdtemp(prefix="bpfdsl-bench-")
        self.exe = os.path.join(self._dir, "tcpbench")
        src = resources.files("bpfdsl.bench").joinpath(SOURCE)
        try:
            with resources.as_file(src) as path:
                proc = subprocess.run(
                    [cc, "-O2", "-Wall", "-o", self.exe, str(path), "-lm"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
        except BaseException:
            self.close()
            raise
        if proc.returncode != 0:
            self.close()
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise DiagnosticError(
                error("bench-helper", f"{cc} could not build {SOURCE}", note=tail or None)
            )

    def run(self, mode: str, size: int, seconds: float, **opts: str | int) -> dict[str, float]:
        """Run ``tcpbench MODE SIZE MILLIS key=value...`` (``mode``: ``stream`` or ``rr``;
        ``size`` in bytes; see tcpbench.c for ``opts``); its results as floats.
        Bounded: the helper stops after ``seconds`` and is killed 30 s later."""
        cmd = [self.exe, mode, str(size), f"{seconds * 1000:.3f}"]
        cmd += [f"{k}={v}" for k, v in opts.items() if v is not None]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            raise DiagnosticError(
                error("bench-helper", f"the TCP helper ({mode}, {size} B) did not finish")
            ) from None
        if proc.returncode != 0:
            raise DiagnosticError(
                error(
                    "bench-helper",
                    f"the TCP helper ({mode}, {size}-byte messages) failed: "
                    + (proc.stderr.strip().splitlines() or ["no output"])[-1],
                )
            )
        return {k: float(v) for k, v in (kv.split("=", 1) for kv in proc.stdout.split())}

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> TcpHelper:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
