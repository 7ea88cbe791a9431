"""Programs and maps of one object, ready for the userspace machine (no kernel).

Takes a :class:`bpfdsl.obj.collection.CollectionSpec` (``read_object``), creates an in-memory
map per ``.maps`` entry and an array map per data section (``.rodata`` read-only for
programs, with ``config`` values written into its VARs like the loader does), resolves
each program's ld_imm64 relocations to those maps, and runs programs on frames or
messages.  :func:`load_object` does it all from ELF bytes or a path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bpfdsl.abi.insn import slot_offsets
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramKind, ProgramType, SockOpsOp
from bpfdsl.diagnostics import Span, UsageError, error
from bpfdsl.interp.ctx import SkMsgContext, SockInfo, SockOpsContext, XdpContext
from bpfdsl.interp.kfuncs import IMPLS as KFUNC_IMPLS
from bpfdsl.interp.machine import DEFAULT_BUDGET, Machine
from bpfdsl.interp.maps import Map, ProgArrayMap, make_map
from bpfdsl.interp.memory import Ptr, Region
from bpfdsl.interp.state import Env
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.config import config_bytes


def _section(kind: ProgramKind | None) -> str:
    return kind.section if kind is not None else "unknown kind"


def _value0(m: Map) -> Region:
    """The value of a global-data map (an array of one entry: key 0 always exists)."""
    v = m.lookup(bytes(4))
    assert v is not None
    return v


@dataclass
class InterpResult:
    """One run: ``retval`` (r0 as u32, what BPF_PROG_TEST_RUN reports), ``data_out``
    (XDP: metadata + packet after the program; sk_msg: the message), ``redirect`` (XDP:
    ``(map name or "ifindex", key, flags)`` of the last successful redirect; sk_msg:
    ``(map name, key bytes, socket, flags)``), sk_msg ``apply_bytes``/``cork_bytes``,
    ``trace`` (bpf_trace_printk lines), ``duration_ns`` (wall time of the run);
    ``redirect_miss``: ``(map name, key, flags, why)`` of the last redirect helper call
    that found no target (``why`` "empty": no entry, the fallback was taken; "flags":
    flags the kernel refuses); sock_ops ``reply`` (``bpf_sock_ops.reply`` after the run)
    and ``cb_flags`` (``bpf_sock_ops_cb_flags`` after ``sock_ops_cb_flags_set``)."""

    retval: int
    data_out: bytes
    redirect: tuple | None = None
    apply_bytes: int = 0
    cork_bytes: int = 0
    trace: list[str] = field(default_factory=list)
    duration_ns: int = 0
    redirect_miss: tuple | None = None
    reply: int = 0
    cb_flags: int = 0


class InterpProgram:
    """One program of a collection; ``run`` executes it on a frame (XDP) or message
    (sk_msg).  Raises :class:`~bpfdsl.interp.machine.InterpError` on a fault."""

    def __init__(self, spec: Any, maps: dict[str, Map], data: dict[str, Map], env: Env):
        self.name: str = spec.name
        self.spec = spec
        self.kind: ProgramKind | None = spec.kind
        resolved: dict[int, object] = {}
        for rel in spec.relocations:
            if rel.kind == "map":
                resolved[rel.insn_idx] = maps[rel.symbol]
            elif rel.kind == "data":
                resolved[rel.insn_idx] = Ptr(_value0(data[rel.symbol]), rel.offset)
            elif rel.kind == "kfunc" and rel.symbol in KFUNC_IMPLS:
                resolved[rel.insn_idx] = KFUNC_IMPLS[rel.symbol]
        self._slots = slot_offsets(spec.insns)
        self.machine = Machine(spec.insns, env=env, resolved=resolved, where=self.where)

    def where(self, i: int) -> Span | None:
        """Source position of instruction index ``i`` from .BTF.ext line info."""
        li = self.spec.line_at(self._slots[i]) if hasattr(self.spec, "line_at") else None
        if li is None or not li.line:
            return None
        return Span(li.file or "<object>", li.line, max(1, li.col))

    @property
    def env(self) -> Env:
        return self.machine.env

    def run_xdp(
        self,
        packet: bytes,
        *,
        ingress_ifindex: int = 1,
        rx_queue_index: int = 0,
        egress_ifindex: int = 0,
        meta: bytes = b"",
        hints: Mapping[str, int] | None = None,
    ) -> InterpResult:
        """Run on one Ethernet frame (wire order) as BPF_PROG_TEST_RUN would (ingress
        ifindex 1 = loopback, queue 0); devmap programs see ``egress_ifindex``.  ``hints``:
        the RX hints the metadata kfuncs return (:data:`bpfdsl.interp.kfuncs.HINTS`, e.g.
        ``{"rx_hash": 0x1234}``); without them the kfuncs return -EOPNOTSUPP."""
        attach = self.kind.attach_type if self.kind else AttachType.XDP
        ctx = XdpContext(
            packet,
            attach=attach,
            ingress_ifindex=ingress_ifindex,
            rx_queue_index=rx_queue_index,
            egress_ifindex=egress_ifindex,
            meta=meta,
            hints=hints,
        )
        t0 = time.perf_counter_ns()
        r0 = self.machine.run(ctx)
        dt = time.perf_counter_ns() - t0
        m = self.machine
        return InterpResult(
            r0 & 0xFFFFFFFF,
            ctx.data_out(),
            m.redirect,
            trace=m.trace,
            duration_ns=dt,
            redirect_miss=m.redirect_miss,
        )

    def run_sk_msg(self, message: bytes, sock: SockInfo | None = None) -> InterpResult:
        """Run on one message sent on a socket described by ``sock``."""
        ctx = SkMsgContext(message, sock)
        t0 = time.perf_counter_ns()
        r0 = self.machine.run(ctx)
        dt = time.perf_counter_ns() - t0
        return InterpResult(
            r0 & 0xFFFFFFFF,
            ctx.data_out(),
            ctx.redirect,
            ctx.apply_bytes,
            ctx.cork_bytes,
            self.machine.trace,
            dt,
            redirect_miss=ctx.redirect_miss,
        )

    def run_sock_ops(
        self,
        op: int,
        sock: SockInfo | None = None,
        args: tuple[int, ...] = (),
        fields: dict[str, int] | None = None,
    ) -> InterpResult:
        """Run the sock_ops callback ``op`` (``prog_types.SockOpsOp``) for ``sock``; ``args`` and
        ``fields`` as :class:`SockOpsContext` takes them.  ``retval`` is r0 (1: the kernel
        uses ``reply``; 0: the callback fails with -EPERM), ``reply``/``cb_flags`` as the
        program left them (``apply_bytes`` also carries ``reply``, as it always did)."""
        ctx = SockOpsContext(op, sock, args, fields)
        t0 = time.perf_counter_ns()
        r0 = self.machine.run(ctx)
        dt = time.perf_counter_ns() - t0
        return InterpResult(
            r0 & 0xFFFFFFFF,
            b"",
            None,
            ctx.reply,
            0,
            self.machine.trace,
            dt,
            reply=ctx.reply,
            cb_flags=ctx.cb_flags,
        )

    def run(self, data: bytes, **kw: Any) -> InterpResult:
        """:meth:`run_sk_msg` for sk_msg programs, else :meth:`run_xdp`."""
        if self.kind is not None and self.kind.program_type == ProgramType.SK_MSG:
            return self.run_sk_msg(data, **kw)
        if self.kind is not None and self.kind.program_type == ProgramType.SOCK_OPS:
            return self.run_sock_ops(kw.pop("op", SockOpsOp.ACTIVE_ESTABLISHED_CB), **kw)
        if self.kind is not None and self.kind.program_type != ProgramType.XDP:
            raise UsageError(
                error(
                    "no-interp",
                    f"program {self.name!r} ({self.kind.section}): the interpreter runs "
                    "XDP, sk_msg and sock_ops programs only",
                )
            )
        return self.run_xdp(data, **kw)


class InterpCollection:
    """All programs and maps of one object.  ``maps``: by name (the ``.maps`` ones);
    ``data``: data sections as one-entry array maps (key 0); ``env``: shared clock/CPU."""

    def __init__(
        self,
        spec: Any,
        *,
        config: dict[str, int | bytes] | None = None,
        ncpus: int | None = None,
        seed: int = 0,
        budget: int = DEFAULT_BUDGET,
    ) -> None:
        n = ncpus or os.cpu_count() or 1
        self.env = Env(ncpus=n, seed=seed)
        self.maps: dict[str, Map] = {}
        for name, ms in spec.maps.items():
            try:
                self.maps[name] = make_map(
                    name, ms.map_type, ms.key_size, ms.value_size, ms.max_entries, ms.map_flags, n
                )
            except ValueError as e:
                raise UsageError(error("no-interp", str(e))) from None
        self.data: dict[str, Map] = {}
        for name, ds in spec.data_sections.items():
            dm = make_map(name, MapType.ARRAY, 4, max(1, len(ds.data)), 1, 0, n)
            _value0(dm).buf[: len(ds.data)] = ds.data
            self.data[name] = dm
        self._configure(spec, config or {})
        for name, ds in spec.data_sections.items():
            if ds.readonly:
                _value0(self.data[name]).writable = False
        self.programs = {
            name: InterpProgram(ps, self.maps, self.data, self.env)
            for name, ps in spec.programs.items()
        }
        for p in self.programs.values():
            p.machine.budget = budget
        self._fill_prog_arrays(spec)

    def _fill_prog_arrays(self, spec: Any) -> None:
        """Put the programs a prog_array's ``.maps`` slots name into it, as the loader
        does; like the kernel, a prog_array takes programs of one kind only (type,
        attach type, frags: kernel/bpf/core.c bpf_prog_map_compatible)."""
        for name, ms in spec.maps.items():
            m = self.maps[name]
            if not isinstance(m, ProgArrayMap):
                continue
            for idx, target in sorted(ms.values.items()):
                self.set_prog_array(name, idx, target)

    def set_prog_array(self, map_name: str, index: int, program: str) -> None:
        """Userspace: put program ``program`` of this object into slot ``index`` of the
        prog_array ``map_name``.  Raises UsageError for an unknown program or map, a slot
        past the end, or a program of another kind than the map's others."""
        m = self.maps.get(map_name)
        if not isinstance(m, ProgArrayMap):
            raise UsageError(error("bad-map-value", f"no prog_array named {map_name!r}"))
        prog = self.programs.get(program)
        if prog is None:
            raise UsageError(
                error(
                    "bad-map-value",
                    f"map '{map_name}' slot {index}: unknown program '{program}'",
                    hint="programs: " + ", ".join(sorted(self.programs)),
                )
            )
        owner = next(iter(m.slots.values()), None)
        if owner is not None and owner.kind is not prog.kind:
            raise UsageError(
                error(
                    "bad-map-value",
                    f"map '{map_name}' slot {index} = '{program}': a prog_array holds "
                    f"programs of one kind ({_section(owner.kind)}, not {_section(prog.kind)})",
                )
            )
        try:
            m.set_program(index, prog)
        except OSError as e:
            raise UsageError(error("bad-map-value", str(e))) from None

    def _configure(self, spec: Any, config: Mapping[str, int | bytes | str]) -> None:
        """Write ``config`` values into .rodata VARs, encoded by their BTF type exactly as
        the loader does (:func:`bpfdsl.obj.config.config_bytes`: a ``be16`` takes 5353)."""
        ro = spec.data_sections.get(".rodata")
        for name, value in config.items():
            var = ro.vars.get(name) if ro else None
            if var is None:
                known = ", ".join(sorted(ro.vars)) if ro else "none"
                raise UsageError(
                    error("bad-config", f"no config named {name!r}", hint=f"configs: {known}")
                )
            raw = config_bytes(spec, name, value)
            _value0(self.data[".rodata"]).buf[var.offset : var.offset + var.size] = raw

    def __getitem__(self, name: str) -> InterpProgram:
        return self.programs[name]


def load_object(
    obj: bytes | str | Path, *, config: dict[str, int | bytes] | None = None, **kw: Any
) -> InterpCollection:
    """Read an ELF object (bytes or path) and prepare it for the interpreter.

    Raises UsageError for unusable objects, unknown configs or unsupported map types.
    """
    return InterpCollection(read_object(obj), config=config, **kw)
