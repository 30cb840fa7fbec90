"""Looking at what ran: the task graph, the execution trace (a Gantt chart per engine) and summary numbers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from course.tasks import runtime


def history(wait: bool = True) -> list[dict]:
    """One record per task of the current graph: number, name, parents, engine, times (seconds from the first)."""
    rt = runtime.current(start=False)
    if rt is None:
        return []
    if wait:
        rt.barrier(report=False)
    t0 = min((t.meta["fetch"] for t in rt.tasks if t.meta), default=0.0)
    records = []
    for t in rt.tasks:
        meta = t.meta if (wait or t.done()) and t.wait() else None
        records.append(
            {
                "number": t.number,
                "name": t.name,
                "parents": [(p.number, label) for p, label in t.edges],
                "engine": meta["engine"] if meta else None,
                "fetch": meta["fetch"] - t0 if meta else None,
                "start": meta["start"] - t0 if meta else None,
                "end": meta["end"] - t0 if meta else None,
                "ok": bool(meta and meta.get("ok")),
                "error": (meta or {}).get("error") or (f"{type(t.error).__name__}: {t.error}" if t.error else None),
                "fetched": (meta or {}).get("fetched", 0),
                "on_failure": t.on_failure,
                "cancelled": bool((meta or {}).get("cancelled")),  # an input's task failed: this one did not run
                "ignored": (meta or {}).get("ignored"),  # on_failure="IGNORE": the error its defaults replaced
                "retried": bool((meta or {}).get("retried")),
                "files": list(t.files),  # (file, version, "reads"/"writes"): each write makes a new version
            }
        )
    return records


@dataclass
class Stats:
    """Summary of a task graph: work is the sum of task times, the critical path the longest chain of them."""

    tasks: int
    work: float
    critical_path: float
    parallelism: float
    elapsed: float
    achieved: float
    engines: int

    def __str__(self) -> str:
        return (
            f"{self.tasks} tasks on {self.engines} engine(s): work {self.work:.3f} s, critical path "
            f"{self.critical_path:.3f} s, average parallelism {self.parallelism:.2f} (work / critical path); "
            f"elapsed {self.elapsed:.3f} s, achieved parallelism {self.achieved:.2f} (work / elapsed)"
        )

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))


def waits() -> int:
    """How many times the program has called compss_wait_on since the last reset() (0 without a task graph)."""
    rt = runtime.current(start=False)
    return len(rt.waits) if rt is not None else 0


def wait_points() -> list[int]:
    """For each compss_wait_on call since the last reset(), how many tasks the program had submitted before it: a
    wait that falls among tasks meant to run together made the later ones wait for it."""
    rt = runtime.current(start=False)
    return list(rt.waits) if rt is not None else []


def stats() -> Stats:
    """Tasks, total work, critical path and average parallelism of the current graph (waits for it)."""
    records = [r for r in history() if r["start"] is not None]
    if not records:
        return Stats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    duration = {r["number"]: r["end"] - r["start"] for r in records}
    finish: dict[int, float] = {}
    for r in records:  # tasks are recorded in submission order, so parents come first
        finish[r["number"]] = duration[r["number"]] + max((finish.get(p, 0.0) for p, _ in r["parents"]), default=0.0)
    work = sum(duration.values())
    span = max(finish.values())
    elapsed = max(r["end"] for r in records) - min(r["fetch"] for r in records)
    return Stats(
        len(records),
        work,
        span,
        work / span if span > 0 else 1.0,
        elapsed,
        work / elapsed if elapsed > 0 else 1.0,
        len({r["engine"] for r in records}),
    )


def _colours(names: list[str]) -> dict[str, Any]:
    import matplotlib.pyplot as plt

    cmap = plt.get_cmap("tab10")
    return {name: cmap(i % 10) for i, name in enumerate(dict.fromkeys(names))}


def graph(ax: Any = None, labels: bool | None = None) -> Any:
    """Draw the task graph: a node per task (labelled by function), an arrow per data dependency (by direction)."""
    import matplotlib.pyplot as plt

    records = history(wait=False)
    if ax is None:
        width = max(4.0, min(16.0, 1.6 * (1 + max((0, *_depths(records).values())))))
        height = max(2.5, min(10.0, 0.45 * max((1, *_layer_sizes(records).values()))))
        _, ax = plt.subplots(figsize=(width, height))
    if not records:
        ax.text(0.5, 0.5, "no tasks yet", ha="center", va="center")
        ax.set_axis_off()
        return ax.figure
    rows, pos = _positions(records)
    colours = _colours([r["name"] for r in records])
    edges = [(p, r["number"], label) for r in records for p, label in r["parents"]]
    show_labels = len(edges) <= 24 if labels is None else labels
    _draw_edges(ax, edges, pos, show_labels)
    _draw_tasks(ax, records, pos, colours, show_labels)
    for name, colour in colours.items():
        ax.scatter([], [], s=80, color=colour, edgecolors="black", label=name)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="function", frameon=False)
    ax.set_title(f"Task graph: {len(records)} tasks, {len(edges)} dependencies")
    ax.set_xlabel("dependency depth")
    ax.set_yticks([])
    ax.set_xticks(sorted(rows))
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.margins(0.15)
    ax.figure.tight_layout()
    return ax.figure


def _positions(records: list[dict]) -> tuple[dict[int, list[int]], dict[int, tuple[float, float]]]:
    """Tasks by dependency depth (a column each), and each task's (x, y): columns left to right, centred."""
    depth = _depths(records)
    rows: dict[int, list[int]] = {}
    for r in records:
        rows.setdefault(depth[r["number"]], []).append(r["number"])
    pos = {}
    for d, numbers in rows.items():
        for i, n in enumerate(numbers):
            pos[n] = (d, (len(numbers) - 1) / 2 - i)
    return rows, pos


def _draw_edges(ax: Any, edges: list[tuple[int, int, str]], pos: dict, show_labels: bool) -> None:
    """An arrow per dependency, labelled with the parameter that carries it when there are few."""
    for src, dst, label in edges:
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops=dict(arrowstyle="-|>", color="0.45", shrinkA=9, shrinkB=9, lw=1),
        )
        if show_labels:
            ax.text(
                (x0 + x1) / 2,
                (y0 + y1) / 2,
                label,
                fontsize=7,
                color="0.3",
                ha="center",
                va="center",
                bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
            )


def _draw_tasks(ax: Any, records: list[dict], pos: dict, colours: dict, show_labels: bool) -> None:
    """A dot per task in its function's colour (a red edge: it failed), its number, and the file versions it used."""
    for r in records:
        x, y = pos[r["number"]]
        failed = bool(r["error"])
        ax.scatter(
            [x],
            [y],
            s=380,
            color=colours[r["name"]],
            edgecolors="red" if failed else "black",
            linewidths=2 if failed else 0.8,
            zorder=3,
        )
        if len(records) <= 40:
            ax.text(x, y, str(r["number"]), fontsize=7, ha="center", va="center", zorder=4, color="white")
        if show_labels and r["files"]:  # which version of each file the task read or wrote
            versions = "\n".join(f"{'r' if how == 'reads' else 'w'} {name} v{v}" for name, v, how in r["files"])
            ax.text(x, y - 0.22, versions, fontsize=6, color="0.25", ha="center", va="top", zorder=4)


def trace(ax: Any = None) -> Any:
    """Draw when each task ran on which engine (waits for the tasks); hatched: waiting for inputs."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    records = [r for r in history() if r["start"] is not None]
    engines = sorted({r["engine"] for r in records})
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * max(1, len(engines))))
    colours = _colours([r["name"] for r in records])
    row = {e: i for i, e in enumerate(engines)}
    for r in records:
        y = row[r["engine"]]
        if r["start"] - r["fetch"] > 0:
            ax.barh(
                y,
                r["start"] - r["fetch"],
                left=r["fetch"],
                height=0.6,
                color="white",
                edgecolor=colours[r["name"]],
                hatch="///",
                lw=0.5,
            )
        ax.barh(
            y,
            max(r["end"] - r["start"], 1e-4),
            left=r["start"],
            height=0.6,
            color=colours[r["name"]],
            edgecolor="red" if r["error"] else "black",
            lw=0.5,
        )
    handles = [Patch(facecolor=colour, edgecolor="black", label=name) for name, colour in colours.items()]
    handles.append(Patch(facecolor="white", edgecolor="0.3", hatch="///", label="waiting for inputs"))
    ax.set_yticks(range(len(engines)), [f"engine {e}" for e in engines])
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the first task")
    ax.set_title(f"Execution trace: {len(records)} tasks on {len(engines)} engine(s)")
    if colours:
        ax.legend(
            handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title="function", frameon=False
        )
    ax.figure.tight_layout()
    return ax.figure


def _depths(records: list[dict]) -> dict[int, int]:
    depth: dict[int, int] = {}
    for r in records:
        depth[r["number"]] = 1 + max((depth.get(p, 0) for p, _ in r["parents"]), default=-1)
    return depth


def _layer_sizes(records: list[dict]) -> dict[int, int]:
    sizes: dict[int, int] = {}
    for d in _depths(records).values():
        sizes[d] = sizes.get(d, 0) + 1
    return sizes
