"""Figures of a benchmark report as a PNG (matplotlib, the ``bench`` extra:
``pip install 'bpfdsl[bench]'``).  Imported only by ``bpfdsl bench --plot``.

Rate sections: one panel per metric, a bar per program at its average with the sample
standard deviation as error bar and each run as a dot (the rows of the table).  skmsg:
throughput and latency against the message size (log scale), a line per mode with ± sd.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")  # files only: no display needed

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from bpfdsl.bench.report import Report, Section


def _rate_sections(rep: Report) -> list[Section]:
    """Sections worth a figure: rates (not the per-run frame counts)."""
    return [s for s in rep.sections if s.metrics and all(m.unit != "count" for m in s.metrics)]


def save(rep: Report, path: str) -> None:
    """Draw ``rep`` into the PNG file ``path`` (overwritten)."""
    if rep.mode == "skmsg":
        fig = _by_size(rep)
    else:
        fig = _bars(rep)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


def _bars(rep: Report) -> Figure:
    panels = [(s, m) for s in _rate_sections(rep) for m in s.metrics]
    cols = min(3, max(1, len(panels)))
    rows = math.ceil(len(panels) / cols) or 1
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax, (s, m) in zip(axes.flat, panels, strict=False):
        labels = list(s.runs)
        avgs = [s.average(lbl, m.key)[0] / m.scale for lbl in labels]
        sds = [s.average(lbl, m.key)[1] / m.scale for lbl in labels]
        xs = range(len(labels))
        colours = ["#999999" if lbl == rep.baseline else "#3b75af" for lbl in labels]
        ax.bar(xs, avgs, yerr=sds, capsize=6, color=colours)
        for x, lbl in zip(xs, labels, strict=True):
            ys = [v / m.scale for v in s.values(lbl, m.key)]
            ax.plot([x] * len(ys), ys, "k.", markersize=5)
        ax.set_xticks(list(xs), labels)
        ax.set_ylabel(f"{m.label} ({m.unit})")
        ax.set_title(s.title.split(" (")[0][:48], fontsize=9)
        if rep.baseline in labels and len(labels) > 1:
            d = s.delta(labels[-1], rep.baseline, m.key)
            if not math.isnan(d):
                ax.annotate(f"{d:+.2f}%", (len(labels) - 1, avgs[-1]), ha="center", va="bottom")
    fig.suptitle(f"bpfdsl bench {rep.mode}: {rep.runs} run(s) of {rep.duration:g} s", fontsize=10)
    fig.tight_layout()
    return fig


def _by_size(rep: Report) -> Figure:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    sizes = [int(s.title.split(" ")[0]) * _unit(s.title) for s in rep.sections]
    for ax, key, ylabel in (
        (axes[0], "tput_mbs", "throughput (MB/s)"),
        (axes[1], "lat_us", "round trip (µs)"),
    ):
        for label in rep.labels:
            avg = [s.average(label, key)[0] for s in rep.sections]
            sd = [s.average(label, key)[1] for s in rep.sections]
            ax.errorbar(sizes, avg, yerr=sd, marker="o", capsize=4, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_yscale("log")
    fig.suptitle(f"bpfdsl bench skmsg: {rep.runs} run(s) of {rep.duration:g} s", fontsize=10)
    fig.tight_layout()
    return fig


def _unit(title: str) -> int:
    word = title.split(" ")[1]
    return {"B": 1, "KiB": 1024, "MiB": 1 << 20}.get(word, 1)
