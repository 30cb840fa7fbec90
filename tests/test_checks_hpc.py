"""Notebook 11's checks, part one (11_job_scripts), tried directly on every answer the fixtures hold for its exercises
(tests/check_cases.py): course.checks.hpc (the two-node request), course.checks.sbatch_script (the batch script by
hand), and the short check cell that stays in the notebook (ex2), whose visible part runs as the notebook runs it. No
Slurm job is submitted: the notebook's own cells give what the exercises need as they do where no Slurm answers. Part
two's exercises (placement, the time limit, the srun command, the kernel): tests/test_checks_hpc_cluster.py."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from course import jobs
from course.checks import hpc, sbatch_script
from tests.check_cases import cases, cells_run, define, judge, run_in_shell, visible_check
from tests.conftest import MACHINE

# The batch script's check asks this machine's Slurm where one answers: its verdicts must not depend on whether another
# test started Slurm meanwhile, so it runs in the Slurm tests' worker, in file order (conftest.py)
pytestmark = pytest.mark.xdist_group(MACHINE)

NOTEBOOK = "11_job_scripts"
COVERED = {  # the answer cells whose fixture answers this module tries
    "ex1-answer",
    "ex2-answer",
    "ex-sbatch-answer",
}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """What the notebook defines before its exercises, with no Slurm here: WORK (a temporary folder) and TASK."""
    names = {"os": os, "tempfile": tempfile, "Path": Path, "jobs": jobs, "SLURM": False}
    with cells_run(tmp_path_factory, NOTEBOOK, ("TASK = sbatch_script.Exercise(",), names) as defined:
        yield defined


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_two_node_request(case, context):
    judge(case, lambda: hpc.two_node_request(define(case, context)["text"], context["WORK"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-sbatch-answer"}), ids=str)
def test_sbatch_script(case, context):
    def check():
        define(case, context)
        sbatch_script.check(context["WORK"] / "hvd_mnist.sbatch", context["TASK"])  # raises what is wrong

    judge(case, check)


@pytest.mark.parametrize(
    ("grade_id", "case"),
    [(g, case) for g in ("ex2",) for case in cases(NOTEBOOK, {f"{g}-answer"})],
    ids=str,
)
def test_check_cells(grade_id, case, context):
    """The short check cells that stay in the notebook, run on each answer as the notebook runs them."""
    judge(case, lambda: run_in_shell(visible_check(NOTEBOOK, f"{grade_id}-check"), define(case, context)))
