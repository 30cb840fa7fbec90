"""course.checks.speedup, notebook 10's checks of speedup, Amdahl, Gustafson, the faster device and the causes of a
sub-linear speedup, tried directly on every answer the fixtures hold for those exercises (tests/check_cases.py).
Where the notebook measures first (weak scaling, the device study), the answers get small made-up measurements of
the shape the quick profile (2 engines) and the full one (4) give."""

from __future__ import annotations

import pytest

from course.checks import speedup
from tests.check_cases import cases, define, judge

NOTEBOOK = "10_scaling_and_profiling"
COVERED = {"ex1-answer", "ex2-answer", "ex-gustafson-answer", "ex-device-answer", "ex3-answer"}

# What sections 2 and 5 measure, made up (seconds): weak scaling a little slower with more engines; per step, the
# slow device's computing four times the fast one's, divided among the workers, and the rest not divided.
MEASURED = {
    "quick": {
        "WORKERS": [1, 2],
        "weak_time": {1: 0.041, 2: 0.058},
        "DEVICE_MS": {"slow": 80.0, "fast": 20.0},
        "step_time": {"slow": {1: 0.0862, 2: 0.0468}, "fast": {1: 0.0261, 2: 0.0172}},
        "compute_time": {"slow": {1: 0.0803, 2: 0.0405}, "fast": {1: 0.0204, 2: 0.0105}},
    },
    "full": {
        "WORKERS": [1, 2, 4],
        "weak_time": {1: 0.21, 2: 0.24, 4: 0.29},
        "DEVICE_MS": {"slow": 80.0, "fast": 20.0},
        "step_time": {"slow": {1: 0.0851, 2: 0.0459, 4: 0.0265}, "fast": {1: 0.0256, 2: 0.0158, 4: 0.0118}},
        "compute_time": {"slow": {1: 0.0802, 2: 0.0403, 4: 0.0203}, "fast": {1: 0.0203, 2: 0.0104, 4: 0.0053}},
    },
}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_speedup_and_efficiency(case):
    names = define(case, {})
    judge(case, lambda: speedup.speedup_and_efficiency(names["scaling"], names["bsc"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_karp_flatt(case):
    names = define(case, {})
    judge(case, lambda: speedup.karp_flatt(names["serial_fraction"], names["f2"], names["limit"]))


@pytest.mark.parametrize("profile", sorted(MEASURED))
@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-gustafson-answer"}), ids=str)
def test_gustafson_law(case, profile):
    measured = MEASURED[profile]
    names = define(case, dict(measured))
    judge(
        case,
        lambda: speedup.gustafson_law(
            names["scaled_speedup"],
            names["gustafson_serial_share"],
            names["gustafson"],
            names["s_measured"],
            measured["weak_time"],
            measured["WORKERS"],
        ),
    )


@pytest.mark.parametrize("profile", sorted(MEASURED))
@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-device-answer"}), ids=str)
def test_faster_device(case, profile):
    measured = MEASURED[profile]
    names = define(case, dict(measured))
    judge(
        case,
        lambda: speedup.faster_device(
            names["efficiencies"],
            names["device_efficiency"],
            names["rest_ms"],
            names["faster_device"],
            measured["step_time"],
            measured["compute_time"],
            measured["WORKERS"],
        ),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_sublinear_causes(case):
    names = define(case, {})
    judge(case, lambda: speedup.sublinear_causes(names["sublinear"]))


def test_the_made_up_device_study_shows_the_lesson():
    """The made-up measurements have the shape the exercise teaches: the fast device's efficiency is the lower."""
    for measured in MEASURED.values():
        most, times = max(measured["WORKERS"]), measured["step_time"]
        slow, fast = (times[d][1] / (most * times[d][most]) for d in ("slow", "fast"))
        assert fast < slow
