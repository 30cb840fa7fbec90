"""course.checks.pipeline, the pipeline-schedule checks of notebook 13's part on model parallelism, tried directly on
every answer the fixtures hold for their exercises (tests/check_cases.py), on two local engines formed into a gloo
group as the notebook forms them: GPipe and 1F1B with 4 micro-batches, and the micro-batches in flight they held."""

from __future__ import annotations

import pytest

from course.checks import pipeline
from tests.check_cases import cases, define, judge, torch_engines

pytestmark = pytest.mark.slow

NOTEBOOK = "13_pytorch_tensor_and_pipeline_parallelism"
COVERED = {"ex-pipeline-answer", "ex-in-flight-answer"}
MICRO = 4
SCHEDULES = ("ScheduleGPipe", "Schedule1F1B")


@pytest.fixture(scope="module")
def view(tmp_path_factory):
    """Two local engines as one gloo group, as the notebook makes them."""
    with torch_engines(tmp_path_factory) as engines:
        yield engines.view


def _judged(view, names) -> str | None:
    for name in SCHEDULES:
        runs = view.apply_sync(pipeline.pipeline_run, names["make_schedule"], names["step"], name, MICRO)
        said = pipeline.schedule(runs, MICRO)
        if said:
            return f"{name}: {said}"
    return None


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-pipeline-answer"}), ids=str)
def test_schedule(case, view):
    names = define(case, {})
    judge(case, lambda: _judged(view, names))


@pytest.fixture(scope="module")
def measured(view):
    """The micro-batches each stage held, as the solution's schedules ran on the engines."""
    names = define(cases(NOTEBOOK, {"ex-pipeline-answer"})[0], {})
    held = {}
    for name in SCHEDULES:
        for run in view.apply_sync(pipeline.pipeline_run, names["make_schedule"], names["step"], name, MICRO):
            held[(name, run["rank"], 2, MICRO)] = pipeline.most_in_flight(run["ran"])
    return held


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-in-flight-answer"}), ids=str)
def test_in_flight(case, measured):
    judge(case, lambda: pipeline.in_flight_predicted(define(case, {})["in_flight"], measured))


def test_gpipe_holds_every_micro_batch_and_1f1b_one_per_stage_ahead(measured):
    """What the schedules ran, against their definitions (Huang et al., 2019; Narayanan et al., 2021)."""
    assert measured == {
        ("ScheduleGPipe", 0, 2, MICRO): MICRO,
        ("ScheduleGPipe", 1, 2, MICRO): MICRO,
        ("Schedule1F1B", 0, 2, MICRO): 2,
        ("Schedule1F1B", 1, 2, MICRO): 1,
    }
