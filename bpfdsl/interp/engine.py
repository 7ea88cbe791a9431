"""The interpreter as a ``bpfdsl run`` engine (see :mod:`bpfdsl.testrun`, ``ENGINES``).

``InterpEngine(spec, config=...)`` has the kernel engine's shape: ``run(program, packet,
repeat, ctx) -> RunResult(retval, data_out, duration_ns, outcome)`` and ``close()``.  It
also runs the program kinds BPF_PROG_TEST_RUN refuses (xdp(cpumap), xdp(devmap), sk_msg,
sock_ops), with the context fields ``ctx`` gives (:func:`bpfdsl.runinfo.parse_ctx`).
"""

from __future__ import annotations

from typing import Any

from bpfdsl.uapi import SockOpsOp

from .ctx import ETH_HLEN, SockInfo
from .maps_slot import SlotMap
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
        self.spec = spec
        self.ncpus = self.collection.env.ncpus

    def run(self, program: str, packet: bytes, repeat: int = 1, ctx: dict | None = None):
        """Run ``program`` on ``packet`` ``repeat`` times (maps keep their changes);
        the result of the last run, ``duration_ns`` = mean wall time per run.  ``ctx``:
        context fields -- XDP ``ingress_ifindex``/``rx_queue_index``/``egress_ifindex``;
        sk_msg the socket (``family``, ``*_ip4``/``*_ip6``, ``*_port``); sock_ops also
        ``op`` (default BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB), ``args`` and numeric fields."""
        from bpfdsl.testrun import PacketSkipped, RunResult  # noqa: PLC0415 (layer above)

        prog = self.collection.programs[program]
        kind = prog.kind
        ctx = ctx or {}
        if len(packet) < ETH_HLEN and kind and kind.ctx == "xdp_md":
            raise PacketSkipped(  # the same frames the kernel engine refuses
                f"{len(packet)} bytes: XDP runs only on frames of at least {ETH_HLEN} bytes"
            )
        if kind is not None and kind.ctx == "sk_msg_md":
            sock = SockInfo.from_fields(ctx)
            call = lambda: prog.run_sk_msg(packet, sock)  # noqa: E731
        elif kind is not None and kind.ctx == "bpf_sock_ops":
            from bpfdsl.runinfo import sock_ops_fields  # noqa: PLC0415

            sock = SockInfo.from_fields(ctx)
            op = ctx.get("op", int(SockOpsOp.ACTIVE_ESTABLISHED_CB))
            args, fields = tuple(ctx.get("args", ())), sock_ops_fields(ctx)
            call = lambda: prog.run_sock_ops(op, sock, args, fields)  # noqa: E731
        else:
            xdp = {
                k: ctx[k]
                for k in ("ingress_ifindex", "rx_queue_index", "egress_ifindex")
                if k in ctx
            }
            call = lambda: prog.run(packet, **xdp)  # noqa: E731
        total = 0
        res = None
        for _ in range(max(1, repeat)):
            res = call()
            total += res.duration_ns
        assert res is not None
        outcome = {
            "redirect": res.redirect,
            "redirect_miss": res.redirect_miss,
            "apply_bytes": res.apply_bytes,
            "cork_bytes": res.cork_bytes,
            "reply": res.reply,
            "cb_flags": res.cb_flags,
            "trace": res.trace,
        }
        return RunResult(res.retval, res.data_out, total // max(1, repeat), outcome)

    def snapshot_maps(self, limit: int = 4096) -> dict[str, dict[bytes, Any] | None]:
        """Contents of the ``.maps`` maps as BPF_MAP_LOOKUP_ELEM would return them (per-CPU
        values concatenated, 8-byte aligned); redirect/socket maps: their entries (bytes
        or socket objects).  None for a map of more than ``limit`` entries."""
        out: dict[str, dict[bytes, Any] | None] = {}
        for name, m in self.collection.maps.items():
            if isinstance(m, SlotMap):
                out[name] = dict(m.slots) if len(m.slots) <= limit else None
            elif m.max_entries <= limit or len(m.keys()) <= limit:
                out[name] = m.kernel_dump()
            else:
                out[name] = None
        return out

    def restore_maps(self, snapshot: dict[str, dict[bytes, Any] | None]) -> None:
        """Make the maps hold exactly ``snapshot`` (as :meth:`snapshot_maps` or the kernel
        engine's ``snapshot_maps`` give it: per-CPU values concatenated, 8-byte aligned);
        maps absent or None in it keep their contents."""
        for name, entries in snapshot.items():
            m = self.collection.maps.get(name)
            if m is None or entries is None:
                continue
            if isinstance(m, SlotMap):
                m.slots = dict(entries)
                continue
            for key in m.keys():
                if key not in entries and m.remove(key) is False:
                    m.set(
                        key,
                        bytes(m.value_size) if not m.percpu else [bytes(m.value_size)] * m.ncpus,
                    )
            for key, value in entries.items():
                self.set_map(name, key, value)

    def set_map(self, name: str, key: bytes, value: Any) -> None:
        """Userspace update of map ``name`` (``value``: bytes, per-CPU maps all CPUs'
        values concatenated as the kernel takes them, or a socket for socket maps)."""
        m = self.collection.maps[name]
        if m.percpu and isinstance(value, (bytes, bytearray)):
            step = (m.value_size + 7) & ~7
            value = [bytes(value[i * step : i * step + m.value_size]) for i in range(m.ncpus)]
        m.set(key, value)

    def close(self) -> None:
        pass
