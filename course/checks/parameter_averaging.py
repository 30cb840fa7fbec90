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
COUNT_KEY = {  # BARRIERS(4, 10) and TASKS(4, 10), per strategy
    "barriers-sync": "a76d1d97a4aa5cef2ac72038740d8f3f9ec99e531ae121eb06275961a2e5d929",
    "barriers-async": "9ba3130b6d36232bf4bc18754ec7bc83af7e64e13a07268e1270e918e652f311",
    "barriers-full-async": "f202d1d489c24f379d99bad8bb2557c364986e7487a0f1e652b108e511f647a5",
    "tasks-sync": "3425e1cc7b432ca54ba0cd14d72c85785d5be1cdddca8f60c27f53a5ef84ecb9",
    "tasks-async": "94474508d2e37fb7a49bbe428c762dbb38dc2aa2728c296fbf8ae648970a47e5",
    "tasks-full-async": "49d29d4f5f620285b39f574d69eee3c03ea8f1107d54e27361b1c9caa3ada4ba",
}


@check
def placement(where: Any, barriers: Callable, tasks: Callable) -> None:
    """Exercise `ex1`: WHERE places each of the lab's functions on the master or a worker (each entry marked right
    or not yet, as course.checks.quiz prints), and BARRIERS(4, 10) and TASKS(4, 10) count each strategy's global
    waits and submitted tasks."""
    expect(isinstance(where, dict), "WHERE should be a dict: function name -> 'master' or 'worker'")
    expect(set(where) == set(FUNCTIONS), "WHERE needs exactly the nine functions of the list as keys")
    expect(all(v in ("master", "worker") for v in where.values()), "every value must be 'master' or 'worker'")
    try:
        quiz.check(where, WHERE_KEY, WHY)
    except AssertionError as not_yet:
        expect(False, str(not_yet))
    counts = {"barriers": barriers(4, 10), "tasks": tasks(4, 10)}
    for name, got in counts.items():
        expect(
            isinstance(got, dict) and set(got) == set(STRATEGIES),
            f"{name.upper()}(W, E) should return a dict with the keys 'sync', 'async' and 'full-async'",
        )
    wrong = [
        f"{name.upper()}(4, 10)[{s!r}]"
        for name, got in counts.items()
        for s in got
        if not quiz.is_right(f"{name}-{s}", got[s], COUNT_KEY)
    ]
    expect(
        not wrong,
        "not right yet: " + ", ".join(wrong) + " - barriers: the compss_wait_on calls that need all "
        "workers; tasks: every @task call the strategy submits",
    )


def _largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.abs(u - v).max()) for u, v in zip(a, b))


@check
def synchronous_loop(
    my_fit_sync: Callable, network: Any, x: np.ndarray, y: np.ndarray, start_weights: list, batch_size: int
) -> None:
    """Exercise `ex2`: `my_fit_sync(network, shards, weights, epochs, batch_size)` on 2 shards of 64 images for 2
    epochs, written by hand (not course.averaging's strategies), runs one worker_train task per worker and epoch
    (counted in the task runtime's history), none waiting for another, and returns what fit_sync returns."""
    from course import averaging, data, tasks
    from course.shortcuts import Watch

    shards = [data.shard((x[:128], y[:128]), r, 2) for r in range(2)]
    first = len(tasks.history())
    with Watch([averaging.fit, averaging.fit_sync, averaging.fit_async, averaging.fit_full_async]) as seen:
        mine = my_fit_sync(network, shards, start_weights, 2, batch_size)
    expect(
        not seen.called,
        f"my_fit_sync calls {seen.called[0] if seen.called else ''}, the course's own version: write the master's "
        "loop yourself (copies, one worker_train task each, compss_wait_on, master_average)",
    )
    trained = [r for r in tasks.history()[first:] if r["name"] == "worker_train"]
    expect(isinstance(mine, list) and len(mine) == len(start_weights), "return the weights: a list of arrays")
    expect(
        tasks.synchronised(mine),
        "the weights returned are still on the engines (Futures, or lists a task updated): wait for them with "
        "compss_wait_on and use what it returns",
    )
    expect(trained, "no worker_train task ran: submit one per worker and epoch")
    expect(
        len(trained) == 2 * 2,
        f"{len(trained)} worker_train tasks ran for 2 workers x 2 epochs: every worker trains as a task of its own, "
        "once per epoch (training in the notebook's own process does not run on the workers)",
    )
    expect(
        not np.allclose(mine[0], start_weights[0]),
        f"the workers trained ({len(trained)} worker_train tasks ran), but the weights you averaged are the starting "
        "ones: compss_wait_on returns the trained copies and leaves your lists as they were, so assign its result",
    )
    chained = [r for r in trained if r["parents"]]
    expect(
        not chained,
        f"{len(chained)} training task(s) waited for an earlier one: in synchronous averaging each epoch starts from "
        "new copies of the averaged weights, one per worker, so no training task waits for another",
    )
    options = {"workers": 2, "batch_size": batch_size, "weights": start_weights, "shards": shards}
    reference = averaging.fit_sync(network, None, None, epochs=2, **options).weights
    difference = _largest_difference(mine, reference)
    print(f"largest difference from course.averaging.fit_sync: {difference:.2e}")
    if difference >= 1e-4:
        one = averaging.fit_sync(network, None, None, epochs=1, **options).weights
        expect(
            _largest_difference(mine, one) >= 1e-4,
            "your result is one epoch of averaging: each epoch should start from the previous epoch's average",
        )
    expect(
        difference < 1e-4, "the weights differ from synchronous averaging: average after every epoch, from equal copies"
    )


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
