"""Notebook 11's checks, part two (11_running_on_a_cluster), tried directly on every answer the fixtures hold for its
exercises (tests/check_cases.py): course.checks.sbatch_script (the srun command) and the short check cells that stay
in the notebook (ex3-ex5), whose visible part runs as the notebook runs it. No Slurm job is submitted: the notebook's
own cells give what the exercises need as they do where no Slurm answers (the rank map runs under `mpiexec`, the
kernel spec is installed into a temporary prefix). Part one's exercises: tests/test_checks_hpc.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from course import jobs
from course.checks import sbatch_script
from tests.check_cases import cases, cells_run, define, judge, run_in_shell, visible_check

NOTEBOOK = "11_running_on_a_cluster"
COVERED = {  # the answer cells whose fixture answers this module tries
    "ex3-answer",
    "ex4-answer",
    "ex-srun-answer",
    "ex5-answer",
}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """What the notebook defines before its exercises, with no Slurm here: WORK (a temporary folder), the rank
    map's run_placement and CORES, the time-limit .err line; temporary folders (kernel prefixes) made under it."""
    names = {"os": os, "tempfile": tempfile, "Path": Path, "jobs": jobs, "SLURM": False}
    with cells_run(tmp_path_factory, NOTEBOOK, ("def run_placement(", "timeout_err = ("), names) as defined:
        yield defined


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-srun-answer"}), ids=str)
def test_srun(case, context):
    def check():
        command = define(case, context)["DOCTOR_ON_A_NODE"]
        program = [context["sys"].executable, "-m", "course", "doctor", "--json"]
        return "; ".join(sbatch_script.srun_problems(command, 1, 1, "00:05:00", program)) or None

    judge(case, check)


@pytest.mark.parametrize(
    ("grade_id", "case"),
    [(g, case) for g in ("ex3", "ex4", "ex5") for case in cases(NOTEBOOK, {f"{g}-answer"})],
    ids=str,
)
def test_check_cells(grade_id, case, context):
    """The short check cells that stay in the notebook, run on each answer as the notebook runs them."""
    judge(case, lambda: run_in_shell(visible_check(NOTEBOOK, f"{grade_id}-check"), define(case, context)))
