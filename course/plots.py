"""The course's performance figures: scaling (time, throughput, speedup), weak scaling, step splits, timelines.

What they draw is measured and computed by `course.perf` (scaling tables, Amdahl fits, timeline breakdowns);
each function returns the matplotlib figure, so a notebook shows it and a script can save it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from course import UserError
from course.perf import (
    ALLREDUCE,
    COMPUTE,
    NEGOTIATION,
    AmdahlFit,
    ScalingRow,
    TimelineBreakdown,
    scaling_table,
    timeline_spans,
)

STRONG = "strong scaling: the same work on more workers"


def scaling(
    series: Sequence[ScalingRow] | dict[str, Sequence[ScalingRow] | dict[int, float]],
    images_per_epoch: int | dict[str, int] | None = None,
    *,
    fit: AmdahlFit | None = None,
    xlabel: str = "workers",
    title: str | None = STRONG,
    label: str = "measured",
):
    """Time per epoch, throughput and speedup against workers: one line per series, linear speedup dashed.

    A series is a strong-scaling table (`perf.scaling_table`) or {workers: epoch time}, whose throughput is
    `images_per_epoch` (one number, or one per label) over the time. `series` is one series (named `label`) or
    {label: series}. With `fit` (`perf.fit_amdahl`), Amdahl's law with its serial fraction is drawn as well.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    labelled = isinstance(series, dict) and all(isinstance(name, str) for name in series)
    named = dict(series) if labelled else {label: series}  # type: ignore[arg-type]
    if not named:
        raise UserError("nothing to plot: give at least one series of measurements")
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    every = set()
    for name, points in named.items():
        images = images_per_epoch.get(name) if isinstance(images_per_epoch, dict) else images_per_epoch
        rows = scaling_table(points, images=images) if isinstance(points, dict) else list(points)
        workers = [r.workers for r in rows]
        every.update(workers)
        axes[0].plot(workers, [r.time for r in rows], "o-", label=name)
        if all(r.throughput is not None for r in rows):
            axes[1].plot(workers, [r.throughput for r in rows], "o-", label=name)
        axes[2].plot(workers, [r.speedup for r in rows], "o-", label=name)
    all_workers = sorted(every)
    axes[2].plot(all_workers, all_workers, "k--", label="linear")
    if fit is not None:
        grid = np.linspace(1, max(all_workers), 50)
        axes[2].plot(grid, fit.predict(grid), ":", label=f"Amdahl, f={fit.serial_fraction:.2f}")
    _titles(axes, ("time per epoch (s)", "throughput (images/s)", "speedup"), xlabel, all_workers)
    axes[2].legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def weak_scaling(rows: Sequence[ScalingRow], label: str = "measured", xlabel: str = "workers"):
    """Time per epoch (ideal: flat) and efficiency (ideal: 1) against workers, for a fixed work per worker."""
    import matplotlib.pyplot as plt

    workers = [r.workers for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    axes[0].plot(workers, [r.time for r in rows], "o-", label=label)
    axes[0].axhline(rows[0].time, color="k", ls="--", label="ideal (flat)")
    axes[1].plot(workers, [r.efficiency for r in rows], "o-", label=label)
    axes[1].axhline(1.0, color="k", ls="--", label="ideal")
    axes[1].set_ylim(0, 1.15)
    _titles(axes, ("time per epoch (s)", "weak-scaling efficiency"), xlabel, workers)
    for ax in axes:
        ax.legend()
    fig.suptitle("weak scaling: the same work per worker")
    fig.tight_layout()
    return fig


def step_split(step_time: dict[str, dict[int, float]], compute_time: dict[str, dict[int, float]]):
    """Per device: each step's computing and the rest (sending, averaging) as stacked bars, and the efficiency.

    `step_time` and `compute_time` are {device: {workers: seconds per step}}; the rest is their difference. Shows
    why a faster device scales worse: its computing shrinks with the workers, the rest does not.
    """
    import matplotlib.pyplot as plt

    if not step_time or set(step_time) != set(compute_time):
        raise UserError("give step and compute times for the same devices: {device: {workers: seconds}}")
    fig, (bars, eff) = plt.subplots(1, 2, figsize=(11, 3.6), gridspec_kw={"width_ratios": [3, 2]})
    labels, computing, rest = [], [], []
    for device, times in step_time.items():
        for n in sorted(times):
            labels.append(f"{device}\n{n} worker{'s' if n > 1 else ''}")
            computing.append(1000 * compute_time[device][n])
            rest.append(1000 * max(0.0, times[n] - compute_time[device][n]))
        rows = scaling_table(times)
        eff.plot([r.workers for r in rows], [r.efficiency for r in rows], "o-", label=device)
    bars.bar(labels, computing, color="tab:blue", label="computing (divided among the workers)")
    bars.bar(labels, rest, bottom=computing, color="tab:gray", label="the rest: sending, averaging (not divided)")
    bars.set_ylabel("ms per step")
    bars.set_title("where a step's time goes")
    bars.legend(fontsize="small")
    eff.axhline(1.0, color="k", ls="--", label="ideal")
    eff.set_ylim(0, 1.15)
    _titles([eff], ("strong-scaling efficiency",), "workers", sorted({n for t in step_time.values() for n in t}))
    eff.legend(fontsize="small")
    fig.tight_layout()
    return fig


def timeline(breakdown: TimelineBreakdown):
    """A stacked bar per rank: waiting for other ranks (negotiation), all-reduce, no collective open."""
    import matplotlib.pyplot as plt

    ranks = sorted(breakdown.ranks) or [0]
    parts = (NEGOTIATION, ALLREDUCE, COMPUTE)
    colours = ("tab:orange", "tab:red", "tab:blue")
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.6 * len(ranks)))
    left = [0.0] * len(ranks)
    for part, colour in zip(parts, colours):
        widths = [breakdown.ranks.get(r, {}).get(part, 0.0) for r in ranks]
        label = {NEGOTIATION: "ready, the other ranks not yet (negotiation)"}.get(part, part)
        ax.barh([f"rank {r}" for r in ranks], widths, left=left, color=colour, label=label)
        left = [a + b for a, b in zip(left, widths)]
    ax.set_xlabel("seconds (phases overlap across tensors; each bar is the union over tensors)")
    ax.set_title(f"Horovod timeline: {breakdown.span:.2f} s, {breakdown.tensors} tensors")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.45), ncol=3, fontsize="small")
    fig.tight_layout()
    return fig


def timeline_gantt(source: str | Path | list[dict], max_tensors: int = 16, window: tuple[float, float] | None = None):
    """A Gantt chart of a Horovod timeline: one row per tensor, negotiation in orange, all-reduce in red.

    Gaps between bars are time in which this tensor was neither negotiated nor reduced: mostly computation.
    `window=(start, end)` in seconds zooms in (a few training steps read better than a whole run).
    """
    import matplotlib.pyplot as plt

    spans = [s for s in timeline_spans(source) if s.depth == 0]
    if window is not None:
        spans = [s for s in spans if s.end >= window[0] and s.start <= window[1]]
    busiest: dict[str, float] = {}
    for s in spans:
        busiest[s.tensor] = busiest.get(s.tensor, 0.0) + s.end - s.start
    tensors = sorted(busiest, key=busiest.get, reverse=True)[:max_tensors]
    row = {t: i for i, t in enumerate(tensors)}
    fig, ax = plt.subplots(figsize=(11, 0.9 + 0.32 * max(1, len(tensors))))
    seen = set()
    for s in spans:
        if s.tensor not in row:
            continue
        negotiate = s.phase.startswith("NEGOTIATE")
        colour = "tab:orange" if negotiate else "tab:red"
        label = "negotiation (waiting until every rank is ready)" if negotiate else "all-reduce (communication)"
        ax.barh(
            row[s.tensor],
            s.end - s.start,
            left=s.start,
            color=colour,
            height=0.7,
            label=None if label in seen else label,
        )
        seen.add(label)
    ax.set_yticks(range(len(tensors)), [t[-40:] for t in tensors], fontsize="x-small")
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the timeline started")
    if window is not None:
        ax.set_xlim(*window)
    ax.set_title(f"Horovod timeline: {len(tensors)} busiest of {len(busiest)} tensors")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.6 / max(1, len(tensors))), ncol=2, fontsize="small")
    fig.tight_layout()
    return fig


def _titles(axes, titles: tuple[str, ...], xlabel: str, workers: list) -> None:
    """Title each panel of a scaling figure, label its x axis with the worker counts, and add a light grid."""
    for ax, title in zip(axes, titles):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_xticks(workers)
        ax.grid(alpha=0.3)
