"""Notebook 08's checks of the numbers around a MirroredStrategy loop (the loop itself: course.checks.mirrored_loop):
the global batch and learning rate planned for a number of replicas (also on a table of counts, PLAN_CASES), the
speedup read from the measured epoch times, and the global batch that gives every replica the largest batch one
device holds.

    mirrored_scaling.plan_for_replicas(plan, PER_REPLICA_BATCH, BASE_LR)    # None, or what is wrong
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from course.checks import check, expect


# Exercise 1 beyond the notebook's 1 and 2 replicas: the rule holds for every count (replicas, name)
PLAN_CASES = (
    (3, "3 replicas (an odd count)"),
    (4, "4 replicas"),
    (8, "8 replicas (a node of 8 GPUs)"),
    (64, "64 replicas (8 nodes of 8 GPUs)"),
)


@check
def plan_for_replicas(plan: Callable[[int], Mapping], per_replica_batch: int, base_lr: float) -> None:
    """Exercise 1: plan(replicas) gives the global batch (per-replica batch x replicas) and the learning rate scaled
    linearly with the replicas from base_lr (not kept, not by the square root), on 1 and 2 replicas and every count
    of PLAN_CASES (odd, a node, several nodes)."""
    one = plan(1)
    expect(
        isinstance(one, dict) and {"global_batch", "learning_rate"} <= set(one),
        "plan should return a dict with global_batch and learning_rate",
    )
    expect(one["global_batch"] == per_replica_batch, "with one replica the global batch is the per-replica batch")
    expect(plan(2)["global_batch"] == 2 * per_replica_batch, "the global batch grows with the replicas")
    lr1, lr2 = plan(1)["learning_rate"], plan(2)["learning_rate"]
    expect(abs(lr1 - base_lr) < 1e-12, f"plan(1) gives learning rate {lr1}: one replica trains at BASE_LR = {base_lr}")
    expect(
        abs(lr2 - lr1) > 1e-12,
        f"plan(2) keeps the learning rate {lr2} of one replica, though its global batch is twice as large: scale "
        "the rate with the replicas, as the BSC hands-on does",
    )
    expect(
        abs(lr2 - 2 * base_lr) < 1e-12,
        f"plan(2) gives learning rate {lr2}: with twice the global batch, the linear rule doubles BASE_LR = {base_lr}",
    )
    for replicas, name in PLAN_CASES:
        got = plan(replicas)
        batch, rate = per_replica_batch * replicas, base_lr * replicas
        expect(
            got["global_batch"] == batch and abs(got["learning_rate"] - rate) < 1e-12,
            f"{name}: plan({replicas}) gives global batch {got['global_batch']} and learning rate "
            f"{got['learning_rate']:.6g}; the rule gives {batch} and {rate:.6g} (each {replicas} times one replica's)",
        )


@check
def speedup_per_replicas(speedup: object, results: Mapping[int, Mapping], replicas: Sequence[int]) -> None:
    """Exercise 5: `speedup` maps each replica count to the epoch time on 1 replica over the epoch time on that many
    (a ratio, the right way round)."""
    expect(
        isinstance(speedup, dict) and sorted(speedup) == sorted(replicas),
        "speedup needs one entry per replica count",
    )
    expect(abs(speedup[1] - 1) < 1e-9, "one replica against itself: speedup 1")
    n = max(replicas)
    t1, tn = results[1]["epoch_time"], results[n]["epoch_time"]
    expect(
        abs(speedup[n] - tn / t1) > 1e-9 or abs(t1 - tn) < 1e-12,
        f"speedup[{n}] = {speedup[n]:.3f} is {tn:.2f} s / {t1:.2f} s, the wrong way round: time on 1 over time on {n}",
    )
    expect(
        abs(speedup[n] - t1 / tn) < 1e-9,
        f"speedup[{n}] = {speedup[n]:.3f}, but epochs of {t1:.2f} s on 1 replica and {tn:.2f} s on {n} give another "
        "value",
    )


@check
def batch_per_replicas(batch_for_replicas: object, search: Any, replicas: Sequence[int]) -> None:
    """Exercise 6: `batch_for_replicas` maps each replica count to the largest per-device batch the search found
    (search.largest) times the replicas: each replica gets its own, not a share of one device's."""
    largest = search.largest
    expect(largest is not None, "the search found no batch that fits: lower the smallest candidate")
    expect(
        isinstance(batch_for_replicas, dict) and sorted(batch_for_replicas) == sorted(replicas),
        "one entry per replica count",
    )
    expect(batch_for_replicas[1] == largest, "one replica: the largest batch that fits one device")
    n = max(replicas)
    expect(
        batch_for_replicas[n] != largest or n == 1,
        f"batch_for_replicas[{n}] = {batch_for_replicas[n]}, the batch of one device: split over {n} replicas each "
        f"would get {largest // n}, not the largest that fits",
    )
    expect(
        batch_for_replicas[n] == largest * n,
        f"batch_for_replicas[{n}] = {batch_for_replicas[n]}: each of the {n} replicas should get {largest} images",
    )
