"""course.checks.tensor_parallel, the tensor, sequence and 2-D mesh checks of notebook 13's part on model
parallelism, tried directly on every answer the fixtures hold for their exercises (tests/check_cases.py): on two
local engines formed into a gloo group as the notebook forms them, and the 2-D mesh's answers all in one new gloo
job of 4 ranks, as the notebook runs them."""

from __future__ import annotations

import pytest

from course.checks import ddp, tensor_parallel
from tests.check_cases import cases, define, judge, torch_engines

pytestmark = pytest.mark.slow

NOTEBOOK = "13_pytorch_tensor_and_pipeline_parallelism"
COVERED = {"ex-tp-answer", "ex-sp-answer", "ex-mesh-answer"}


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory) as engines:
        yield engines.view


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-tp-answer"}), ids=str)
def test_tensor_parallel(case, view):
    parallelize = define(case, {})["parallelize"]
    judge(case, lambda: tensor_parallel.tensor_parallel(view.apply_sync(tensor_parallel.tp_run, parallelize)))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-sp-answer"}), ids=str)
def test_sequence_parallel(case, view):
    parallelize = define(case, {})["parallelize_sp"]
    judge(case, lambda: tensor_parallel.sequence_parallel(view.apply_sync(tensor_parallel.sp_run, parallelize)))


MESH_CASES = cases(NOTEBOOK, {"ex-mesh-answer"})


@pytest.fixture(scope="module")
def mesh_runs():
    """Every mesh answer's runs, from one job of 4 ranks with tp = 2: by case, by rank."""
    answers = []
    for case in MESH_CASES:
        names = define(case, {})
        answers.append((names["mesh_2d"], names["parallelize_2d"]))
    by_rank = ddp.on_gloo_ranks(tensor_parallel.mesh_runs, 4, answers, 2)
    return {str(case): [rank[i] for rank in by_rank] for i, case in enumerate(MESH_CASES)}


@pytest.mark.parametrize("case", MESH_CASES, ids=str)
def test_two_d(case, mesh_runs):
    judge(case, lambda: tensor_parallel.two_d(mesh_runs[str(case)], 2))


def test_the_mesh_check_knows_one_tensor_parallel_group_of_all_ranks():
    """tp = 4 on 4 ranks (the hidden case): no data-parallel group to gather over, and the solution passes."""
    names = define(MESH_CASES[0], {})
    runs = ddp.on_gloo_ranks(tensor_parallel.mesh_run, 4, names["mesh_2d"], names["parallelize_2d"], 4)
    assert {r["groups"]["tp"] for r in runs} == {(0, 1, 2, 3)}
    assert tensor_parallel.two_d(runs, 4) is None
