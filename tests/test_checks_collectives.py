"""course.checks.collectives, notebook 03's checks, tried directly on every answer the fixtures hold for its
exercises (tests/check_cases.py), on two MPI engines as the notebook's quick profile has."""

from __future__ import annotations

import numpy as np
import pytest

from course.checks import collectives
from tests.check_cases import cases, define, judge, shared_cluster

NOTEBOOK = "03_parallelism_and_collectives"
# the answer cells whose fixture answers this module tries
COVERED = {"ex1-answer", "ex-predict-answer", "ex2-answer", "ex3-answer", "ex-fusion-answer"}


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two MPI engines in a profile of their own, as the notebook starts them."""
    with shared_cluster(tmp_path_factory, 2, engines="mpi") as engines:
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_smoothing(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.smoothing(names["smooth_local"], view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-predict-answer"}), ids=str)
def test_predictions(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.predictions(names["predict"], view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_ring(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.ring(names["my_ring_allreduce"], view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_parameter_server(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.parameter_server(names["my_parameter_server_allreduce"], view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-fusion-answer"}), ids=str)
def test_fusion(case, view):
    names = define(case, {"np": np})
    judge(case, lambda: collectives.fusion(names["fused_allreduce"], view))
