"""course.checks.horovod, the checks of notebook 07's part two (07_horovod_script), tried directly on every answer
the fixtures hold for its exercises on the runs (tests/check_cases.py): small made-up runs and a made-up timeline
breakdown stand in for the `horovodrun` launches. The script exercise (`ex-script-answer`) needs a `horovodrun` of each
script (about 25 s each): tests/test_checks_horovod_script.py tries those on real runs."""

from __future__ import annotations

import pytest

from course import perf
from course.checks import horovod, quiz
from course.perf import TimelineBreakdown
from tests.check_cases import cases, defined, judge

NOTEBOOK = "07_horovod_script"
COVERED = {"ex5-answer", "ex6-answer", "ex-tta-answer", "ex7-answer"}


# Made-up runs as section 2 leaves them (course.programs.horovod_mnist's SUMMARY): 2 ranks on 2 shared cores
RUNS = {
    1: {"epoch_times": [3.9, 1.21, 1.18, 1.2], "epoch_time": 1.2, "images_per_second": 500.0},
    2: {"epoch_times": [5.2, 0.98, 1.01, 1.0], "epoch_time": 1.0, "images_per_second": 600.0},
}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex5-answer"}), ids=str)
def test_efficiency(case):
    names = defined(case, {"perf": perf, "runs": RUNS, "RANKS": [1, 2]})
    judge(case, lambda: horovod.efficiency_per_ranks(names["efficiency"], RUNS, [1, 2]))


BREAKDOWN = TimelineBreakdown(  # made-up, as perf.timeline_breakdown reads a 2-rank timeline
    span=14.2,
    negotiation=1.9,
    allreduce=0.8,
    compute=11.7,
    ranks={
        0: {"negotiation": 0.42, "allreduce": 0.8, "no collective open": 11.7},
        1: {"negotiation": 1.61, "allreduce": 0.8, "no collective open": 11.7},
    },
    tensors=8,
)


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex6-answer"}), ids=str)
def test_collective_share(case):
    names = defined(case, {"breakdown": BREAKDOWN})
    judge(
        case,
        lambda: horovod.collective_share_and_wait(names["collective_share"], names["most_waiting"], BREAKDOWN),
    )


CANDIDATES = {  # made-up, as section 4 builds them from the runs: 1 rank, and 2 ranks under each rule
    name: {"val_accuracy": accuracy, "epoch_time": times[1], "epoch_times": times}
    for name, accuracy, times in (
        ("1 rank", [0.55, 0.71, 0.8, 0.84], [3.9, 1.2, 1.21, 1.19]),
        ("2 ranks, none", [0.3, 0.5, 0.62, 0.69], [5.2, 1.0, 1.01, 0.99]),
        ("2 ranks, linear", [0.45, 0.7, 0.78, 0.83], [5.1, 1.0, 0.98, 1.02]),
        ("2 ranks, sqrt", [0.4, 0.66, 0.74, 0.8], [5.3, 1.0, 1.0, 1.01]),
    )
}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-tta-answer"}), ids=str)
def test_time_to_accuracy(case):
    names = defined(case, {"candidates": CANDIDATES, "TARGET": 0.7, "SCRIPT_EPOCHS": 4})
    judge(
        case,
        lambda: horovod.time_to_accuracy_functions(
            names["time_to_accuracy"], names["fastest"], names["FASTEST"], CANDIDATES
        ),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex7-answer"}), ids=str)
def test_quiz(case):
    names = defined(case, {})
    judge(case, lambda: quiz.check(names["answers"], horovod.QUIZ_KEY, horovod.QUIZ_WHY))
