"""course.checks.task_graphs, notebook 01's checks, tried directly on every answer the fixtures hold for its four
exercises (tests/check_cases.py): each answer builds its task graph for real, on two engines as the notebook's
quick profile has, and the check reads what the runtime recorded."""

from __future__ import annotations

import numpy as np
import pytest

from course import tasks
from course.checks import task_graphs
from course.tasks import IN, INOUT, compss_wait_on, task
from tests.check_cases import cases, define, judge, shared_cluster, solution_answers

NOTEBOOK = "01_task_graphs"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer", "ex4-answer"}  # the answer cells whose fixture answers it tries
MSIZE, BSIZE = 3, 8  # the notebook's sizes for exercise 4


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """What the notebook defines before its exercises, on two local engines (shared with other fast tests)."""
    with shared_cluster(tmp_path_factory, 2):
        tasks.reset()  # a task graph of the module's own, on the shared engines
        try:
            names = {
                "np": np,
                "tasks": tasks,
                "task": task,
                "IN": IN,
                "INOUT": INOUT,
                "compss_wait_on": compss_wait_on,
                "MSIZE": MSIZE,
                "BSIZE": BSIZE,
            }
            exec(solution_answers(NOTEBOOK, {"ex4-given"})["ex4-given"], names)  # initialize_variables, A, B, C
            yield names
        finally:
            tasks.reset()


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_simple1(case, context):
    names = define(case, context)
    judge(case, lambda: task_graphs.simple1(names["ex1_sum"], names["ex1_units"], names["ex1_waits"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_simple2(case, context):
    names = define(case, context)
    judge(case, lambda: task_graphs.simple2(names["ex2_sum"], names["ex2_units"], names["ex2_waits"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_simple3(case, context):
    names = define(case, context)
    judge(case, lambda: task_graphs.simple3(names["ex3_arr"], names["ex3_units"], names["ex3_waits"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex4-answer"}), ids=str)
def test_simple4(case, context):
    names = define(case, context)
    judge(
        case,
        lambda: task_graphs.simple4(names["A"], names["B"], names["C"], MSIZE, names["ex4_units"], names["ex4_waits"]),
    )
