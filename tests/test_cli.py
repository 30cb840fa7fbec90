"""The command line answers user mistakes with one line and a non-zero status, never a traceback."""

import pytest

from tests.conftest import run_course


@pytest.mark.parametrize("args", [["frobnicate"], ["doctor", "--colour"], ["data"], ["data", "fetch", "mnist"], []])
def test_usage_errors_are_one_line_with_status_2(args):
    result = run_course(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "--help" in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_dataset_names_the_known_ones(offline_home):
    result = run_course("data", "where", "imagenet")
    assert result.returncode == 1
    assert result.stderr.strip() == "course: error: unknown dataset 'imagenet'; known datasets: mnist, fashion_mnist, cifar10"


def test_data_where_reports_the_fallback_offline(offline_home):
    result = run_course("data", "where")
    assert result.returncode == 0
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["mnist", "fallback"], ["fashion_mnist", "fallback"], ["cifar10", "fallback"]]


def test_help_lists_the_commands():
    result = run_course("--help")
    assert result.returncode == 0
    for command in ("doctor", "data", "lab"):
        assert command in result.stdout


def test_version_is_the_packages():
    from importlib.metadata import version

    result = run_course("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"course {version('ddl-hpc-course')}", result.stdout


@pytest.mark.parametrize("argv, dest, value", [
    (["train", "-n", "3"], "engines", 3), (["train", "--engines", "3"], "engines", 3),  # the count's older name
    (["cluster", "start", "--time", "0:30:00"], "time_limit", "0:30:00"),
    (["cluster", "start", "--time-limit", "0:30:00"], "time_limit", "0:30:00"),       # the limit's older name
])
def test_one_vocabulary_and_the_older_names_still_work(argv, dest, value):
    from course.cli import build_parser

    assert getattr(build_parser().parse_args(argv), dest) == value
