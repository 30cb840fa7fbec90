"""Notebook 05's checks of the parameter-averaging strategies written with the task API: where the DeepHealth
lab's functions run and how often each strategy waits and submits (against digests, course.checks.quiz, so the
key gives nothing away), the master's loop of synchronous averaging (against course.averaging.fit_sync, with the
tasks counted from the runtime's own history) and the relaxed aggregation task (on small made-up weights).

    placement(WHERE, BARRIERS, TASKS)                                    # None, or what is wrong
    synchronous_loop(my_fit_sync, network, x_train, y_train, start_weights, BATCH)
    relaxed_fold(fold)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from course.checks import check, expect, quiz

FUNCTIONS = (
    "load_dataset",
    "build",
    "train_batch",
    "aggregate_parameters_async",
    "fit_sync",
    "fit_async",
    "fit_full_async",
    "average",
    "evaluate",
)
STRATEGIES = ("sync", "async", "full-async")
# Digests of the answers (course.checks.quiz): they tell which entries are right without showing them.
WHERE_KEY = {
    "load_dataset": "a1c4c9195272f895f9604336a2db321cbad68e9c565129752bffe2841e831285",
    "build": "8827b6b1775389c2fde7cddad85b0122d8c58255a669b3a91096d2cc9308164e",
    "train_batch": "9e589cb7b4ef6d90ab2db9cf19c6c235c8721662bb432ede3c43e19ad35c593a",
    "aggregate_parameters_async": "2ff7651a4578fc87ed59f45e00359fb7eb1da55473a7c18ca7ade2f892f663f2",
    "fit_sync": "d9603d2c2cae4dda8745a3e91e5476db249f1c4fa63cf36bbc86f7bbece31c58",
    "fit_async": "f1e7803f07104beac540e84585f31c7d1faa162f7d581d9a72a00026a0ed8ba2",
    "fit_full_async": "16f1c16648c9b6ba7ffcd6ce88d68eed2489415a7981affb1ae858f0994c0b5e",
    "average": "4d918a59da50a98df0698bf0acdb6772a1aeec458f06e9850eecdf3a0f7b31b7",
    "evaluate": "43ec54578e721d384c3b543f936079b11d264f58e12669a555c876d5bde0abe1",
}
WHY = {
    "train_batch": "a @task runs on a worker, whoever calls it.",
    "fit_sync": "it submits tasks and waits for them: the program that drives the training.",
}
# Workers x epochs the counts are asked for: the notebook's 4 x 10, one of each, and others where W and E differ.
COUNT_CASES = ((4, 10), (1, 1), (3, 7), (8, 2))
COUNT_KEY = {  # BARRIERS(W, E) and TASKS(W, E), per strategy and case
    "barriers-sync@4,10": "4f2f6951b1ff75eba9d03ad17c61ac097e4e27a3a4930fa4fc4cb0c44329b158",
    "barriers-async@4,10": "5aaf6256ac0a6d18e0c12e2661ba26471319ea2dfeff594588c574a5c32f66e6",
    "barriers-full-async@4,10": "0e5b2a2f1542e2fa7ca2195f8da4155ce29b53b8b8d3f16190e3524179e13303",
    "tasks-sync@4,10": "3a035f701d8f3a1e35a7411d45ddc3ddddfda952881a2e6060d766d6c0d459c6",
    "tasks-async@4,10": "4d7e0850cac05f9bb859888ce5473440eee73274469086faec1020ae31e6f4f5",
    "tasks-full-async@4,10": "2a7d351c31ec8221000a6090323be7a9782c122a5010f60ab0168700fc93df3e",
    "barriers-sync@1,1": "42b1cae73125228c211159316157ac77a413a7cbad30cbbfb97b322e8a0c4d2a",
    "barriers-async@1,1": "e85544abca880e300b680cc9095aa9c6e2bfe156dcbab791242012df5a595df5",
    "barriers-full-async@1,1": "d693c136bb9623cdb82b8e456fe8461c23b2f5fdc56a118164abf0a2246e9aa3",
    "tasks-sync@1,1": "8965053d920b143ec919df3970bcdce6a9011f35f27eab8ebdefbf726f780b24",
    "tasks-async@1,1": "ad0bfeef1ac09b60e8e64b97089ef7141f8dd09ff52d82552faf7556debc8e3d",
    "tasks-full-async@1,1": "eb8b76125dc0ddc3e1f5536c0b42c9275aab1b0beaa257f7b7dfa1715b2a29a3",
    "barriers-sync@3,7": "33a67c8a012faa0419784e7bd80235b641b88d866bfd7f78f7ee73bd0c88010f",
    "barriers-async@3,7": "e9de249931593d72ccfd7c4525d85706013cc5611ded96b1eec1a0ecaa7192ab",
    "barriers-full-async@3,7": "47fd3f87c70208becd000cc13f1aa34e68a79a0a426c2bae636b75a48aef6fc6",
    "tasks-sync@3,7": "900f2d10268509c20561c5822e9ed58d09d1780d521fc1ee230d42582ea1ace2",
    "tasks-async@3,7": "2eec45d72fd3eb760541d86ac7333970e41fa911a97d76fd05b37c7f1ac3cf44",
    "tasks-full-async@3,7": "bf30a4d711c903e337b50175b2a9af254b22d5e6fbd59895d375b14d651e5dc4",
    "barriers-sync@8,2": "af22f3909d9cf97f6762c7a5414dd665804e75960bd9d678400ce89c75ac2cc4",
    "barriers-async@8,2": "d423d5a720dc816f3f937e1e32444791ff8be75b99a81ec84539d9dd8d5c7bdd",
    "barriers-full-async@8,2": "4a25f184e3e37320a77d9d9a50a2a392f46f8a4d5f3f348760e89f0f9cfeb575",
    "tasks-sync@8,2": "fe47b4eeaaf5db90c480572b0e7ce59a937e303c807a1d3d6695800e9d779ed9",
    "tasks-async@8,2": "bce1dc54ea38d4435b58efdb5421aab8fa30c8b99500447c27dfb146141a7e5a",
    "tasks-full-async@8,2": "5666336902190c444e95c4c93df6b0a22096aef45aa311bc96e1a3106f495caa",
}


@check
def placement(where: Any, barriers: Callable, tasks: Callable) -> None:
    """Exercise `ex1`: WHERE places each of the lab's functions on the master or a worker (each entry marked right
    or not yet, as course.checks.quiz prints), and BARRIERS(W, E) and TASKS(W, E) count each strategy's global
    waits and submitted tasks, for every workers x epochs of COUNT_CASES."""
    expect(isinstance(where, dict), "WHERE should be a dict: function name -> 'master' or 'worker'")
    expect(set(where) == set(FUNCTIONS), "WHERE needs exactly the nine functions of the list as keys")
    expect(all(v in ("master", "worker") for v in where.values()), "every value must be 'master' or 'worker'")
    try:
        quiz.check(where, WHERE_KEY, WHY)
    except AssertionError as not_yet:
        expect(False, str(not_yet))
    wrong = []
    for workers, epochs in COUNT_CASES:
        counts = {"barriers": barriers(workers, epochs), "tasks": tasks(workers, epochs)}
        for name, got in counts.items():
            expect(
                isinstance(got, dict) and set(got) == set(STRATEGIES),
                f"{name.upper()}(W, E) should return a dict with the keys 'sync', 'async' and 'full-async'",
            )
        wrong += [
            f"{name.upper()}({workers}, {epochs})[{s!r}]"
            for name, got in counts.items()
            for s in got
            if not quiz.is_right(f"{name}-{s}@{workers},{epochs}", got[s], COUNT_KEY)
        ]
    expect(
        not wrong,
        "not right yet: "
        + ", ".join(wrong[:6])
        + (f" (and {len(wrong) - 6} more)" if len(wrong) > 6 else "")
        + " - barriers: the compss_wait_on calls that need all "
        "workers; tasks: every @task call the strategy submits, for any number of workers W and epochs E",
    )


def _largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(u - v).max()) for u, v in zip(a, b))


@dataclass(frozen=True)
class SyncRun:
    """A run of `my_fit_sync`: workers (one shard each, cut from the first `images` images), epochs, batch size."""

    name: str
    workers: int
    images: int
    epochs: int
    batch_size: int = 0  # 0: the notebook's own


# The notebook's run, then one that differs in every argument: an odd number of workers with uneven shards, one
# epoch and another batch size (a loop that reads the notebook's EPOCHS or BATCH, or assumes 2 workers, fails it).
SYNC_RUNS = (
    SyncRun("2 workers of 64 images, 2 epochs, the notebook's batch size", 2, 128, 2),
    SyncRun("3 workers of 43, 43 and 42 images, 1 epoch, batch size 16", 3, 128, 1, 16),
)


def _not_in_turn(numbers: list[int], points: list[int], w: int, epochs: int, where: str) -> None:
    """No wait (`tasks.wait_points`) falls between the submissions of one epoch's `w` training tasks (`numbers`)."""
    in_turn = [
        k + 1 for k in range(epochs) if any(numbers[k * w] < p <= numbers[k * w + w - 1] for p in points)
    ]  # a wait after an epoch's first task was submitted and before its last
    expect(
        not in_turn,
        where + f"in epoch {in_turn[0] if in_turn else ''} the master waited (compss_wait_on) for a worker before "
        "giving the next one its task, so the workers trained one after another: submit every worker's task of the "
        "epoch, then wait for all of them at once",
    )


def _sync_run(my_fit_sync: Callable, network: Any, x: np.ndarray, y: np.ndarray, weights: list, run: SyncRun) -> None:
    """One run of SYNC_RUNS: written by hand, one worker_train task per worker and epoch (from the task runtime's
    history), none waiting for another, and fit_sync's weights."""
    from course import averaging, data, tasks
    from course.shortcuts import Watch

    w, epochs, batch = run.workers, run.epochs, run.batch_size
    shards = [data.shard((x[: run.images], y[: run.images]), r, w) for r in range(w)]
    first, waited_before = len(tasks.history()), len(tasks.wait_points())
    with Watch([averaging.fit, averaging.fit_sync, averaging.fit_async, averaging.fit_full_async]) as seen:
        mine = my_fit_sync(network, shards, weights, epochs, batch)
    expect(
        not seen.called,
        f"my_fit_sync calls {seen.called[0] if seen.called else ''}, the course's own version: write the master's "
        "loop yourself (copies, one worker_train task each, compss_wait_on, master_average)",
    )
    trained = [r for r in tasks.history()[first:] if r["name"] == "worker_train"]
    where = f"with {run.name}: "
    expect(isinstance(mine, list) and len(mine) == len(weights), where + "return the weights: a list of arrays")
    expect(
        tasks.synchronised(mine),
        where + "the weights returned are still on the engines (Futures, or lists a task updated): wait for them "
        "with compss_wait_on and use what it returns",
    )
    expect(trained, where + "no worker_train task ran: submit one per worker and epoch")
    expect(
        len(trained) == w * epochs,
        where + f"{len(trained)} worker_train tasks ran for {w} workers x {epochs} epoch(s): every worker trains as "
        "a task of its own, once per epoch (training in the notebook's own process does not run on the workers)",
    )
    expect(
        not np.allclose(mine[0], weights[0]),
        where + f"the workers trained ({len(trained)} worker_train tasks ran), but the weights you averaged are the "
        "starting ones: compss_wait_on returns the trained copies and leaves your lists as they were, so assign its "
        "result",
    )
    chained = [r for r in trained if r["parents"]]
    expect(
        not chained,
        where + f"{len(chained)} training task(s) waited for an earlier one: in synchronous averaging each epoch "
        "starts from new copies of the averaged weights, one per worker, so no training task waits for another",
    )
    _not_in_turn([r["number"] for r in trained], tasks.wait_points()[waited_before:], w, epochs, where)
    options = {"workers": w, "batch_size": batch, "weights": weights, "shards": shards}
    reference = averaging.fit_sync(network, None, None, epochs=epochs, **options).weights
    difference = _largest_difference(mine, reference)
    print(f"{run.name}: largest difference from course.averaging.fit_sync: {difference:.2e}")
    if difference >= 1e-4 and epochs > 1:
        one = averaging.fit_sync(network, None, None, epochs=1, **options).weights
        expect(
            _largest_difference(mine, one) >= 1e-4,
            where + "your result is one epoch of averaging: each epoch should start from the previous epoch's average",
        )
    expect(
        difference < 1e-4,
        where + "the weights differ from synchronous averaging: average after every epoch, from equal copies, "
        "with the workers, epochs and batch size given",
    )


@check
def synchronous_loop(
    my_fit_sync: Callable, network: Any, x: np.ndarray, y: np.ndarray, start_weights: list, batch_size: int
) -> None:
    """Exercise `ex2`: `my_fit_sync(network, shards, weights, epochs, batch_size)` on every run of SYNC_RUNS (the
    notebook's 2 workers x 2 epochs at `batch_size`; 3 uneven workers x 1 epoch at 16), written by hand (not
    course.averaging's strategies), runs one worker_train task per worker and epoch (counted in the task runtime's
    history), none waiting for another nor submitted after a wait for one of its epoch (the runtime's wait points),
    and returns what fit_sync returns."""
    for run in SYNC_RUNS:
        _sync_run(my_fit_sync, network, x, y, start_weights, replace(run, batch_size=run.batch_size or batch_size))


@check
def relaxed_fold(fold: Callable) -> None:
    """Exercise `ex3`: the COMMUTATIVE task `fold(global_weights, local_weights, factor)`, written by hand (not
    course.averaging.worker_aggregate), replaces the global arrays in place by the mix the factor says and returns
    the new global weights: tried with factors 0.5 and 0.25 on small weights."""
    from course import averaging
    from course.shortcuts import names_used
    from course.tasks import compss_wait_on

    aggregate = averaging.worker_aggregate.function
    expect(
        getattr(fold, "function", fold).__code__ is not aggregate.__code__
        and "worker_aggregate" not in names_used(fold),
        "fold uses course.averaging.worker_aggregate, the course's own aggregation task: write the fold yourself",
    )
    mixed = [np.zeros(3), np.ones(2)]
    back = compss_wait_on(fold(mixed, [np.full(3, 4.0), np.full(2, 3.0)], 0.5))
    mixed = compss_wait_on(mixed)
    expect(
        not (np.allclose(mixed[0], 0.0) and np.allclose(mixed[1], 1.0)),
        "the global weights did not change: replace their arrays in place (global_weights[i] = ...); a new list made "
        "inside the task is not the global weights",
    )
    expect(
        np.allclose(mixed[0], 2.0) and np.allclose(mixed[1], 2.0),
        "global should become (1 - factor) * global + factor * local",
    )
    expect(
        isinstance(back, list) and len(back) == 2 and np.allclose(back[0], mixed[0]), "return the new global weights"
    )
    quarter = [np.zeros(2)]
    fold(quarter, [np.full(2, 4.0)], 0.25)
    quarter = compss_wait_on(quarter)
    expect(
        np.allclose(quarter[0], 1.0),
        "with factor 0.25 the global weights should move a quarter of the way towards the worker's (from 0 to 4), "
        f"got {float(quarter[0][0]):g}",
    )
