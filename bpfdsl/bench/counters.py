"""What the benchmarks count, from the kernel's own counters (no code in the measured path).

- :func:`xdp_counts`: a veth's XDP counters (``ethtool -S``, :mod:`bpfdsl.kernel.ethtool`):
  frames its XDP program ran on and its verdicts.  veth counts them whatever program is
  attached, so the program under test needs no counters of its own (drivers/net/veth.c:
  ``xdp_packets`` per frame, ``xdp_drops`` for XDP_DROP and XDP_ABORTED, ``xdp_tx``,
  ``xdp_redirect``, ``drops`` for frames it could not deliver; XDP_PASS is the rest).
- :class:`CpumapCounter`: the ``xdp:xdp_cpumap_kthread`` tracepoint of one cpumap
  (include/trace/events/xdp.h), as xdp-bench's ``redirect-cpu`` reads it: frames the
  remote CPUs' kthreads processed, dropped, and the verdicts of the entry program
  (``struct xdp_cpumap_stats`` {redirect, pass, drop}).  A raw tracepoint program of 30
  instructions adds them up per CPU; it runs once per kthread batch (up to 8 frames,
  kernel/bpf/cpumap.c CPUMAP_BATCH), filtered on the map's id.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, fields

from bpfdsl.abi import insn as I
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ADD, BPF_JEQ, BPF_JNE
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.kernel import ethtool
from bpfdsl.kernel import syscall as S

HELPER_MAP_LOOKUP_ELEM, HELPER_PROBE_READ_KERNEL = 1, 113  # enum bpf_func_id


@dataclass(slots=True)
class XdpCounts:
    """XDP counters of one interface (frames, summed over its rx queues)."""

    packets: int = 0
    drop: int = 0
    tx: int = 0
    redirect: int = 0
    tx_errors: int = 0
    rx_drops: int = 0  # frames veth could not deliver (a failed redirect, no skb for PASS)
    xmit: int = 0  # frames other devices sent out of this one with ndo_xdp_xmit
    xmit_errors: int = 0

    @property
    def passed(self) -> int:
        """XDP_PASS: frames the program ran on minus the other verdicts (XDP_TX counts in
        ``tx`` when sent, in ``tx_errors`` when not) and minus the frames veth dropped."""
        return self.packets - self.drop - self.tx - self.tx_errors - self.redirect - self.rx_drops

    def __sub__(self, other: XdpCounts) -> XdpCounts:
        return XdpCounts(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


_VETH_STATS = {
    "xdp_packets": "packets",
    "xdp_drops": "drop",
    "xdp_tx": "tx",
    "xdp_redirect": "redirect",
    "xdp_tx_errors": "tx_errors",
    "drops": "rx_drops",
    "xdp_xmit": "xmit",
    "xdp_xmit_errors": "xmit_errors",
}


def xdp_counts(dev: str) -> XdpCounts:
    """The XDP counters of veth ``dev`` (in the calling thread's network namespace), summed
    over its ``rx_queue_N_*`` / ``tx_queue_N_*`` statistics."""
    out = XdpCounts()
    for name, value in ethtool.driver_stats(dev).items():
        _q, _sep, tail = name.partition("_queue_")
        stat = tail.partition("_")[2]
        attr = _VETH_STATS.get(stat)
        if attr is not None:
            setattr(out, attr, getattr(out, attr) + value)
    return out


@dataclass(slots=True)
class CpumapCounts:
    """Frames of one cpumap's kthreads: ``processed`` (dequeued), ``drops`` (could not be
    turned into an skb), and the entry program's verdicts (``redirect``, ``passed``,
    ``dropped``; all zero without an entry program)."""

    processed: int = 0
    drops: int = 0
    redirect: int = 0
    passed: int = 0
    dropped: int = 0

    def __sub__(self, other: CpumapCounts) -> CpumapCounts:
        return CpumapCounts(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))


def _assemble(items: list) -> bytes:
    """Encode instructions; a ``str`` item is a label and a jump given as
    ``(constructor, args..., "label")`` gets the slot offset to that label."""
    slots, at, pending = {}, 0, []
    for it in items:
        if isinstance(it, str):
            slots[it] = at
            continue
        pending.append((at, it))
        at += 2 if (isinstance(it, I.Insn) and it.width == 2) else 1
    out = []
    for pos, it in pending:
        if isinstance(it, tuple):
            make, *args, label = it
            it = make(*args, slots[label] - pos - 1)
        out.append(it)
    return I.encode(out)


def cpumap_kthread_program(map_id: int, counts_fd: int) -> bytes:
    """The raw tracepoint program of :class:`CpumapCounter`.  Arguments of
    ``xdp_cpumap_kthread`` as u64 slots of the context: map_id, processed, drops, sched,
    xdp_stats (a kernel pointer, read with bpf_probe_read_kernel)."""
    r0, r1, r2, r3, r6, r7, r10 = 0, 1, 2, 3, 6, 7, 10
    ops = [
        I.mov64_reg(r6, r1),
        I.ldx_mem(8, r2, r6, 0),
        (I.jmp32_imm, BPF_JNE, r2, map_id, "out"),
        I.st_mem(8, r10, -24, 0),
        I.st_mem(4, r10, -16, 0),
        I.mov64_reg(r1, r10),
        I.alu64_imm(BPF_ADD, r1, -24),
        I.mov64_imm(r2, 12),  # sizeof(struct xdp_cpumap_stats)
        I.ldx_mem(8, r3, r6, 32),
        I.call(HELPER_PROBE_READ_KERNEL),
        I.st_mem(4, r10, -4, 0),
        I.mov64_reg(r2, r10),
        I.alu64_imm(BPF_ADD, r2, -4),
        I.ld_map_fd(r1, counts_fd),
        I.call(HELPER_MAP_LOOKUP_ELEM),
        (I.jmp_imm, BPF_JEQ, r0, 0, "out"),
        I.mov64_reg(r7, r0),
    ]
    # value[0] += processed, value[1] += drops (u32 arguments), value[2..4] += stats
    for slot, load in (
        (0, I.ldx_mem(8, r1, r6, 8)),
        (1, I.ldx_mem(8, r1, r6, 16)),
        (2, I.ldx_mem(4, r1, r10, -24)),
        (3, I.ldx_mem(4, r1, r10, -20)),
        (4, I.ldx_mem(4, r1, r10, -16)),
    ):
        ops += [
            load,
            I.mov32_reg(r1, r1),
            I.ldx_mem(8, r2, r7, 8 * slot),
            I.alu64_reg(BPF_ADD, r2, r1),
            I.stx_mem(8, r7, r2, 8 * slot),
        ]
    ops += ["out", I.mov64_imm(r0, 0), I.exit_()]
    return _assemble(ops)


class CpumapCounter:
    """Counts the frames of cpumap ``map_fd`` while open (``xdp:xdp_cpumap_kthread``).

    :meth:`read` returns the totals so far (:class:`CpumapCounts`); :meth:`close`
    detaches the tracepoint and frees the map and program.  Needs root (a tracing
    program: CAP_BPF + CAP_PERFMON)."""

    def __init__(self, map_fd: int | S.Fd) -> None:
        self.map_id = int(S.map_info(map_fd).id)
        self._fds: list[S.Fd] = []
        try:
            self.counts = self._keep(
                S.map_create(MapType.PERCPU_ARRAY, 4, 40, 1, name="bench_cpumap")
            )
            code = cpumap_kthread_program(self.map_id, int(self.counts))
            prog, _log = S.prog_load(ProgramType.RAW_TRACEPOINT, code, "GPL", name="bench_cpumap")
            self._keep(prog)
            self._keep(S.raw_tracepoint_open("xdp_cpumap_kthread", prog))
        except BaseException:
            self.close()
            raise

    def _keep(self, fd: S.Fd) -> S.Fd:
        self._fds.append(fd)
        return fd

    def read(self) -> CpumapCounts:
        raw = S.map_lookup(self.counts, struct.pack("<I", 0), S.percpu_value_size(40)) or b""
        tot = [0] * 5
        for cpu in range(len(raw) // 40):
            for i, v in enumerate(struct.unpack_from("<5Q", raw, 40 * cpu)):
                tot[i] += v
        return CpumapCounts(*tot)

    def close(self) -> None:
        for fd in reversed(self._fds):
            fd.close()
        self._fds.clear()

    def __enter__(self) -> CpumapCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
