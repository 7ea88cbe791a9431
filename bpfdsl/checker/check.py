"""The checker's entry points and their options.

    check_object(spec, options=...)               -> CheckResult    (every program of an object)
    check_program(prog_spec, maps, ..., options=) -> ProgramResult
    check_insns(insns, prog_type, ..., options=)  -> ProgramResult  (raw instruction lists)

What a program *is* -- its instructions, program and attach type, map references, licence,
BTF function records and source lines -- are arguments, as they are fields of the kernel's
BPF_PROG_LOAD attr; *how* it is checked (the loader's rights, the target kernel, the host's
CPUs, time and head-room) is one :class:`CheckOptions` shared by every program of a check.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from bpfdsl.abi.flags import BPF_F_RDONLY_PROG
from bpfdsl.abi.insn import Insn, format_insn, index_by_slot, slot_offsets
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import (
    PROGRAM_KINDS,
    AttachType,
    ProgramKind,
    ProgramType,
    license_is_gpl_compatible,
)
from bpfdsl.checker import features as F
from bpfdsl.checker import fixups
from bpfdsl.checker.analyzer import INSN_LIMIT, Outcome, Tables, analyze
from bpfdsl.checker.cfg import Cfg, CfgError, build_cfg
from bpfdsl.checker.ctx import ctx_for_program_type
from bpfdsl.checker.env import Env, Fault, MapRef
from bpfdsl.checker.hotspot import describe, hot_spot
from bpfdsl.checker.report import TIMEOUT, CheckError, CheckResult, ProgramResult, SourceLine
from bpfdsl.checker.subprog import (
    SubprogInfo,
    changes_pkt_data,
    check_call_graph,
    entry_regs,
    jit_subprog_fault,
    subprog_infos,
)

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.abi.btf.core import Btf
    from bpfdsl.abi.btf.ext import LineInfo
    from bpfdsl.obj.maps import MapSpec
    from bpfdsl.obj.spec import CollectionSpec, DataSection, ProgramSpec

    # the line-info record of an instruction slot, or None (ProgramSpec.line_at)
    LineAt = Callable[[int], LineInfo | None]

# The exploration model (checker/analyzer.py) is Linux 6.18's.  Its processed count is the
# kernel's for every program of the differential test corpus, so for the modelled kernel the
# checker accepts what the kernel accepts: up to the whole 1,000,000-insn budget
# (LIMIT_FRACTION; the kernel refuses at 1,000,001, "BPF program is too large").  A user who
# wants head-room for other kernels asks for a margin (``margin`` percent, ``bpfdsl check
# --margin PCT``): above 100 - PCT % of the budget the answer is "complexity-limit".  Where
# the model is known not to follow the kernel -- a declared older target kernel (--kernel),
# whose verifier explores differently, or a walk that met a shape the model does not follow
# (Env.inexact) -- the budget is LIMIT_FRACTION_OTHER_KERNEL of the kernel's.
MODEL_KERNEL = (6, 18)
LIMIT_FRACTION = 1.0
LIMIT_FRACTION_OTHER_KERNEL = 0.5


def limit_fraction(kernel: tuple[int, int] | None, margin: float = 0.0) -> float:
    """Fraction of BPF_COMPLEXITY_LIMIT_INSNS above which the checker answers
    "complexity-limit" for a program targeting ``kernel`` (None: the modelled 6.18), with
    ``margin`` percent of head-room asked for (0 <= margin < 100).  Raises ValueError for a
    margin outside that range."""
    if not 0.0 <= margin < 100.0:
        raise ValueError(f"margin {margin:g} % is not in 0..100")
    base = LIMIT_FRACTION_OTHER_KERNEL if kernel is not None and kernel < MODEL_KERNEL else 1.0
    return min(base, LIMIT_FRACTION, 1.0 - margin / 100.0)


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """How programs are checked: the loader's side of BPF_PROG_LOAD and the checker's
    budgets, the same for every program of one check (the program's own facts are the
    arguments of :func:`check_insns`).  The defaults check as root on the modelled kernel
    (Linux 6.18) with no time limit and the kernel's whole complexity budget.

    ``privileged``: the loader has CAP_BPF+CAP_PERFMON (root); False models an unprivileged
    one, as the kernel does for pointer leaks, uninitialised stack reads and pointer
    comparisons (``bpfdsl check --unprivileged``).
    ``strict``: warnings become errors.
    ``kernel``: the target kernel as (major, minor), e.g. ``(6, 1)``; a feature newer than
    it is refused, and the complexity budget is :data:`LIMIT_FRACTION_OTHER_KERNEL` of the
    kernel's below the modelled 6.18 (``--kernel``).  None: the modelled kernel.
    ``nr_cpus``: possible CPUs of the host the program will load on (bounds
    bpf_get_smp_processor_id() as the kernel does); None: unknown (any u32).
    ``timeout``: seconds the analysis may take, for all programs of a
    :func:`check_object` together (``--timeout``); a program it stops is unchecked (a
    "check-timeout" error: no verdict), never OK.  None: no limit.
    ``margin``: percent of the kernel's 1,000,000-insn complexity budget kept free, 0 <=
    margin < 100 (``--margin``): a walk above 100 - margin % of it is a
    "complexity-limit" error.

    Raises ValueError for a margin outside 0 <= margin < 100."""

    privileged: bool = True
    strict: bool = False
    kernel: tuple[int, int] | None = None
    nr_cpus: int | None = None
    timeout: float | None = None
    margin: float = 0.0

    def __post_init__(self) -> None:
        limit_fraction(None, self.margin)  # ValueError before any work


# Check as root on the modelled kernel, no time limit, the kernel's whole budget.
DEFAULT_OPTIONS = CheckOptions()


@dataclass(slots=True)
class DataMap:
    """A global-data section seen as the one-entry array map libbpf makes of it."""

    name: str
    data: bytes
    readonly: bool
    map_type: int = MapType.ARRAY
    key_size: int = 4
    max_entries: int = 1

    @property
    def value_size(self) -> int:
        return len(self.data)

    @property
    def map_flags(self) -> int:
        return BPF_F_RDONLY_PROG if self.readonly else 0


def _kind_of(prog_type: ProgramType, attach: AttachType | None) -> ProgramKind | None:
    for k in PROGRAM_KINDS:
        if k.program_type == prog_type and k.attach_type == attach:
            return k
    return None


@contextmanager
def _cycle_gc_paused() -> Iterator[None]:
    """The cycle collector paused inside the ``with``, the caller's setting restored after.
    States, registers and the explored-state tree form no reference cycles (refcounting
    frees them), but a big analysis keeps many alive and the cycle collections its
    allocations trigger would scan them again and again (half the time of a 70,000-insn
    analysis)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check_insns(
    insns: Sequence[Insn],
    prog_type: ProgramType,
    attach_type: AttachType | None = None,
    *,
    map_refs: dict[int, MapRef] | None = None,
    name: str = "prog",
    section: str = "",
    line_at: LineAt | None = None,
    gpl: bool = True,
    kfuncs: dict[int, str] | None = None,
    subprogs: dict[int, SubprogInfo] | None = None,
    has_func_info: bool | None = None,
    options: CheckOptions = DEFAULT_OPTIONS,
) -> ProgramResult:
    """Check one instruction list (ld_imm64 = one Insn) of ``prog_type``, as ``options``
    say (:class:`CheckOptions`).  The program's facts:

    ``map_refs``: list index -> MapRef for ld_imm64 map operands.  ``name``/``section``:
    what the result is called.  ``line_at(slot)`` returns a LineInfo-like record (file,
    line, col, text) or None.  ``gpl``: the licence is GPL-compatible (GPL-only helpers
    allowed).  ``kfuncs``: list index -> kernel function name of the kfunc calls
    (abi.kfuncs).  ``subprogs``: subprogram start index -> ``subprog.SubprogInfo`` (from
    BTF func info: which are global functions, verified on their own like the kernel does;
    default: every subprogram static); ``has_func_info``: whether the program comes with
    BTF func info (False: a function address is refused, as the kernel does; None: not
    known).

    Never raises for bad programs: faults become errors.  A walk longer than
    :func:`limit_fraction` of the kernel's budget is a "complexity-limit" error: for the
    modelled kernel that is the kernel's own limit unless ``options.margin`` asks for
    head-room.  A walk stopped at ``options.timeout`` is a "check-timeout" error.
    """
    opts = options
    margin_frac = limit_fraction(None, opts.margin)
    t0 = time.perf_counter()
    kind = _kind_of(prog_type, attach_type)
    ctx = kind.ctx if kind else ctx_for_program_type(prog_type)
    env = Env(
        prog_type=prog_type,
        attach_type=attach_type,
        ctx=ctx,
        returns=dict(kind.returns) if kind else {},
        map_refs=dict(map_refs or {}),
        gpl=gpl,
        privileged=opts.privileged,
        kernel=opts.kernel,
        nr_cpus=opts.nr_cpus,
        kfuncs=dict(kfuncs or {}),
        subprogs=dict(subprogs or {}),
        has_func_info=has_func_info,
    )
    res = ProgramResult(name, section)
    try:
        cfg = build_cfg(insns)
    except CfgError as e:
        res.insn_count = len(insns) + _n_ld_imm64(insns)
        slots = slot_offsets(insns)
        res.errors.append(_mk(insns, slots, e.idx, "cfg", e.message, e.explain, {}, "", line_at))
        res.seconds = time.perf_counter() - t0
        return res
    res.insn_count = cfg.slots[-1] + insns[-1].width  # slots (ld_imm64 takes two)
    early = _version_faults(env, cfg, insns)
    if early is not None:
        i, f = early
        res.errors.append(_mk(insns, cfg.slots, i, f.code, f.message, f.explain, {}, "", line_at))
        res.seconds = time.perf_counter() - t0
        return res
    timeout = opts.timeout
    deadline = None if timeout is None else t0 + timeout
    env.func_refs = dict(cfg.func_refs)
    env.pkt_changers = changes_pkt_data(cfg, env.kfuncs, env.subprogs)
    try:
        with _cycle_gc_paused():
            out = _verify(env, cfg, deadline)
    except Exception as bug:  # a checker bug must not pass a program nor show a traceback
        res.errors.append(
            _mk(
                insns,
                cfg.slots,
                env.cur_idx,
                "internal",
                f"internal checker error: {type(bug).__name__}: {bug}",
                "please report this; the program was not fully checked",
                {},
                "",
                line_at,
            )
        )
        res.seconds = time.perf_counter() - t0
        return res
    res.insns_processed, res.states = out.processed, out.states
    model_frac = limit_fraction(opts.kernel)
    if env.inexact:
        model_frac = min(model_frac, LIMIT_FRACTION_OTHER_KERNEL)
    frac = min(model_frac, margin_frac)
    if out.timed_out:
        spot = hot_spot(cfg, out.visits)
        where = describe(spot, cfg.slots, line_at)
        res.errors.append(
            _mk(
                insns,
                cfg.slots,
                spot.idx if spot else 0,
                TIMEOUT,
                f"not fully checked: the checker stopped at its time budget of {timeout:g} s "
                f"after {out.processed:,} processed instructions",
                f"it was walking {where}; the kernel decides when the program is loaded, "
                "or allow more time (--check-timeout)",
                {},
                "",
                line_at,
            )
        )
    elif out.fault is not None:
        i, f, state, regs = out.fault
        explain = f.explain
        if f.code == "too-complex":
            spot = hot_spot(cfg, out.visits)
            if spot is not None:
                explain = (
                    f"the verifier walks {describe(spot, cfg.slots, line_at)} once for "
                    "every path that reaches it; bound loops by small constants, keep loops "
                    "over packet data flat (not inside other loops), and reduce branching"
                )
                if out.processed > INSN_LIMIT:
                    i = spot.idx  # the loop or branch responsible, not where the count ran out
        explain = _name_lines(explain, f.at, line_at)
        err = _mk(insns, cfg.slots, i, f.code, f.message, explain, regs, state, line_at)
        err.path = _path_lines(insns, cfg.slots, out.path or [], line_at)
        res.errors.append(err)
    elif out.processed > frac * INSN_LIMIT:
        spot = hot_spot(cfg, out.visits)
        where = describe(spot, cfg.slots, line_at)
        pct = 100.0 * out.processed / INSN_LIMIT
        if margin_frac < model_frac:  # the user's margin refuses it, not the model
            message = (
                f"processed {out.processed:,} of {INSN_LIMIT:,} insns ({pct:.0f} %): over the "
                f"{margin_frac:.0%} of the verifier's complexity limit that --margin "
                f"{opts.margin:g} leaves"
            )
            explain = (
                f"this kernel's verifier accepts up to {INSN_LIMIT:,} processed insns (the "
                f"checker counts as it does); the margin (--margin, CheckOptions.margin) keeps "
                f"head-room for other kernels: drop or lower it, or reduce the walk of "
                f"{where} (it is walked once for every path that reaches it)"
            )
        else:
            message = (
                f"may exceed the verifier's complexity limit: {out.processed:,} of "
                f"{INSN_LIMIT:,} instructions processed"
            )
            explain = (
                f"the verifier walks {where} once for every path that reaches it; above "
                f"{frac:.0%} of the kernel's limit the checker does not promise the kernel "
                "stays under it (its model of that kernel's walk is not exact): bound the "
                "loop more tightly, move work out of it, or split the program"
            )
        res.errors.append(
            _mk(
                insns,
                cfg.slots,
                spot.idx if spot else 0,
                "complexity-limit",
                message,
                explain,
                {},
                "",
                line_at,
            )
        )
    if out.fault is None and not out.timed_out:
        _patch_range(env, insns, cfg.slots, out.visits, res, line_at)
    for i, f in env.warnings:
        w = _mk(insns, cfg.slots, i, f.code, f.message, f.explain, {}, "", line_at)
        w.severity = "warning"
        if opts.strict:
            w.severity = "error"
            res.errors.append(w)
        else:
            res.warnings.append(w)
    res.seconds = time.perf_counter() - t0
    return res


def _patch_range(
    env: Env,
    insns: Sequence[Insn],
    slots: list[int],
    visits: list[int],
    res: ProgramResult,
    line_at: LineAt | None,
) -> None:
    """The kernel's rewrite after verification (checker.fixups): the model's rewritten
    length into ``res.xlated_count``, and its refusal when a jump no longer fits."""
    lay, targets = fixups.layout(env, insns, slots, visits)
    res.xlated_count = lay.length
    hit = fixups.range_fault(lay, targets, insns, slots)
    if hit is not None:
        i, f = hit
        explain = _name_lines(f.explain, f.at, line_at)
        res.errors.append(_mk(insns, slots, i, f.code, f.message, explain, {}, "", line_at))


def _verify(env: Env, cfg: Cfg, deadline: float | None) -> Outcome:
    """The program, then each global function a walked call reached, on its own (the
    kernel's do_check_main, then do_check_subprogs: in order of their start, again while
    new ones were reached), then the call graph's stack and frame limits
    (check_max_stack_depth).  Processed instructions add up as the kernel counts them
    (one limit for all), checkpoints too.  Returns the first fault's (or time-out's)
    Outcome, else the totals; visits add up over all the walks."""
    tables = Tables(env, cfg)
    out = analyze(env, cfg, deadline, tables=tables)
    if out.fault is not None or out.timed_out:
        return out
    states, peak, per_insn = out.states, out.peak_states, out.max_states_per_insn
    processed = out.processed
    verified: set[int] = set()
    while True:
        todo = sorted(t for t in env.called if t not in verified)
        if not todo:
            break
        for start in todo:
            verified.add(start)
            info = env.subprogs[start]
            env.entry = start
            try:
                regs = entry_regs(env, info)
            except Fault as f:
                return Outcome((start, f, "", {}), processed, states)
            sub = analyze(env, cfg, deadline, entry=start, regs=regs, base=processed, tables=tables)
            processed, states = sub.processed, states + sub.states
            peak, per_insn = max(peak, sub.peak_states), max(per_insn, sub.max_states_per_insn)
            if sub.fault is not None or sub.timed_out:
                sub.states = states
                return sub
    env.entry = 0
    fault = check_call_graph(env, cfg)
    if fault is None and env.privileged:
        dead = jit_subprog_fault(cfg, out.visits)
        if dead is not None:
            fault = (dead[0], dead[1], "", {})
    return Outcome(fault, processed, states, None, peak, per_insn, out.visits)


def _name_lines(text: str, at: tuple[int, ...], line_at: LineAt | None) -> str:
    """``text`` with each "at insn N" of a slot N in ``at`` followed by its source line
    (``at insn 31 (prog.c:40: struct bpf_sock *sk = bpf_sk_lookup_tcp(...);)``)."""
    if line_at is None:
        return text
    for slot in dict.fromkeys(at):
        li = line_at(slot)
        if li is not None:
            where = f"{li.file.rsplit('/', 1)[-1]}:{li.line}: {li.text.strip()}"
            rep = f"at insn {slot} ({where})".replace("\\", "\\\\")
            text = re.sub(rf"\bat insn {slot}\b", rep, text)
    return text


def _n_ld_imm64(insns: Sequence[Insn]) -> int:
    """How many instructions take two slots (Insn.width == 2)."""
    return sum(1 for x in insns if x.is_ld_imm64)


def _version_faults(env: Env, cfg: Cfg, insns: Sequence[Insn]) -> tuple[int, Fault] | None:
    """Whole-program features an older target kernel lacks: attach types, loops."""
    if env.kernel is None:
        return None  # no declared target kernel: Env.need never faults

    try:
        at = env.attach_type
        need = F.ATTACH_MIN.get(at) if at is not None else None
        if need and at is not None:
            env.need(need, f"XDP programs attached as {at.name.lower()}")
        for i, ss in enumerate(cfg.succ):
            for t in ss:
                if t <= i:
                    env.cur_idx = i
                    env.need(
                        F.LOOPS_MIN,
                        f"a loop (back-edge from insn {cfg.slots[i]} to {cfg.slots[t]})",
                    )
    except Fault as f:
        return env.cur_idx, f
    return None


def _path_lines(
    insns: Sequence[Insn], slots: list[int], path: list[tuple[int, bool]], line_at: LineAt | None
) -> list[str]:
    """Branch decisions as text, repeated ones (loop iterations) folded: ``... (x6)``."""
    out: list[str] = []
    last, count = None, 0
    for step in [*path, None]:
        if step == last:
            count += 1
            continue
        if last is not None:
            text = _path_step(insns, slots, last[0], last[1], line_at)
            out.append(text + (f"  (x{count})" if count > 1 else ""))
        last, count = step, 1
    return out


def _path_step(
    insns: Sequence[Insn], slots: list[int], k: int, taken: bool, line_at: LineAt | None
) -> str:
    where = ""
    if line_at is not None:
        li = line_at(slots[k])
        if li is not None:
            where = f"  ({li.file.rsplit('/', 1)[-1]}:{li.line}: {li.text.strip()})"
    verdict = "taken" if taken else "not taken"
    return f"insn {slots[k]}: {format_insn(insns[k])} -> {verdict}{where}"


def _mk(
    insns: Sequence[Insn],
    slots: list[int],
    i: int,
    code: str,
    message: str,
    explain: str,
    regs: dict[int, str],
    state: str,
    line_at: LineAt | None,
) -> CheckError:
    i = min(max(i, 0), len(insns) - 1) if insns else 0
    text = format_insn(insns[i]) if insns else ""
    src = None
    if line_at is not None and insns:
        li = line_at(slots[i])
        if li is not None:
            src = SourceLine(li.file, li.line, li.col, li.text)
    return CheckError(code, message, explain, i, slots[i] if insns else 0, text, regs, state, src)


def map_refs_for(
    prog_spec: ProgramSpec,
    maps: dict[str, MapSpec],
    data_sections: dict[str, DataSection] | None = None,
) -> dict[int, MapRef]:
    """ld_imm64 relocations of a ProgramSpec (bpfdsl.obj.spec) -> MapRef per instruction index."""
    refs: dict[int, MapRef] = {}
    dmaps = {n: DataMap(n, d.data, d.readonly) for n, d in (data_sections or {}).items()}
    for rel in prog_spec.relocations:
        if rel.kind == "map" and rel.symbol in maps:
            refs[rel.insn_idx] = MapRef(maps[rel.symbol], None)
        elif rel.kind == "data" and rel.symbol in dmaps:
            refs[rel.insn_idx] = MapRef(dmaps[rel.symbol], rel.offset)
    return refs


def check_program(
    prog_spec: ProgramSpec,
    maps: dict[str, MapSpec],
    *,
    data_sections: dict[str, DataSection] | None = None,
    license: str | None = "GPL",
    btf: Btf | None = None,
    options: CheckOptions = DEFAULT_OPTIONS,
) -> ProgramResult:
    """Check one ``ProgramSpec`` (bpfdsl.obj.spec) with the object's ``maps`` (name -> MapSpec) and
    ``data_sections`` (name -> DataSection, for .rodata/.data/.bss references), as
    ``options`` say; ``license``: the object's licence string (GPL-compatible ones allow the
    GPL-only helpers); ``btf`` (the object's Btf) tells which subprograms are global
    functions and their argument types (without it every subprogram is checked as static)."""
    kind = prog_spec.kind
    if kind is None:
        res = ProgramResult(prog_spec.name, prog_spec.section)
        res.errors.append(
            CheckError(
                "unknown-section",
                f"section '{prog_spec.section}' is not a program type the checker knows",
                "use a libbpf section name such as xdp, xdp/cpumap, xdp/devmap, sk_msg, sockops",
                0,
                0,
                "",
            )
        )
        return res
    func_info = prog_spec.func_info
    # subprogram records (insn_off > 0) need BTF to say which are global functions
    subprogs = (
        subprog_infos(btf, func_info, index_by_slot(prog_spec.insns), kind.ctx)
        if btf is not None and any(rec.insn_off for rec in func_info)
        else {}
    )
    return check_insns(
        prog_spec.insns,
        kind.program_type,
        kind.attach_type,
        map_refs=map_refs_for(prog_spec, maps, data_sections),
        name=prog_spec.name,
        section=prog_spec.section,
        line_at=prog_spec.line_at,
        gpl=license_is_gpl_compatible(license),
        kfuncs={r.insn_idx: r.symbol for r in prog_spec.relocations if r.kind == "kfunc"},
        subprogs=subprogs,
        has_func_info=btf is not None and bool(prog_spec.func_info),
        options=options,
    )


def check_object(
    spec: CollectionSpec, *, only: str | None = None, options: CheckOptions = DEFAULT_OPTIONS
) -> CheckResult:
    """Check every program of a ``CollectionSpec`` (or only the one named/sectioned
    ``only``) as ``options`` say (:class:`CheckOptions`; its ``timeout`` is for all the
    programs together)."""
    out = CheckResult()
    timeout = options.timeout
    t_end = None if timeout is None else time.perf_counter() + timeout  # for all programs
    for name, p in spec.programs.items():
        if only is not None and only not in (name, p.section):
            continue
        left = None if t_end is None else max(0.0, t_end - time.perf_counter())
        out.programs.append(
            check_program(
                p,
                spec.maps,
                data_sections=spec.data_sections,
                license=spec.license,
                btf=spec.btf,
                options=options if left is None else replace(options, timeout=left),
            )
        )
    return out
