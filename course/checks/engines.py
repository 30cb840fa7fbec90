"""Notebook 00's checks of work sent to an engine cluster: who answered (each engine asked who it is, and the
controller's records of the answer's own cell, course.cluster.cells), where the shards were trained (read back from the controller's records of what ran on which engine,
course.checks.where, not from what the answer returned), and whether the cluster was stopped.

    whoami_answers(answers, cluster)                                 # ex1
    shards_trained(results, one, cluster, LIMIT, EPOCHS, BATCH)      # ex2
    stopped(final)                                                   # ex3

Each returns None, or what is wrong in words.
"""

from __future__ import annotations

from typing import Any

from course.checks import check, deadline, expect, where
from course.cluster import cells


def identity() -> dict[str, int]:
    """On an engine: its process id, and its rank and size in its MPI world, asked of the process itself."""
    import os

    from mpi4py import MPI

    return {"pid": os.getpid(), "rank": MPI.COMM_WORLD.Get_rank(), "size": MPI.COMM_WORLD.Get_size()}


@check
def whoami_answers(answers: Any, cluster: Any) -> None:
    """Exercise `ex1`: one answer per engine, each a dict of the engine's rank, size and process id. Measured from
    outside the answer: the check asks every engine who it is, and the controller's records must show that each
    answer is what a call on that engine returned in the cell that made `answers` (not values copied from
    `cluster.engines`, nor an earlier cell's calls)."""
    expect(
        isinstance(answers, list) and len(answers) == len(cluster.ids),
        "answers should be a list with one entry per engine: use cluster.view.apply_sync(whoami)",
    )
    expect(
        all(isinstance(a, dict) and {"rank", "size", "pid"} <= set(a) for a in answers),
        "each answer should be a dictionary with the keys rank, size and pid",
    )
    expect(
        all(isinstance(a["rank"], int) and isinstance(a["size"], int) and 0 <= a["rank"] < a["size"] for a in answers),
        "each answer's rank should be a number from 0 to size - 1, and size the number of processes in the world",
    )
    expect(
        len({a["pid"] for a in answers}) == len(answers),
        "every engine is a separate process, so every pid should differ",
    )
    span = cells.requests_of(answers, cluster.client)  # before the check's own requests
    actual = dict(zip(cluster.ids, deadline.apply(cluster.view, identity)))
    engine_of = {facts["pid"]: engine for engine, facts in actual.items()}
    for a in answers:
        expect(
            a["pid"] in engine_of,
            f"pid {a['pid']} is no engine's process: run whoami on the engines (cluster.view), not in the notebook",
        )
        own = actual[engine_of[a["pid"]]]
        expect(
            (a["rank"], a["size"]) == (own["rank"], own["size"]),
            f"engine {engine_of[a['pid']]} is rank {own['rank']} of {own['size']}, but its answer says rank "
            f"{a['rank']} of {a['size']}: ask MPI.COMM_WORLD on the engine",
        )
    since, until = span if span is not None else (0, None)
    calls = where.engine_calls(cluster.client, since, until)
    unmade = [a for a in answers if not any(c.engine == engine_of[a["pid"]] and where.same(c.result, a) for c in calls)]
    expect(
        not unmade,
        "the answers were not returned by the engines: make them by calling whoami on every engine in the same "
        "cell (cluster.view.apply_sync(whoami)), not written out from what the notebook already knows",
    )


@check
def shards_trained(results: Any, one: dict, cluster: Any, limit: Any, epochs: int, batch: int) -> None:
    """Exercise `ex2`: one result per engine, shards 0 .. n-1 that together hold as many samples as the whole
    training set (`one`, the run on all of it); and, from the controller's records, that each result was computed
    by a call on an engine, every engine once, with the notebook's shard count, LIMIT, EPOCHS and BATCH."""
    n = len(cluster.ids)
    expect(isinstance(results, list) and len(results) == n, "results should hold one result per engine")
    expect(
        sorted(r["rank"] for r in results) == list(range(n)),
        "each engine should train on a different shard: ranks 0 .. n-1",
    )
    expect(
        sum(r["samples"] for r in results) == one["samples"],
        "the shards together should cover the whole training set, once",
    )
    ran = [c for c in where.engine_calls(cluster.client) if any(where.same(c.result, r) for r in results)]
    expect(
        len(ran) == len(results),
        "the results were not computed on the engines: run train_shard there (cluster.view), not in the notebook",
    )
    expect(len({c.engine for c in ran}) == n, "each engine should train one shard: every engine once")
    asked = {"size": n, "limit": limit, "epochs": epochs, "batch": batch}
    for call in ran:
        wrong = [
            f"{k}={call.arguments[k]!r}" for k, v in asked.items() if k in call.arguments and call.arguments[k] != v
        ]
        expect(
            not wrong,
            f"train_shard ran with {', '.join(wrong)}: pass the shard count, LIMIT, EPOCHS and BATCH as above",
        )


@check
def stopped(final: Any) -> None:
    """Exercise `ex3`: no cluster of this process still running, and `final` the status taken after stopping it."""
    import course.cluster

    expect(course.cluster.current() is None, "the cluster is still running: call cluster.stop()")
    expect(final.stopped, "store cluster.status() after stopping the cluster in final")
