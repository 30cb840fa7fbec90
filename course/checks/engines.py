"""Notebook 00's checks of work sent to an engine cluster: who answered (each engine its own process, rank and
size), where the shards were trained (read back from the controller's records of what ran on which engine,
course.checks.where, not from what the answer returned), and whether the cluster was stopped.

    whoami_answers(answers, cluster)                                 # ex1
    shards_trained(results, one, cluster, LIMIT, EPOCHS, BATCH)      # ex2
    stopped(final)                                                   # ex3

Each returns None, or what is wrong in words.
"""

from __future__ import annotations

from typing import Any

from course.checks import check, expect, where


@check
def whoami_answers(answers: Any, cluster: Any) -> None:
    """Exercise `ex1`: one answer per engine, each a dict of the engine's rank, size and process id, the pids all
    different (every engine is a process of its own)."""
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
