"""course.checks.class_results, notebook 10's check of the Horovod run's row in the class results table, tried
directly on every answer the fixtures hold for it (tests/check_cases.py). The run's summary is made up, as
course.programs.horovod_mnist reports it (course.perf.summarize: the median epoch without the first, and the
images of an epoch over it), for the quick profile's run (2 ranks, 2 epochs) and the full one's (4 ranks, 4)."""

from __future__ import annotations

import pytest

from course import perf, results
from course.checks import class_results
from tests.check_cases import Case, cases, define, judge

NOTEBOOK = "10_scaling_and_profiling"
COVERED = {"ex4-answer"}

RUNS = {  # profile -> (ranks, images per epoch, epoch times in seconds, test accuracy)
    "quick": (2, 400, [3.42, 1.87], 0.8125),
    "full": (4, 6000, [9.81, 4.12, 4.03, 4.26], 0.9614),
}


def summary(ranks: int, images: int, epoch_times: list[float], accuracy: float) -> dict:
    """What the notebook's hvd_summary holds after a run (the keys the exercise reads, and a few more)."""
    timed = perf.summarize(epoch_times, images)
    return {
        "size": ranks,
        "batch_per_rank": 50,
        "global_batch": 50 * ranks,
        "steps_per_epoch": images // (50 * ranks),
        "epoch_times": timed.epoch_times,
        "epoch_time": timed.epoch_time,
        "images_per_second": timed.images_per_second,
        "test_accuracy": accuracy,
    }


def run_answer(case: Case, context: dict) -> None:
    """The answer cell, as the notebook runs it: a wrong answer's cell may fail (the schema refuses a percentage
    as accuracy), and the check cell runs next all the same, on whatever the file holds."""
    try:
        define(case, context)
    except AssertionError:
        if case.right:
            raise


@pytest.mark.parametrize("profile", sorted(RUNS))
@pytest.mark.parametrize("case", cases(NOTEBOOK, COVERED), ids=str)
def test_horovod_row(case, profile, tmp_path):
    ranks, images, epoch_times, accuracy = RUNS[profile]
    hvd_summary = summary(ranks, images, epoch_times, accuracy)
    mine = tmp_path / "me.csv"
    run_answer(
        case,
        {
            "results": results,
            "MINE": mine,
            "hvd_summary": hvd_summary,
            "HVD_EPOCHS": len(epoch_times),
            "HVD_LIMIT": images,
            "WORKERS": [1, 2, 4][: ranks.bit_length()],
        },
    )
    judge(case, lambda: class_results.horovod_row(mine, hvd_summary))
