"""Where a walk spent its instructions, and how a message names it.

The kernel's verifier walks a loop's body once for every path that reaches it, so a
program refused as too complex (or stopped at the checker's time budget) is best shown the
loop whose head was walked most often -- else the branch walked most often -- with its
source line and the loops around it: ``the loop at f.bpfd:7 (its head walked 12,345 times,
80% of the walk) inside the loop at f.bpfd:5``.  Input: the program's control flow
(:class:`~bpfdsl.checker.cfg.Cfg`) and the walk's visits per insn (analyzer.Outcome.visits).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpfdsl.checker.cfg import Cfg, loops

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.abi.btf.ext import LineInfo

    # the line-info record of an instruction slot, or None (ProgramSpec.line_at)
    LineAt = Callable[[int], LineInfo | None]


@dataclass(slots=True)
class HotSpot:
    """Where a walk spent its instructions: ``idx`` (insn to report at: the jump closing
    the loop, or the branch), ``kind`` ("loop" or "branch"), ``visits`` (times that loop's
    head or that branch was walked), ``share`` (fraction of all walked instructions in
    that loop's body, or 0 for a branch), ``outer``: jumps closing the loops around it,
    innermost first."""

    idx: int
    kind: str
    visits: int
    share: float
    outer: list[int]


def hot_spot(cfg: Cfg, visits: list[int]) -> HotSpot | None:
    """The loop whose head was walked most often, else the conditional jump walked most
    often: what makes the verifier's walk long (None for a program without either)."""
    total = sum(visits) or 1
    lps = loops(cfg)
    if lps:
        lp = max(lps, key=lambda x: (visits[x.head], -len(x.body)))
        work = sum(visits[k] for k in lp.body)
        outer = sorted((len(o.body), o.closing) for o in lps if o is not lp and lp.body < o.body)
        return HotSpot(lp.closing, "loop", visits[lp.head], work / total, [c for _, c in outer])
    branches = [k for k, x in enumerate(cfg.insns) if x.is_cond_jump]
    if not branches:
        return None
    k = max(branches, key=lambda b: (visits[b], -b))
    return HotSpot(k, "branch", visits[k], 0.0, [])


def describe(spot: HotSpot | None, slots: list[int], line_at: LineAt | None) -> str:
    """How a message names ``spot`` (``slots``: slot number per insn; ``line_at(slot)``:
    its line-info record or None): ``the loop at f.bpfd:7 (its head walked 12,345 times,
    80% of the walk) inside the loop at f.bpfd:5`` / ``the branch at f.bpfd:9 (walked 345
    times)``."""
    if spot is None:
        return "the program"

    def at(i: int) -> str:
        li = line_at(slots[i]) if line_at is not None else None
        if li is None:
            return f"insn {slots[i]}"
        return f"{li.file.rsplit('/', 1)[-1]}:{li.line}"

    if spot.kind == "loop":
        text = (
            f"the loop at {at(spot.idx)} (its head walked {spot.visits:,} times, "
            f"{spot.share:.0%} of the walk)"
        )
        if spot.outer:
            text += f" inside the loop at {at(spot.outer[0])}"
        return text
    return f"the branch at {at(spot.idx)} (walked {spot.visits:,} times)"
