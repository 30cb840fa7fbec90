"""Notebook 08's checks tried directly on every answer the fixtures hold for its exercises (tests/check_cases.py):
course.checks.mirrored_scaling on the numbers (the quick profile's constants, made-up epoch times and batch search),
course.checks.mirrored_loop on the build, the step and the loop, in one fresh process with 2 logical CPU devices (as
the notebook's kernel has them: TensorFlow fixes its devices when it starts, so not in pytest's own process)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import os

import pytest

from course import perf
from course.checks import mirrored_scaling
from course.training import BatchSearch
from tests.check_cases import Case, cases, define, judge, outcome, solution_answers

NOTEBOOK = "08_mirrored_strategy"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer", "ex4-answer", "ex5-answer", "ex6-answer"}

PER_REPLICA_BATCH, BASE_LR, REPLICAS = 32, 0.05, [1, 2]  # the quick profile's
RESULTS = {  # made-up measurements as section 4 leaves them: 2 logical CPU devices sharing the cores
    1: {"replicas": 1, "global_batch": 32, "epoch_time": 1.84, "images_per_second": 812.0},
    2: {"replicas": 2, "global_batch": 64, "epoch_time": 1.37, "images_per_second": 1090.5},
}
SEARCH = BatchSearch(
    [256], {65536: "out of memory (ResourceExhaustedError: OOM)"}, 256, "batch 65536 ran out of memory"
)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_plan(case):
    names = define(case, {"PER_REPLICA_BATCH": PER_REPLICA_BATCH, "BASE_LR": BASE_LR})
    judge(case, lambda: mirrored_scaling.plan_for_replicas(names["plan"], PER_REPLICA_BATCH, BASE_LR))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex5-answer"}), ids=str)
def test_speedup(case):
    names = define(case, {"results": RESULTS, "REPLICAS": REPLICAS, "perf": perf})
    judge(case, lambda: mirrored_scaling.speedup_per_replicas(names["speedup"], RESULTS, REPLICAS))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex6-answer"}), ids=str)
def test_batch_for_replicas(case):
    context = {"search": SEARCH, "REPLICAS": REPLICAS, "PER_REPLICA_BATCH": PER_REPLICA_BATCH}
    names = define(case, context)
    judge(case, lambda: mirrored_scaling.batch_per_replicas(names["batch_for_replicas"], SEARCH, REPLICAS))


# ---- the loop's exercises, in a process of their own


def loop_check(grade_id: str, case: Case) -> str | None:
    """In the fresh process: define the case's cells (after the solution's earlier answers, as the notebook has
    them) and run what the exercise's check cell runs; returns what the check cell would show, or None."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from course import training

    training.replica_devices(2)  # the notebook's first cell: before TensorFlow starts (again: no change)
    import tensorflow as tf

    from course.checks import mirrored_loop

    tf.get_logger().setLevel("ERROR")
    earlier = {"ex2-answer": set(), "ex3-answer": set(), "ex4-answer": {"ex2-answer", "ex3-answer"}}[grade_id]
    answers = {**solution_answers(NOTEBOOK, earlier), **case.answers} if earlier else case.answers
    names = define(dataclasses.replace(case, answers=answers), {"tf": tf, "mirrored_loop": mirrored_loop})

    def build() -> None:
        mirrored_loop.check_build(names["build"])

    def step() -> None:
        mirrored_loop.check_step(names["replica_step"])
        mirrored_loop.check_step_cases(names["replica_step"])
        mirrored_loop.check_training_mode(names["replica_step"])

    def loop() -> None:
        comparison = mirrored_loop.compare_replicas(names["build"], names["train"])
        mirrored_loop.check_same_as_one_device(comparison)
        mirrored_loop.check_whole_batches(names["build"], names["train"])

    return outcome({"ex2-answer": build, "ex3-answer": step, "ex4-answer": loop}[grade_id])


@pytest.fixture(scope="module")
def tf_process():
    """One fresh Python process for every loop case: TensorFlow starts there once, with 2 logical CPU devices."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        pool.submit(os.getpid).result(timeout=120)  # the process starts now
        yield pool


@pytest.mark.parametrize(
    "grade_id,case",
    [(g, c) for g in ("ex2-answer", "ex3-answer", "ex4-answer") for c in cases(NOTEBOOK, {g})],
    ids=lambda value: str(value),
)
def test_loop(grade_id, case, tf_process):
    said = tf_process.submit(loop_check, grade_id, case).result(timeout=300)
    judge(case, lambda: said)
