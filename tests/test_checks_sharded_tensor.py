"""course.checks.sharded, the checks of notebook 09's part two (09_tensor_parallelism), tried directly on every answer
the fixtures hold for its exercises (tests/check_cases.py): the tensor-parallel block on two MPI engines, as the
notebook runs it, the grid on new 8- and 6-rank `mpiexec` jobs, and the layout quiz. Part one's exercises (ZeRO):
tests/test_checks_sharded.py."""

from __future__ import annotations

import numpy as np
import pytest

from course.checks import sharded
from tests.check_cases import cases, define, judge, shared_cluster

NOTEBOOK = "09_tensor_parallelism"
COVERED = {"ex-tensor-answer", "ex-grid-answer", "ex-choice-answer"}  # the answer cells whose fixture answers it tries
RANKS = 2  # the notebook's quick profile


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two MPI engines in a profile of their own, as the notebook starts them."""
    with shared_cluster(tmp_path_factory, RANKS, engines="mpi") as engines:
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-tensor-answer"}), ids=str)
def test_tensor_parallel(case, view):
    judge(case, lambda: sharded.tensor_parallel(define(case, {"np": np})["tensor_parallel_mlp"], view))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-grid-answer"}), ids=str)
def test_grid(case):
    def run():
        found = sharded.grid_found(define(case, {})["grid"])
        return sharded.grid_cases(found, [c for c in sharded.GRID_CASES if not c.hidden])

    judge(case, run)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-choice-answer"}), ids=str)
def test_choice(case):
    def run():
        names = define(case, {})
        return sharded.choice(names["layout"], names["reasons"], names["stage3"])

    judge(case, run)
