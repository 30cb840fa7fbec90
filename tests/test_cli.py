"""The command line answers user mistakes with one line and a non-zero status, never a traceback."""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from course.grading.student_copy import INSTRUCTOR_ONLY
from tests.conftest import ROOT, run_course


@pytest.mark.parametrize(
    "args",
    [
        ["frobnicate"],
        ["doctor", "--colour"],
        ["data"],
        ["data", "fetch", "mnist"],
        [],
        ["job", "status"],
        ["job", "cancel", "1", "2"],
        ["job", "wait", "1", "--colour"],
    ],
)
def test_usage_errors_are_one_line_with_status_2(args):
    result = run_course(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "error:" in lines[0] and "--help" in lines[0]
    assert "Traceback" not in result.stderr


def test_unknown_dataset_names_the_known_ones(offline_home):
    result = run_course("data", "where", "imagenet")
    assert result.returncode == 1
    assert (
        result.stderr.strip()
        == "course: error: unknown dataset 'imagenet'; known datasets: mnist, fashion_mnist, cifar10"
    )


def test_data_where_reports_the_fallback_offline(offline_home):
    result = run_course("data", "where")
    assert result.returncode == 0
    assert [line.split() for line in result.stdout.splitlines()] == [
        ["mnist", "fallback"],
        ["fashion_mnist", "fallback"],
        ["cifar10", "fallback"],
    ]


def test_every_command_the_help_lists_has_its_own_help(capsys):
    """The commands `--help` lists are the ones that parse: each answers `COMMAND --help` with its own usage."""
    import re

    from course import cli

    result = run_course("--help")
    assert result.returncode == 0
    listed = re.findall(r"^    ([a-z][a-z-]+)", result.stdout, re.M)
    assert {"doctor", "data", "cluster", "grade", "lab", "job", "mutation-report"} <= set(listed), listed
    for command in listed:
        with pytest.raises(SystemExit) as ended:
            cli.main([command, "--help"])
        assert ended.value.code == 0, command
        assert capsys.readouterr().out.startswith(f"usage: python -m course {command}"), command


def test_the_student_copys_package_has_a_command_line_without_the_instructors_tools(tmp_path):
    """The student copy leaves course/mutation/ (and course/answers.py) out: its command line still runs, without
    mutation-report. -S: the copied package alone, not this environment's editable install of the checkout."""
    left_out = [Path(p).name for p in INSTRUCTOR_ONLY if p.startswith("course/")]
    shutil.copytree(ROOT / "course", tmp_path / "course", ignore=shutil.ignore_patterns("__pycache__", *left_out))
    path = os.pathsep.join([str(tmp_path), sysconfig.get_paths()["purelib"]])
    env = {**os.environ, "PYTHONPATH": path}
    done = subprocess.run(
        [sys.executable, "-S", "-m", "course", "--help"], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "student-copy" in done.stdout and "mutation-report" not in done.stdout, done.stdout


def test_version_is_the_packages():
    from importlib.metadata import version

    result = run_course("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"course {version('ddl-hpc-course')}", result.stdout


@pytest.mark.parametrize(
    "argv, dest, value",
    [
        (["train", "-n", "3"], "engines", 3),
        (["train", "--engines", "3"], "engines", 3),  # the count's older name
        (["cluster", "start", "--time", "0:30:00"], "time_limit", "0:30:00"),
        (["cluster", "start", "--time-limit", "0:30:00"], "time_limit", "0:30:00"),  # the limit's older name
    ],
)
def test_one_vocabulary_and_the_older_names_still_work(argv, dest, value):
    from course.cli import build_parser

    assert getattr(build_parser().parse_args(argv), dest) == value


@pytest.mark.parametrize(
    "argv, action, job_id",
    [
        (["job", "status", "12"], "status", "12"),
        (["job", "output", "12"], "output", "12"),
        (["job", "cancel", "12"], "cancel", "12"),
        (["job", "wait", "12", "--timeout", "5"], "wait", "12"),
    ],
)
def test_job_actions_are_subcommands_with_their_own_options(argv, action, job_id, capsys):
    """`job status|wait|output|cancel JOBID` are subcommands (`job wait --help` shows only wait's options), while
    `job WORKLOAD` still takes a workload's name."""
    from course import cli

    with pytest.raises(SystemExit):
        cli.main([*argv[:2], "--help"])
    shown = capsys.readouterr().out
    assert f"python -m course job {action}" in shown and "JOBID" in shown
    assert ("--timeout" in shown) == (action == "wait") and "--nodes" not in shown, shown
    workload = cli.build_parser().parse_args(["job", "horovod", "--nodes", "2"])
    assert (workload.workload, workload.nodes) == ("horovod", 2)
