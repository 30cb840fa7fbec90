"""Performance measures the course reports: epoch time (first epoch excluded), throughput, speedup, efficiency;
a Keras timing callback; scaling tables and Amdahl fits; Horovod timeline parsing (negotiation vs all-reduce vs
compute); TensorBoard. Their figures are drawn by `course.plots`.

The first epoch is excluded from summaries because it also builds and traces the graph (as in Torres's BSC hands-on).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from course import UserError


# ------------------------------------------------------------------------------------------ summaries


@dataclass
class Summary:
    """Epoch times of one run and what follows from them (the first epoch excluded when there are more)."""

    epoch_times: list[float]
    images_per_epoch: int
    epoch_time: float  # median epoch time in seconds, first epoch excluded
    images_per_second: float  # images_per_epoch / epoch_time
    excluded_first: bool

    def __str__(self) -> str:
        note = " (first epoch excluded)" if self.excluded_first else " (only one epoch: it includes start-up)"
        return (
            f"epoch time {self.epoch_time:.3f} s, {self.images_per_second:,.0f} images/s "
            f"over {len(self.epoch_times)} epoch(s){note}"
        )


def summarize(epoch_times: Sequence[float], images_per_epoch: int) -> Summary:
    """Median epoch time without the first epoch (kept when it is the only one) and the throughput it implies."""
    times = [float(t) for t in epoch_times]
    if not times:
        raise UserError("no epoch times to summarise: train for at least one epoch")
    if images_per_epoch < 1:
        raise UserError(f"images_per_epoch must be positive, not {images_per_epoch}")
    kept = times[1:] if len(times) > 1 else times
    epoch_time = statistics.median(kept)
    return Summary(times, int(images_per_epoch), epoch_time, images_per_epoch / epoch_time, len(times) > 1)


def speedup(baseline_time: float, time: float) -> float:
    """How many times faster than the baseline (strong scaling: the same work on more workers)."""
    return baseline_time / time


def efficiency(speedup_value: float, workers: int) -> float:
    """Parallel efficiency: speedup per worker (1.0 is linear)."""
    return speedup_value / workers


def weak_scaling_efficiency(throughput_n: float, throughput_1: float, workers: int) -> float:
    """Throughput of `workers` workers (each with a fixed per-worker batch) over `workers` x one worker's."""
    return throughput_n / (workers * throughput_1)


def median_ratio(pairs: Iterable[tuple[float, float]]) -> float:
    """Median of a/b over interleaved (a, b) measurements: robust on a shared, noisy machine."""
    ratios = [a / b for a, b in pairs]
    if not ratios:
        raise UserError("no measurements to compare")
    return statistics.median(ratios)


# ------------------------------------------------------------------------------------ timing callback

_timer_class = None


def timing_callback(images_per_epoch: int):
    """A Keras callback recording each epoch's wall time; `.summary()` gives epoch time and images/s.

    images_per_epoch: the images one epoch processes in total (with Horovod: over all ranks).
    """
    global _timer_class
    if _timer_class is None:
        import time

        import tensorflow as tf

        class EpochTimer(tf.keras.callbacks.Callback):
            """Wall time of each epoch (time.perf_counter around it)."""

            def __init__(self, images_per_epoch: int):
                super().__init__()
                self.images_per_epoch = int(images_per_epoch)
                self.epoch_times: list[float] = []
                self._started = 0.0

            def on_epoch_begin(self, epoch, logs=None):
                self._started = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.epoch_times.append(time.perf_counter() - self._started)

            def summary(self) -> Summary:
                return summarize(self.epoch_times, self.images_per_epoch)

        _timer_class = EpochTimer
    return _timer_class(images_per_epoch)


# ----------------------------------------------------------------------------------- Horovod timeline

NEGOTIATION = "negotiation"
ALLREDUCE = "allreduce"
COMPUTE = "no collective open"


def read_timeline(path: str | Path) -> list[dict]:
    """The events of a HOROVOD_TIMELINE file (Chrome trace JSON; Horovod may leave the array unterminated)."""
    file = Path(path)
    if not file.is_file():
        raise UserError(f"no Horovod timeline at {file}: set HOROVOD_TIMELINE=<file> for the run (rank 0 writes it)")
    text = file.read_text().strip()
    if not text:
        raise UserError(f"the Horovod timeline {file} is empty: did the run start training?")
    text = text.rstrip(",")
    if not text.endswith("]"):
        text += "]"
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
        # an interrupted write: keep the complete events
        events = json.loads(text[: text.rfind("}") + 1].rstrip(",") + "]")
    return [e for e in events if isinstance(e, dict)]


@dataclass
class TimelineBreakdown:
    """Seconds of a Horovod run with a tensor negotiating, being all-reduced, or neither, overall and per rank.

    Horovod negotiates and all-reduces on its background thread while back-propagation goes on, so the time with
    a collective open is an upper bound on what communication costs the run, not the communication itself.
    """

    span: float  # first to last event, seconds
    negotiation: float  # any tensor negotiating: some rank has it ready, not all ranks yet (union of intervals)
    allreduce: float  # any tensor being all-reduced (union of intervals)
    compute: float  # span minus both: no collective open (the ranks compute, or are idle)
    ranks: dict[int, dict[str, float]] = field(default_factory=dict)  # per rank: waiting / allreduce / compute
    tensors: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # all-reduce sub-phases (MPI_ALLREDUCE, ...)

    @property
    def collective_open(self) -> float:
        """Seconds with some collective open (negotiating or all-reducing): at most what communication cost."""
        return self.span - self.compute

    def __str__(self) -> str:
        lines = [
            f"timeline: {self.span:.2f} s over {self.tensors} tensors; a collective open {self.collective_open:.3f} s "
            f"(an upper bound on communication: back-propagation runs meanwhile), of which negotiation "
            f"{self.negotiation:.3f} s (ranks not all ready) and all-reduce {self.allreduce:.3f} s; "
            f"no collective open {self.compute:.3f} s"
        ]
        for rank, parts in sorted(self.ranks.items()):
            lines.append(
                f"  rank {rank}: ready before the others {parts[NEGOTIATION]:.3f} s (negotiation), "
                f"all-reduce {parts[ALLREDUCE]:.3f} s, no collective open {parts[COMPUTE]:.3f} s"
            )
        return "\n".join(lines)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def timeline_breakdown(source: str | Path | list[dict]) -> TimelineBreakdown:
    """Parse a timeline into negotiation, all-reduce and neither, overall and per rank.

    Horovod's timeline has one track (pid) per tensor. A NEGOTIATE_* phase lasts from the first rank
    announcing the tensor ready until all have (the ranks are not all ready: imbalance, not the network);
    inside it, an instant event named by a rank marks when that rank was ready, so a rank's waiting time is
    from its mark to the end of the negotiation. The ALLREDUCE phase moves the data (with sub-phases such as
    MPI_ALLREDUCE, MEMCPY_IN_FUSION_BUFFER). Both run on Horovod's background thread, overlapping the
    back-propagation of the layers whose gradients are not ready yet.
    """
    events = read_timeline(source) if not isinstance(source, list) else source
    stacks: dict[int, list[tuple[str, float]]] = {}
    negotiations: list[tuple[float, float]] = []
    allreduces: list[tuple[float, float]] = []
    phases: dict[str, float] = {}
    ready: dict[int, dict[int, float]] = {}  # per tensor track: rank -> time ready in the open negotiation
    waits: dict[int, list[tuple[float, float]]] = {}
    tensors: set[int] = set()
    times: list[float] = []
    for e in events:
        ph, pid = e.get("ph"), e.get("pid")
        if ph not in ("B", "E", "X") or "ts" not in e:
            continue
        ts = float(e["ts"]) / 1e6
        times.append(ts)
        stack = stacks.setdefault(pid, [])
        if ph == "B":
            stack.append((str(e.get("name", "")), ts))
            tensors.add(pid)
        elif ph == "X":
            name = str(e.get("name", ""))
            if stack and stack[-1][0].startswith("NEGOTIATE") and name.isdigit():
                ready.setdefault(pid, {})[int(name)] = ts
        elif ph == "E" and stack:
            name, start = stack.pop()
            if name.startswith("NEGOTIATE"):
                negotiations.append((start, ts))
                for rank, at in ready.pop(pid, {}).items():
                    waits.setdefault(rank, []).append((at, ts))
            elif not stack:  # a top-level operation: ALLREDUCE, BROADCAST, ...
                allreduces.append((start, ts))
            else:
                phases[name] = phases.get(name, 0.0) + (ts - start)
    if not times:
        raise UserError("the Horovod timeline has no events: was HOROVOD_TIMELINE set before hvd.init()?")
    span = max(times) - min(times)
    negotiation, allreduce = _union(negotiations), _union(allreduces)
    compute = max(0.0, span - _union(negotiations + allreduces))
    ranks = {}
    for rank, intervals in sorted(waits.items()):
        waiting = _union(intervals)
        ranks[rank] = {
            NEGOTIATION: waiting,
            ALLREDUCE: allreduce,
            COMPUTE: max(0.0, span - _union(intervals + allreduces)),
        }
    return TimelineBreakdown(span, negotiation, allreduce, compute, ranks, len(tensors), phases)


# ----------------------------------------------------------------------- scaling studies (notebook 10)


@dataclass
class ScalingRow:
    """One point of a scaling study: workers, time per epoch (or per run), throughput, speedup, efficiency."""

    workers: int
    time: float
    throughput: float | None
    speedup: float
    efficiency: float


def _time_of(value: float | Sequence[float]) -> float:
    if isinstance(value, (int, float)):
        if value <= 0:
            raise UserError(f"times must be positive, not {value}")
        return float(value)
    times = [float(t) for t in value]
    if not times or min(times) <= 0:
        raise UserError("each measurement needs at least one positive epoch time")
    kept = times[1:] if len(times) > 1 else times  # first epoch excluded: it also builds the graph
    return statistics.median(kept)


def scaling_table(
    times: dict[int, float | Sequence[float]], *, kind: str = "strong", images: int | None = None
) -> list[ScalingRow]:
    """Speedup and efficiency for {workers: epoch time, or that run's epoch times (first one excluded)}.

    strong: the same total work on more workers; `images` is the images of that work. speedup = T(base) x base / T(n)
      (base = the fewest workers measured, usually 1), efficiency = speedup / n.
    weak: the same work PER WORKER; `images` is per worker. Ideal time stays flat: efficiency = T(base) / T(n),
      scaled speedup = n x efficiency.
    """
    if kind not in ("strong", "weak"):
        raise UserError(f"kind must be 'strong' or 'weak', not {kind!r}")
    if not times:
        raise UserError("no measurements: give {workers: epoch time}")
    if any(int(w) != w or w < 1 for w in times):
        raise UserError(f"workers must be whole numbers >= 1, got {sorted(times)}")
    per = {int(w): _time_of(v) for w, v in times.items()}
    base = min(per)
    rows = []
    for n in sorted(per):
        t = per[n]
        if kind == "strong":
            s = per[base] * base / t
            eff = s / n
            thr = images / t if images else None
        else:
            eff = per[base] / t
            s = n * eff
            thr = images * n / t if images else None
        rows.append(ScalingRow(n, t, thr, s, eff))
    return rows


def format_table(rows: Sequence[ScalingRow]) -> str:
    """A scaling table as aligned text (what a notebook prints)."""
    lines = [f"{'workers':>7} {'time (s)':>9} {'images/s':>10} {'speedup':>8} {'efficiency':>10}"]
    for r in rows:
        thr = f"{r.throughput:10,.0f}" if r.throughput is not None else f"{'-':>10}"
        lines.append(f"{r.workers:>7} {r.time:>9.3f} {thr} {r.speedup:>8.2f} {r.efficiency:>10.2f}")
    return "\n".join(lines)


def amdahl_speedup(workers, serial_fraction: float):
    """Amdahl's law: the speedup on `workers` when `serial_fraction` of one worker's time cannot be parallelised."""
    import numpy as np

    n = np.asarray(workers, dtype=float)
    result = 1.0 / (serial_fraction + (1.0 - serial_fraction) / n)
    return float(result) if result.ndim == 0 else result


def gustafson_speedup(workers, serial_fraction: float):
    """Gustafson's law (weak scaling): scaled speedup n - f (n - 1) with serial fraction f of the parallel run."""
    import numpy as np

    n = np.asarray(workers, dtype=float)
    result = n - serial_fraction * (n - 1.0)
    return float(result) if result.ndim == 0 else result


@dataclass
class AmdahlFit:
    """The serial fraction that best explains measured speedups, and what it predicts."""

    serial_fraction: float
    stderr: float

    @property
    def max_speedup(self) -> float:
        """The limit of the speedup with unlimited workers: 1 / serial fraction."""
        return math.inf if self.serial_fraction <= 0 else 1.0 / self.serial_fraction

    def predict(self, workers):
        return amdahl_speedup(workers, self.serial_fraction)

    def __str__(self) -> str:
        limit = "unbounded" if math.isinf(self.max_speedup) else f"{self.max_speedup:.1f}x"
        return f"serial fraction {self.serial_fraction:.3f} (+/- {self.stderr:.3f}); speedup limit {limit}"


def karp_flatt(speedup_value: float, workers: int) -> float:
    """The serial fraction a measured speedup implies (Karp-Flatt): (1/S - 1/n) / (1 - 1/n), for n > 1."""
    if workers <= 1:
        raise UserError("the Karp-Flatt serial fraction needs more than one worker")
    return (1.0 / speedup_value - 1.0 / workers) / (1.0 - 1.0 / workers)


def fit_amdahl(workers: Sequence[float] | Sequence[ScalingRow], speedups: Sequence[float] | None = None) -> AmdahlFit:
    """The serial fraction f that best explains (workers, speedup) points, or a strong-scaling table.

    Amdahl's law is linear in f once inverted: 1/S - 1/n = f (1 - 1/n), so f is a least-squares slope through
    the origin (exact for exact data; each point alone gives the Karp-Flatt fraction). Clipped to [0, 1].
    """
    if speedups is None:
        rows = list(workers)  # a table
        workers, speedups = [r.workers for r in rows], [r.speedup for r in rows]
    n = [float(w) for w in workers]
    s = [float(v) for v in speedups]
    if len(n) != len(s) or len({w for w in n if w > 1}) < 1 or len(set(n)) < 2:
        raise UserError("an Amdahl fit needs speedups at two or more different worker counts (one of them above 1)")
    if min(s) <= 0 or min(n) < 1:
        raise UserError("speedups must be positive and workers at least 1")
    x = [1.0 - 1.0 / w for w in n]
    y = [1.0 / v - 1.0 / w for v, w in zip(s, n)]
    sxx = sum(a * a for a in x)
    f = sum(a * b for a, b in zip(x, y)) / sxx
    points = sum(1 for a in x if a > 0)
    residual = sum((b - f * a) ** 2 for a, b in zip(x, y))
    err = math.sqrt(residual / (points - 1) / sxx) if points > 1 else float("nan")
    return AmdahlFit(min(1.0, max(0.0, f)), err)


# ------------------------------------------------------------------------ Horovod timeline spans (Gantt)


@dataclass
class Span:
    """One phase of one tensor in a Horovod timeline, in seconds from the timeline's start."""

    tensor: str
    phase: str  # NEGOTIATE_ALLREDUCE, ALLREDUCE, or a sub-phase such as MPI_ALLREDUCE
    start: float
    end: float
    depth: int  # 0 for a top-level phase, 1 for a sub-phase


def timeline_spans(source: str | Path | list[dict]) -> list[Span]:
    """The phases of every tensor in a Horovod timeline (read with `read_timeline`), for a Gantt chart."""
    events = read_timeline(source) if not isinstance(source, list) else source
    names: dict[Any, str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            names[e.get("pid")] = str((e.get("args") or {}).get("name", e.get("pid")))
    starts = [float(e["ts"]) for e in events if e.get("ph") in ("B", "E", "X") and "ts" in e]
    if not starts:
        raise UserError("the Horovod timeline has no events: was HOROVOD_TIMELINE set before hvd.init()?")
    t0 = min(starts)
    stacks: dict[Any, list[tuple[str, float]]] = {}
    spans: list[Span] = []
    for e in events:
        ph, pid = e.get("ph"), e.get("pid")
        if ph not in ("B", "E") or "ts" not in e:
            continue
        ts = (float(e["ts"]) - t0) / 1e6
        stack = stacks.setdefault(pid, [])
        if ph == "B":
            stack.append((str(e.get("name", "")), ts))
        elif stack:
            name, start = stack.pop()
            spans.append(Span(names.get(pid, str(pid)), name, start, ts, len(stack)))
    return sorted(spans, key=lambda s: (s.start, s.depth))


# -------------------------------------------------------------------------------------- TensorBoard


def tensorboard_url(port: int = 6006) -> str:
    """Where a browser reaches a TensorBoard on `port`: through JupyterHub/OnDemand's proxy when there is one."""
    import os

    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix:  # JupyterHub and Open OnDemand: jupyter-server-proxy serves local ports under /proxy/<port>/
        return f"{prefix.rstrip('/')}/proxy/{port}/"
    return f"http://localhost:{port}/"


def tensorboard(logdir: str | Path = "logs", port: int = 6006) -> str:
    """Show TensorBoard for `logdir` inside JupyterLab (tensorboard's notebook integration); returns its URL.

    The one-liner in a notebook: `perf.tensorboard("logs")` (the same as `%load_ext tensorboard` then
    `%tensorboard --logdir logs`). Under JupyterHub / Open OnDemand the inline frame goes through the hub's
    proxy (TENSORBOARD_PROXY_URL). Outside a notebook it prints the command to run instead. On a cluster without
    a Jupyter proxy: `ssh -L 6006:localhost:6006 user@login-node`, then open http://localhost:6006.
    """
    import os

    url = tensorboard_url(port)
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    if shell is None or not hasattr(shell, "kernel"):
        print(f"run: tensorboard --logdir {logdir} --port {port}   then open {url}")
        return url
    from tensorboard import notebook

    if os.environ.get("JUPYTERHUB_SERVICE_PREFIX"):
        os.environ.setdefault("TENSORBOARD_PROXY_URL", tensorboard_url(port).replace(f"/{port}/", "/%PORT%/"))
    notebook.start(f"--logdir {logdir} --port {port}")
    print(f"TensorBoard: {url}")
    return url
