"""Benchmark results in the layout of the kernel list's cover letters, as text and JSON.

A :class:`Section` is one table: a metric per column group, a program per column, a row
per run, then ``Average``, ``± sd`` (sample standard deviation) and ``Delta`` (the
program's average against the baseline's, in percent).  A :class:`Report` holds the
sections of one ``bpfdsl bench`` run, what was set up, and notes.  Runs are taken in
ABBA order (:func:`abba`) so drift and warm-up favour no program.  :class:`Progress`
shows what is being measured (rich, on stderr).
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from rich import progress as rp
from rich.console import Console


@dataclass(frozen=True, slots=True)
class Metric:
    """One measured quantity: ``key`` (JSON name), ``label`` (column title), ``unit`` of
    the shown number, which is the value divided by ``scale`` with ``digits`` decimals."""

    key: str
    label: str
    unit: str
    scale: float = 1.0
    digits: int = 3

    def show(self, value: float) -> str:
        if value is None or math.isnan(value):
            return "-"
        return f"{value / self.scale:,.{self.digits}f}"


def mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation; 0 for one value, NaN for none)."""
    if not xs:
        return math.nan, math.nan
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def delta_pct(value: float, base: float) -> float:
    """``value`` against ``base`` in percent: (value / base - 1) * 100; NaN when base is 0."""
    if not base or math.isnan(base) or math.isnan(value):
        return math.nan
    return (value / base - 1.0) * 100.0


def abba(labels: Sequence[str], runs: int) -> Iterator[tuple[int, str]]:
    """(run index, label) in ABBA order: A B, B A, A B, ... (``labels`` reversed on odd
    runs), so a drift of the machine's speed or a warm-up hits every program alike."""
    for i in range(runs):
        order = list(labels) if i % 2 == 0 else list(reversed(labels))
        for label in order:
            yield i, label


@dataclass(slots=True)
class Section:
    """One table: ``runs[label]`` is one ``{metric key: value}`` per run, in run order."""

    title: str
    metrics: list[Metric]
    runs: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    note: str = ""
    compare: list[str] | None = None  # labels with a Delta (default: all but the baseline)

    def compared(self, baseline: str | None) -> list[str]:
        if baseline is None or baseline not in self.runs:
            return []
        want = self.compare if self.compare is not None else list(self.runs)
        return [lbl for lbl in want if lbl != baseline and lbl in self.runs]

    def values(self, label: str, key: str) -> list[float]:
        return [r[key] for r in self.runs.get(label, []) if key in r]

    def average(self, label: str, key: str) -> tuple[float, float]:
        return mean_sd(self.values(label, key))

    def delta(self, label: str, baseline: str, key: str) -> float:
        return delta_pct(self.average(label, key)[0], self.average(baseline, key)[0])

    def to_dict(self, baseline: str | None) -> dict:
        out: dict = {
            "title": self.title,
            "metrics": [
                {"key": m.key, "label": m.label, "unit": m.unit, "scale": m.scale}
                for m in self.metrics
            ],
            "runs": self.runs,
            "average": {},
            "sd": {},
            "delta_pct": {},
        }
        for label in self.runs:
            avg = {m.key: self.average(label, m.key) for m in self.metrics}
            out["average"][label] = {k: _num(v[0]) for k, v in avg.items()}
            out["sd"][label] = {k: _num(v[1]) for k, v in avg.items()}
            if label in self.compared(baseline):
                assert baseline is not None  # compared() is empty without a baseline
                out["delta_pct"][label] = {
                    m.key: _num(self.delta(label, baseline, m.key)) for m in self.metrics
                }
        if self.note:
            out["note"] = self.note
        return out

    def render(self, baseline: str | None) -> str:
        labels = list(self.runs)
        nruns = max((len(v) for v in self.runs.values()), default=0)
        head1, head2 = [""], ["run"]
        rows: list[list[str]] = [[str(i + 1)] for i in range(nruns)]
        avg, sd, dl = ["Average"], ["± sd"], ["Delta"]
        for m in self.metrics:
            for j, label in enumerate(labels):
                head1.append(f"{m.label} ({m.unit})" if j == 0 else "")
                head2.append(label)
                vals = self.runs[label]
                for i in range(nruns):
                    v = vals[i].get(m.key) if i < len(vals) else None
                    rows[i].append("-" if v is None else m.show(v))
                a, s = self.average(label, m.key)
                avg.append(m.show(a))
                sd.append(m.show(s))
                if label not in self.compared(baseline):
                    dl.append("")
                else:
                    assert baseline is not None  # compared() is empty without a baseline
                    d = self.delta(label, baseline, m.key)
                    dl.append("-" if math.isnan(d) else f"{d:+.2f}%")
        body = [head1, head2, *rows, avg, sd]
        if baseline is not None and any(dl[1:]):
            body.append(dl)
        return (
            f"{self.title}\n"
            + text_table(body, header_rows=2)
            + (f"\nnote: {self.note}" if self.note else "")
        )


def _num(v: float) -> float | None:
    return None if v is None or math.isnan(v) else v


def text_table(rows: Sequence[Sequence[str]], *, header_rows: int = 1) -> str:
    """Plain text, first column left-aligned, the others right-aligned (numbers line up;
    what a reviewer pastes into a mail keeps its shape in any monospace font)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, r in enumerate(rows):
        cells = [r[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)
        ]
        lines.append("  ".join(cells).rstrip())
        if n == header_rows - 1:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


@dataclass(slots=True)
class Report:
    """The results of one benchmark: ``mode``, ``labels`` (column order: the baseline
    first), ``baseline`` (None without one), the ``sections``, a ``setup`` description
    and ``notes``.  :meth:`render` is the text form, :meth:`to_dict` the JSON form."""

    mode: str
    title: str
    labels: list[str]
    baseline: str | None
    runs: int
    duration: float
    sections: list[Section] = field(default_factory=list)
    setup: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    summary: Section | None = None  # skmsg: one row per message size (mean ± sd)
    programs: dict[str, dict] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "title": self.title,
            "labels": self.labels,
            "baseline": self.baseline,
            "programs": self.programs,
            "runs": self.runs,
            "duration_s": self.duration,
            "setup": self.setup,
            "sections": [s.to_dict(self.baseline) for s in self.sections],
            "notes": self.notes,
            "summary": self.summary.note if self.summary is not None else None,
        }

    def render(self, *, verbose: bool = True) -> str:
        out = [self.title]
        for label, p in self.programs.items():
            out.append(
                f"  {label}: {p['file']}" + (f" (program {p['prog']})" if p.get("prog") else "")
            )
        for s in self.sections:
            if verbose or self.summary is None:
                out += ["", s.render(self.baseline)]
        if self.summary is not None:
            out += ["", self.summary.title, self.summary.note]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


class Progress:
    """What a benchmark is doing, for the user watching it: :meth:`start` with the number
    of measuring steps, :meth:`step` before each.  This base class shows nothing."""

    def start(self, total: int, what: str) -> None:
        pass

    def step(self, text: str) -> None:
        pass

    def finish(self) -> None:
        pass


class RichProgress(Progress):
    """A progress bar on stderr (rich; drawn only when stderr is a terminal), removed when
    the benchmark ends."""

    def __init__(self) -> None:
        self._bar = rp.Progress(
            rp.TextColumn("{task.description}"),
            rp.BarColumn(),
            rp.MofNCompleteColumn(),
            rp.TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        self._task: rp.TaskID | None = None
        self._what = ""
        self._steps = 0

    def start(self, total: int, what: str) -> None:
        self._what = what
        self._bar.start()
        self._task = self._bar.add_task(what, total=total)

    def step(self, text: str) -> None:
        if self._task is None:
            return
        self._bar.update(self._task, description=f"{self._what}: {text}", completed=self._steps)
        self._steps += 1

    def finish(self) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self._steps)
        self._bar.stop()
