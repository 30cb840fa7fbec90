"""course.checks.gradient_descent, notebook 02's checks, tried directly on every answer the fixtures hold for its
exercises (tests/check_cases.py): on a few hundred centred images as the notebook prepares them, and on two
local engines as the notebook starts them."""

from __future__ import annotations

import numpy as np
import pytest

from course import data, nn
from course.checks import gradient_descent
from tests.check_cases import cases, define, judge, shared_cluster

NOTEBOOK = "02_sgd"
COVERED = {
    "ex1-answer",
    "ex2-answer",
    "ex3-answer",
    "ex-momentum-answer",
}  # the answer cells whose fixture answers this module tries
HIDDEN = 32  # the quick profile's hidden layer


@pytest.fixture(scope="module")
def images():
    """(X, Y): training images flattened and centred on their mean, as the notebook's section 1 leaves them."""
    (x_train, y_train), _ = data.load("mnist", limit=600)
    x = nn.flatten(x_train)
    return x - x.mean(axis=0), y_train


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines in a profile of their own, as the notebook starts them."""
    with shared_cluster(tmp_path_factory, 2) as engines:
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_training_step(case, images):
    x, y = images
    names = define(case, {"np": np, "nn": nn})
    params = nn.init([784, HIDDEN, 10], seed=5)
    judge(case, lambda: gradient_descent.training_step(names["train_step"], params, x[:64], y[:64]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_parallel_gradient(case, images, view):
    x, y = images
    names = define(case, {"np": np, "nn": nn})
    params = nn.init([784, HIDDEN, 10], seed=7)
    judge(case, lambda: gradient_descent.parallel_gradient(names["parallel_gradient"], view, params, x, y))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_warmup_schedule(case):
    names = define(case, {"np": np})
    judge(case, lambda: gradient_descent.warmup_schedule(names["lr_schedule"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-momentum-answer"}), ids=str)
def test_momentum(case):
    names = define(case, {"np": np, "nn": nn})
    judge(case, lambda: gradient_descent.momentum(names["momentum_step"]))
