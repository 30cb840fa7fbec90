"""course.checks.parameter_averaging, notebook 05's checks, tried directly on every answer the fixtures hold for
its exercises (tests/check_cases.py): on two local engines that have built the quick profile's model, with its
data, starting weights, batch size and epochs, as the notebook's first cells leave them."""

from __future__ import annotations

import numpy as np
import pytest

from course import averaging, data, tasks
from course.averaging import Network, master_average, worker_train
from course.checks import parameter_averaging
from course.tasks import COMMUTATIVE, INOUT, compss_wait_on, task
from tests.check_cases import cases, define, judge, shared_cluster

NOTEBOOK = "05_parameter_averaging"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer"}  # the answer cells whose fixture answers this module tries
BATCH, EPOCHS = 32, 2  # the quick profile's


@pytest.fixture(scope="module")
def notebook(tmp_path_factory) -> dict:
    """What the notebook defines before its exercises: the task API, the data, the network and its starting
    weights, and two engines that have built the model (the cluster the task runtime uses)."""
    import tensorflow as tf

    (x_train, y_train), _ = data.load("mnist", limit=600)
    network = Network("simple-mnist", tuple(x_train.shape[1:]), 10)
    tf.keras.utils.set_random_seed(0)
    start_weights = network.build().get_weights()
    with shared_cluster(tmp_path_factory, 2) as engines:
        try:
            tasks.reset()
            averaging.master_build_workers(engines.view, network)
            yield {
                "np": np,
                "averaging": averaging,
                "data": data,
                "tasks": tasks,
                "task": task,
                "INOUT": INOUT,
                "COMMUTATIVE": COMMUTATIVE,
                "compss_wait_on": compss_wait_on,
                "worker_train": worker_train,
                "master_average": master_average,
                "network": network,
                "start_weights": start_weights,
                "x_train": x_train,
                "y_train": y_train,
                "BATCH": BATCH,
                "EPOCHS": EPOCHS,
            }
        finally:
            tasks.reset()


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_placement(case):
    names = define(case, {})
    judge(case, lambda: parameter_averaging.placement(names["WHERE"], names["BARRIERS"], names["TASKS"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_synchronous_loop(case, notebook):
    names = define(case, notebook)
    n = notebook
    judge(
        case,
        lambda: parameter_averaging.synchronous_loop(
            names["my_fit_sync"], n["network"], n["x_train"], n["y_train"], n["start_weights"], BATCH
        ),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_relaxed_fold(case, notebook):
    names = define(case, notebook)
    judge(case, lambda: parameter_averaging.relaxed_fold(names["fold"]))
