"""`python -m course train`: bad input answered in one line before anything starts; a real run appends its rows."""

from __future__ import annotations

import csv
import os

import pytest

from course import results
from tests.conftest import run_course


def offline_env(tmp_path) -> dict:
    env = dict(os.environ, COURSE_OFFLINE="1", KERAS_HOME=str(tmp_path / ".keras"))
    env.pop("COURSE_DATA_DIR", None)
    return env


@pytest.mark.parametrize(
    "args, message",
    [
        (["--dataset", "imagenet"], "unknown dataset 'imagenet'; valid: mnist, cifar10"),
        (["--network", "resnet"], "unknown network 'resnet'; valid: simple-mnist, lenet, vgg16"),
        (["--sync", "3"], "unknown sync type '3'; valid: sync, async, full-async (or 0, 1, 2"),
        (["--sync", "fast"], "unknown sync type 'fast'"),
        (["--workers", "0"], "--workers must be 1 or more, not 0"),
        (["--workers", "-4"], "--workers must be 1 or more, not -4"),
        (["--epochs", "0"], "--epochs must be 1 or more, not 0"),
        (["--runs", "0"], "--runs must be 1 or more, not 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_1(args, message, tmp_path):
    done = run_course("train", *args, env=offline_env(tmp_path), timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.strip().splitlines() == [f"course: error: {done.stderr.strip()[15:]}"]
    assert message in done.stderr
    assert "Traceback" not in done.stderr and "MODEL TRAINING" not in done.stdout


def test_not_a_number_is_a_usage_error(tmp_path):
    done = run_course("train", "--workers", "two", env=offline_env(tmp_path), timeout=120)
    assert done.returncode == 2 and "invalid int value: 'two'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "where, message",
    [
        ("missing/results.csv", "the folder"),
        ("", "is a directory"),
        ("other.csv", "is not a course results file"),
    ],
)
def test_unwritable_results_file_fails_before_training(where, message, tmp_path):
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    target = tmp_path / where if where else tmp_path
    done = run_course("train", "--results", str(target), env=offline_env(tmp_path), timeout=120)
    assert done.returncode == 1
    assert message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert done.stdout == "", "it trained (or printed a model) before refusing the results file"
    assert (tmp_path / "other.csv").read_text() == "a,b\n1,2\n", "the foreign file was changed"


@pytest.mark.slow
def test_a_real_run_prints_the_seed_lines_and_appends_a_row_per_run(tmp_path):
    out = tmp_path / "class.csv"
    results.append_row(out, {"strategy": "sync", "workers": 1, "elapsed_s": 9.5, "learner": "earlier"})
    done = run_course(
        "train",
        "--workers",
        "3",
        "--epochs",
        "2",
        "--sync",
        "2",
        "--runs",
        "2",
        "--limit",
        "120",
        "--batch-size",
        "20",
        "-n",
        "2",
        "--results",
        str(out),
        env=offline_env(tmp_path),
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    text = done.stdout
    for line in (
        "Total params",
        "MODEL TRAINING",
        "Num workers: 3 on 2 engines; sync type: full-async",
        "Elapsed time for epoch range (1-1):",
        "Elapsed time for epoch range (2-2):",
        "Total elapsed time:",
        "Test loss:",
        "Run 2 of 2",
        f"Appended run 2 to {out}",
    ):
        assert line in text, f"missing {line!r} in:\n{text}"
    with open(out, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 3 and rows[0]["learner"] == "earlier", "the earlier row was lost or changed"
    for number, row in enumerate(rows[1:], start=1):
        assert (row["strategy"], row["workers"], row["epochs"], row["engines"], row["run"], row["batch_size"]) == (
            "full-async",
            "3",
            "2",
            "2",
            str(number),
            "20",
        )
        assert row["dataset"] == "digits" and row["network"] == "simple-mnist"
        assert 0.0 <= float(row["accuracy"]) <= 1.0 and float(row["elapsed_s"]) > 0
    assert not results.collect(out).problems
