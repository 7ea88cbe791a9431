"""What a run of the userspace machine shares with the helpers it calls.

:class:`Env` is the settable machine state (clock, CPU, random seed); :class:`RunState` the
per-run state a helper reads and writes (``env``, ``ctx``, ``redirect``, ``trace``).
:class:`bpfdsl.interp.machine.Machine` is a RunState; the helper modules
(:mod:`bpfdsl.interp.helpers`, :mod:`bpfdsl.interp.helpers_sock`) see only this interface,
so they import this module and not the machine that imports them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bpfdsl.interp.memory import Region


@dataclass(frozen=True, slots=True)
class FibRoute:
    """One route of the machine's FIB for ``bpf_fib_lookup``: packets to ``prefix``
    (``ipaddress.ip_network`` text, IPv4 or IPv6) leave by ``ifindex`` with Ethernet
    source ``smac`` and destination ``dmac`` (6 bytes each: the next hop's neighbour
    entry; None = no neighbour entry, BPF_FIB_LKUP_RET_NO_NEIGH)."""

    prefix: str
    ifindex: int
    smac: bytes = bytes(6)
    dmac: bytes | None = bytes(6)


@dataclass
class Env:
    """Settable machine state: clock (ns), CPU number and count, random seed, and the
    routes ``bpf_fib_lookup`` finds (none by default: every lookup is NOT_FWDED)."""

    clock_ns: int = 1_000_000_000
    clock_step_ns: int = 0  # added after every ktime read (0: a frozen clock)
    cpu: int = 0
    ncpus: int = 1
    seed: int = 0
    fib_routes: list[FibRoute] = field(default_factory=list)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def now_ns(self) -> int:
        t = self.clock_ns
        self.clock_ns += self.clock_step_ns
        return t


@dataclass(frozen=True, slots=True)
class FuncRef:
    """The value of an ld_imm64 of a function's address (BPF_PSEUDO_FUNC): ``target`` is
    the instruction index of the function in the running program (a bpf_loop callback)."""

    target: int


class TailCall(Exception):
    """Raised by ``bpf_tail_call`` when the slot holds a program: the machine runs
    ``program`` (an object with a ``machine``) from its start, on the same context, and
    never comes back."""

    def __init__(self, program: object) -> None:
        super().__init__("tail call")
        self.program = program


class RunState:
    """Per-run state helpers use: ``env`` (:class:`Env`), ``ctx`` (the context region of
    this run), ``redirect`` (what a redirect helper chose: map name, key, target, flags),
    ``redirect_miss`` (a redirect into an empty slot or with bad flags: map name, key,
    flags, why), ``trace`` (``bpf_trace_printk`` lines, in order), ``tail_calls`` (tail
    calls made in this run, at most MAX_TAIL_CALL_CNT) and :meth:`call_function` (run a
    callback)."""

    env: Env
    ctx: Region | None
    redirect: tuple | None
    redirect_miss: tuple | None
    trace: list[str]
    tail_calls: int

    def call_function(self, target: int, *args: object) -> object:
        """Run the function at instruction ``target`` of the running program with r1.. =
        ``args`` in a frame of its own (a bpf_loop callback); its r0."""
        raise NotImplementedError
