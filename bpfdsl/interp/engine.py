"""The interpreter as a ``bpfdsl run`` engine (see :mod:`bpfdsl.testrun`, ``ENGINES``).

``InterpEngine(spec, config=...)`` has the kernel engine's shape: ``run(program, packet,
repeat) -> RunResult(retval, data_out, duration_ns)`` and ``close()``.  It also runs the
program kinds BPF_PROG_TEST_RUN refuses (xdp(cpumap), xdp(devmap), sk_msg).
"""

from __future__ import annotations

from typing import Any

from .ctx import ETH_HLEN
from .program import InterpCollection


class InterpEngine:
    """Userspace engine over one object's :class:`~bpfdsl.objfile.CollectionSpec`.

    ``collection`` gives access to the in-memory maps (fill them before running).
    Frames shorter than 14 bytes are skipped, as on the kernel; frames over 3520 bytes
    keep the rest in XDP frags, as a test run does.
    """

    name = "interp"

    def __init__(self, spec: Any, *, config: dict | None = None, **kw: Any) -> None:
        self.collection = InterpCollection(spec, config=config or {}, **kw)
        self.warnings: list[str] = []  # nothing to report: no kernel state is touched

    def run(self, program: str, packet: bytes, repeat: int = 1):
        """Run ``program`` on ``packet`` ``repeat`` times (maps keep their changes);
        the result of the last run, ``duration_ns`` = mean wall time per run."""
        from bpfdsl.testrun import PacketSkipped, RunResult  # noqa: PLC0415 (layer above)

        prog = self.collection.programs[program]
        if len(packet) < ETH_HLEN and prog.kind and prog.kind.ctx == "xdp_md":
            raise PacketSkipped(  # the same frames the kernel engine refuses
                f"{len(packet)} bytes: XDP runs only on frames of at least {ETH_HLEN} bytes"
            )
        total = 0
        res = None
        for _ in range(max(1, repeat)):
            res = prog.run(packet)
            total += res.duration_ns
        assert res is not None
        return RunResult(res.retval, res.data_out, total // max(1, repeat))

    def close(self) -> None:
        pass
