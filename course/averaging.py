"""Parameter averaging over the task runtime (DeepHealth HPC lab, exercise 5): three ways to synchronise data-parallel workers.

A Keras model's weights travel between the master (this process, the notebook) and the workers (tasks on the
engines) as a list of NumPy arrays. Each worker trains a copy of the model on its own shard of the data.

- `fit_sync` (synchronous parameter averaging): every epoch each worker trains on its shard (weights INOUT);
  the master waits for all of them and averages - a global barrier per epoch.
- `fit_async` (relaxed synchronisation): each worker's result is folded into the global weights by a
  COMMUTATIVE aggregation task as soon as it is ready, in whatever order results arrive; the worker goes on
  from the global weights it got back. No global barrier per epoch.
- `fit_full_async` (removed synchronisation): workers train on their own data for all epochs, never
  talking to each other; the master averages once at the end.

Functions named `worker_*` run on the engines (as tasks); `master_*` and `fit_*` run in the master.
A separate module from course.training (Horovod and MirroredStrategy helpers) because this is a third,
self-contained way of training, built on course.tasks rather than on MPI or tf.distribute.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from course import UserError
from course.results import hardware
from course.sync_types import STRATEGIES, strategy_name
from course.tasks import COMMUTATIVE, INOUT, compss_delete_object, compss_wait_on, task

Weights = list  # a Keras model's weights: model.get_weights(), a list of NumPy arrays


@dataclass(frozen=True)
class Network:
    """Which model to train, as a small picklable description: every worker builds the same model from it."""

    name: str = "simple-mnist"
    input_shape: tuple[int, int, int] = (28, 28, 1)
    classes: int = 10
    learning_rate: float | None = None

    def build(self):
        """The compiled Keras model (course.models.build)."""
        from course import models

        return models.build(self.name, self.input_shape, self.classes, self.learning_rate)


@dataclass
class FitResult:
    """What a fit_* call did: the final weights, the elapsed time per epoch range and in total, and how often
    worker results were combined into the global model (`aggregations`)."""

    strategy: str
    workers: int
    epochs: int
    batch_size: int
    weights: Weights
    elapsed: float
    epoch_ranges: list[tuple[int, int, float]] = field(default_factory=list)  # (first, last, seconds)
    aggregations: int = 0
    train_tasks: int = 0
    worker_stats: list[dict] = field(default_factory=list)

    def images_per_s(self) -> float:
        return sum(s["samples"] for s in self.worker_stats) / self.elapsed if self.elapsed > 0 else float("nan")


# ================================================================================ worker side (engines)
_MODELS: dict[Network, Any] = {}


def worker_model(network: Network):
    """The worker's model, built once per engine and reused (only its weights change from task to task)."""
    model = _MODELS.get(network)
    if model is None:
        from course.devices import configure_tensorflow

        configure_tensorflow()
        model = _MODELS[network] = network.build()
    return model


@task(weights=INOUT, returns=1)
def worker_train(
    weights: Weights, x: np.ndarray, y: np.ndarray, network: Network, epochs: int, batch_size: int
) -> dict:
    """Worker: train from `weights` on this worker's shard for `epochs`, in order (no shuffling), and write the
    trained weights back into `weights` (INOUT). Returns a few numbers about the run."""
    model = worker_model(network)
    model.set_weights(weights)
    start = time.perf_counter()
    history = model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)
    seconds = time.perf_counter() - start
    weights[:] = model.get_weights()
    return {
        "loss": float(history.history["loss"][-1]),
        "accuracy": float(history.history["accuracy"][-1]),
        "samples": int(len(x)) * epochs,
        "seconds": seconds,
        "pid": os.getpid(),
    }


@task(global_weights=COMMUTATIVE, returns=1)
def worker_aggregate(global_weights: Weights, local_weights: Weights, factor: float) -> Weights:
    """Aggregation task (relaxed sync): fold one worker's weights into the global ones,
    global = (1 - factor) * global + factor * local, whenever that worker is done; such tasks run one at a
    time in any order (COMMUTATIVE). Returns a copy of the new global weights for the worker to go on from."""
    for i, (g, w) in enumerate(zip(global_weights, local_weights)):
        global_weights[i] = w.copy() if factor == 1 else ((1 - factor) * g + factor * w).astype(g.dtype)
    return [g.copy() for g in global_weights]


# ================================================================================= master side
def worker_warm_up(network: Network) -> str:
    """Worker: build the model and trace its training step once (one step on a zero image, weights restored)."""
    model = worker_model(network)
    weights = model.get_weights()
    model.fit(np.zeros((1, *network.input_shape), np.float32), np.zeros((1,), np.int64), verbose=0)
    model.set_weights(weights)
    return model.name


def master_build_workers(view, network: Network) -> int:
    """Master: have every engine build the model now (TensorFlow import, tracing), so that no timed run pays for it,
    as the DeepHealth lab's "Building the model in distributed computing units". Returns the number of engines."""
    view.apply_sync(worker_warm_up, network)
    return len(view.targets) if isinstance(view.targets, list) else len(view.client.ids)


def master_average(worker_weights: Sequence[Weights]) -> Weights:
    """Master: the element-wise mean of the workers' weights (parameter averaging)."""
    if not worker_weights:
        raise UserError("nothing to average: no worker weights")
    return [np.mean(np.stack(layer), axis=0).astype(layer[0].dtype) for layer in zip(*worker_weights)]


def master_shards(x: np.ndarray, y: np.ndarray, workers: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Master: split the training data into one contiguous shard per worker."""
    from course import data

    if workers > len(x):
        raise UserError(f"{workers} workers but only {len(x)} training samples: use fewer workers or more data")
    return [data.shard((x, y), rank, workers) for rank in range(workers)]


def _check(workers: int, epochs: int, batch_size: int) -> None:
    for name, value in (("workers", workers), ("epochs", epochs), ("batch size", batch_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"{name} must be a whole number >= 1, not {value!r}")


def _prepare(network: Network, x, y, workers, epochs, batch_size, weights, shards):
    _check(workers, epochs, batch_size)
    if shards is None:
        shards = master_shards(x, y, workers)
    elif len(shards) != workers:
        raise UserError(f"{len(shards)} shards for {workers} workers: give one shard per worker")
    if weights is None:
        weights = network.build().get_weights()
    return [np.array(w, copy=True) for w in weights], [
        (np.ascontiguousarray(a), np.ascontiguousarray(b)) for a, b in shards
    ]


class _Clock:
    """Elapsed time of epoch ranges, as the master sees them."""

    def __init__(self, progress: Callable[[int, int], None] | None, total: int):
        self.start = self.mark = time.perf_counter()
        self.ranges: list[tuple[int, int, float]] = []
        self.progress, self.total, self.done = progress, total, 0

    def tick(self, n: int = 1) -> None:
        self.done += n
        if self.progress is not None:
            self.progress(self.done, self.total)

    def epoch_range(self, first: int, last: int) -> None:
        now = time.perf_counter()
        self.ranges.append((first, last, now - self.mark))
        self.mark = now

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def _strategy(name: str) -> Callable[[Callable[..., tuple]], Callable[..., FitResult]]:
    """Make a schedule of tasks into a public fit_* function: its signature, checks, clock and FitResult."""

    def make(schedule: Callable[..., tuple]) -> Callable[..., FitResult]:
        def fit_strategy(
            network: Network,
            x: np.ndarray | None,
            y: np.ndarray | None,
            *,
            workers: int,
            epochs: int,
            batch_size: int = 32,
            weights: Weights | None = None,
            shards: list | None = None,
            progress: Callable[[int, int], None] | None = None,
        ) -> FitResult:
            weights, shards = _prepare(network, x, y, workers, epochs, batch_size, weights, shards)
            clock = _Clock(progress, workers * epochs)
            final, stats, aggregations = schedule(network, weights, shards, epochs, batch_size, clock)
            _forget(shards)
            return FitResult(
                name,
                workers,
                epochs,
                batch_size,
                final,
                clock.elapsed(),
                clock.ranges,
                aggregations=aggregations,
                train_tasks=workers * epochs,
                worker_stats=stats,
            )

        fit_strategy.__name__ = fit_strategy.__qualname__ = schedule.__name__
        fit_strategy.__doc__ = schedule.__doc__
        return fit_strategy

    return make


def _wait_all(row: list, clock: _Clock, stats: list[dict]) -> None:
    """Wait for one epoch's training tasks, adding what each returns to `stats` and ticking the clock."""
    for future in row:
        stats.append(compss_wait_on(future))
        clock.tick()


# Each schedule below gets the checked starting weights and shards and returns (final weights, the workers'
# stats, aggregations); `_strategy` gives it the public signature:
# fit_*(network, x, y, *, workers, epochs, batch_size=32, weights=None, shards=None, progress=None) -> FitResult.
@_strategy("sync")
def fit_sync(
    network: Network, weights: Weights, shards: list, epochs: int, batch_size: int, clock: _Clock
) -> tuple[Weights, list[dict], int]:
    """Master: synchronous parameter averaging. Each epoch: one training task per worker on its shard (weights
    INOUT), wait for all of them (the global barrier), average. `shards` overrides the split of x, y."""
    stats: list[dict] = []
    for epoch in range(1, epochs + 1):
        local = [[w for w in weights] for _ in shards]  # each worker starts the epoch from the global model
        row = [worker_train(local[j], sx, sy, network, 1, batch_size) for j, (sx, sy) in enumerate(shards)]
        _wait_all(row, clock, stats)  # the barrier: the master waits for every worker
        weights = master_average(compss_wait_on(local))
        _forget(local)
        clock.epoch_range(epoch, epoch)
    return weights, stats, epochs


@_strategy("async")
def fit_async(
    network: Network, weights: Weights, shards: list, epochs: int, batch_size: int, clock: _Clock
) -> tuple[Weights, list[dict], int]:
    """Master: relaxed synchronisation. Each worker trains an epoch, then a COMMUTATIVE task folds its weights
    into the global ones (factor 1/workers) and hands the result back for its next epoch; the master submits
    everything at once and waits only at the end."""
    workers = len(shards)
    global_weights = [w for w in weights]
    local: list[Any] = [[w for w in weights] for _ in range(workers)]
    futures: list[list] = []  # [epoch][worker] -> stats Future
    for epoch in range(epochs):
        row = []
        for j, (sx, sy) in enumerate(shards):
            row.append(worker_train(local[j], sx, sy, network, 1, batch_size))
            local[j] = worker_aggregate(global_weights, local[j], 1.0 / workers)
        futures.append(row)
    stats: list[dict] = []
    for epoch, row in enumerate(futures, start=1):  # no barrier: just watch the epochs finish
        _wait_all(row, clock, stats)
        clock.epoch_range(epoch, epoch)
    final = compss_wait_on(global_weights)
    _forget([global_weights, *local])
    return list(final), stats, workers * epochs


@_strategy("full-async")
def fit_full_async(
    network: Network, weights: Weights, shards: list, epochs: int, batch_size: int, clock: _Clock
) -> tuple[Weights, list[dict], int]:
    """Master: removed synchronisation. Each worker trains on its own shard for all epochs (a chain of INOUT
    tasks that stays on one engine); the master waits once, at the end, and averages once."""
    local = [[w for w in weights] for _ in shards]
    futures = [
        [worker_train(local[j], sx, sy, network, 1, batch_size) for j, (sx, sy) in enumerate(shards)]
        for _ in range(epochs)
    ]
    stats: list[dict] = []
    for epoch, row in enumerate(futures, start=1):
        _wait_all(row, clock, stats)
        clock.epoch_range(epoch, epoch)
    weights = master_average(compss_wait_on(local))
    _forget(local)
    return weights, stats, 1


FITS = dict(zip(STRATEGIES, (fit_sync, fit_async, fit_full_async)))  # in course.sync_types' order


def fit(sync: str | int, network: Network, x, y, **options: Any) -> FitResult:
    """fit_sync, fit_async or fit_full_async by name (or the DeepHealth lab's number 0, 1, 2)."""
    return FITS[strategy_name(sync)](network, x, y, **options)


def _forget(objects: list) -> None:
    """Free the engines' copies of objects the tasks used (shards as (x, y) pairs, weight lists, Futures)."""
    flat = [a for item in objects for a in (item if isinstance(item, tuple) else (item,))]
    try:
        compss_delete_object(*flat)
    except Exception:  # noqa: BLE001 - freeing is best effort
        pass


def master_evaluate(
    model, weights: Weights, x: np.ndarray, y: np.ndarray, batch_size: int = 256
) -> tuple[float, float]:
    """Master: test loss and accuracy of `weights` in `model`."""
    model.set_weights(weights)
    loss, accuracy = model.evaluate(x, y, batch_size=batch_size, verbose=0)
    return float(loss), float(accuracy)


# ================================================================ the run script (python -m course train)
DATASETS = ("mnist", "cifar10")


def train(
    dataset: str = "mnist",
    network: str = "simple-mnist",
    *,
    epochs: int = 1,
    workers: int = 1,
    sync: str | int = "sync",
    runs: int = 1,
    batch_size: int = 32,
    results: str | os.PathLike | None = None,
    limit: int | None = None,
    learning_rate: float | None = None,
    engines: int | None = None,
    cluster_id: str | None = None,
    out: Callable[..., None] = print,
    bar: bool = True,
) -> list[dict]:
    """The DeepHealth lab's run script: train `runs` times with one strategy, print as it goes, append each run to `results`.

    Bad input fails before anything starts (names, numbers, the results file). Uses the cluster `cluster_id`
    when given (e.g. started with `python -m course cluster start`), else starts a private one of `engines`
    engines (default: the cores, at least 2) and stops it at the end. Returns the rows (one per run).
    Over 60 lines, a third of them parameters: the script's steps stay in one place, in the lab's order.
    """
    from course import cluster as cluster_module
    from course import results as results_module

    strategy, dataset, key = _check_train(dataset, network, sync, workers, epochs, runs, batch_size, limit, results)
    (x, y), (x_test, y_test), dataset_used = _load_train(dataset, limit, workers)
    net = Network(key, tuple(x.shape[1:]), 10, learning_rate)
    model = net.build()
    model.summary(print_fn=lambda line, **_: out(line))

    owned = cluster_id is None
    handle = (
        cluster_module.start(engines, cluster_id=f"course-train-{os.getpid()}", threads=1, quiet=True, persist=False)
        if owned
        else cluster_module.attach(cluster_id)
    )
    rows = []
    try:
        from course import tasks

        tasks.reset()
        n_engines = len(handle.client.ids)
        out("Building the model in distributed computing units...")
        master_build_workers(handle.view, net)
        out("Building done!")
        out("MODEL TRAINING...")
        out(f"Dataset: {dataset_used} ({len(x)} training, {len(x_test)} test images); network: {key}")
        out(
            f"Num workers: {workers} on {n_engines} engines; sync type: {strategy}; "
            f"number of epochs: {epochs}; batch size: {batch_size}"
        )
        for run in range(1, runs + 1):
            if runs > 1:
                out(f"Run {run} of {runs}")
            weights = model.get_weights() if run == 1 else net.build().get_weights()
            result = _fit_run(strategy, net, x, y, weights, workers, epochs, batch_size, f"run {run}" if bar else None)
            accuracy = _report_run(result, model, x_test, y_test, out)
            row = _run_row(result, accuracy, dataset_used, key, n_engines, run)
            if results is not None:
                row = results_module.append_row(results, row)
                out(f"Appended run {run} to {results}")
            rows.append(row)
    finally:
        if owned:
            handle.stop()
    return rows


def _check_train(
    dataset: str,
    network: str,
    sync: str | int,
    workers: int,
    epochs: int,
    runs: int,
    batch_size: int,
    limit: int | None,
    results: str | os.PathLike | None,
) -> tuple[str, str, str]:
    """Refuse bad names, numbers and results files before anything starts: (strategy, dataset, network key)."""
    from course import models
    from course import results as results_module

    strategy = strategy_name(sync)
    if str(dataset).strip().lower() not in DATASETS:
        raise UserError(f"unknown dataset {dataset!r}; valid: {', '.join(DATASETS)}")
    dataset = str(dataset).strip().lower()
    key = str(network).strip().lower().replace("_", "-")
    if key not in models.NETWORKS:
        raise UserError(f"unknown network {network!r}; valid: {', '.join(models.NETWORKS)}")
    for name, value in (("--workers", workers), ("--epochs", epochs), ("--runs", runs), ("--batch-size", batch_size)):
        if value < 1:
            raise UserError(f"{name} must be 1 or more, not {value}")
    if limit is not None and limit < workers:
        raise UserError(f"--limit {limit} gives fewer training samples than the {workers} workers")
    if results is not None:
        results_module.check_file(results)
    return strategy, dataset, key


def _load_train(dataset: str, limit: int | None, workers: int) -> tuple[tuple, tuple, str]:
    """The training and test sets, and the name of the dataset really loaded (digits when offline)."""
    from course import data

    loaded = data.load(dataset, limit=limit)
    (x, y), (x_test, y_test) = loaded
    dataset_used = loaded.dataset
    if workers > len(x):
        raise UserError(f"{workers} workers but only {len(x)} training samples")
    return (x, y), (x_test, y_test), dataset_used


def _fit_run(
    strategy: str,
    net: Network,
    x: np.ndarray,
    y: np.ndarray,
    weights: Weights,
    workers: int,
    epochs: int,
    batch_size: int,
    label: str | None,
) -> FitResult:
    """One training run from `weights`, with a progress bar on stderr named `label` (none if None)."""
    progress = _bar(workers * epochs, label) if label is not None else None
    try:
        return fit(
            strategy,
            net,
            x,
            y,
            workers=workers,
            epochs=epochs,
            batch_size=batch_size,
            weights=weights,
            progress=progress,
        )
    finally:
        if progress is not None:
            progress.close()


def _report_run(
    result: FitResult, model: Any, x_test: np.ndarray, y_test: np.ndarray, out: Callable[..., None]
) -> float:
    """Print a run's times and its test loss and accuracy; returns the accuracy."""
    for first, last, seconds in result.epoch_ranges:
        out(f"Elapsed time for epoch range ({first}-{last}): {seconds:.2f} seconds")
    out(f"Total elapsed time: {result.elapsed:.2f} seconds")
    out("Evaluating model against test set")
    loss, accuracy = master_evaluate(model, result.weights, x_test, y_test)
    out(f"Test loss: {loss:.3f}  test accuracy: {accuracy:.3f}")
    return accuracy


def _run_row(result: FitResult, accuracy: float, dataset: str, key: str, engines: int, run: int) -> dict:
    """The results row of one run (the median epoch time leaves the first epoch out when there are more)."""
    later = [s for _, _, s in result.epoch_ranges[1:]] or [s for _, _, s in result.epoch_ranges]
    return {
        "strategy": result.strategy,
        "dataset": dataset,
        "network": key,
        "workers": result.workers,
        "epochs": result.epochs,
        "batch_size": result.batch_size,
        "elapsed_s": round(result.elapsed, 4),
        "accuracy": round(accuracy, 6),
        "epoch_time_s": round(float(np.median(later)), 4),
        "images_per_s": round(result.images_per_s(), 2),
        "engines": engines,
        "hardware": hardware(),
        "run": run,
    }


class _bar:
    """A progress bar over training tasks (tqdm on stderr), called as progress(done, total)."""

    def __init__(self, total: int, label: str):
        import sys

        from tqdm import tqdm

        self.tqdm = tqdm(total=total, desc=label, unit="task", file=sys.stderr, leave=False)

    def __call__(self, done: int, total: int) -> None:
        self.tqdm.update(done - self.tqdm.n)

    def close(self) -> None:
        self.tqdm.close()
