"""Notebook 11's checks, part two (11_running_on_a_cluster), tried directly on every answer the fixtures hold for its
exercises (tests/check_cases.py): course.checks.sbatch_script (the srun command) and the short check cells that stay
in the notebook (ex3-ex5), whose visible part runs as the notebook runs it. No Slurm job is submitted: the notebook's
own cells give what the exercises need as they do where no Slurm answers (the rank map runs under `mpiexec`, the
kernel spec is installed into a temporary prefix). Part one's exercises: tests/test_checks_hpc.py."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from course import jobs
from course.checks import sbatch_script
from tests.check_cases import cases, define, judge
from tests.conftest import ROOT

NOTEBOOK = "11_running_on_a_cluster"
COVERED = {  # the answer cells whose fixture answers this module tries
    "ex3-answer",
    "ex4-answer",
    "ex-srun-answer",
    "ex5-answer",
}
CELLS = json.loads((ROOT / "solutions" / f"{NOTEBOOK}.ipynb").read_text())["cells"]


def notebook_cell(marker: str) -> str:
    """The source of the solution notebook's one code cell holding `marker`."""
    (source,) = ["".join(c["source"]) for c in CELLS if c["cell_type"] == "code" and marker in "".join(c["source"])]
    return source


def check_cell(grade_id: str) -> str:
    """The visible part of a check cell (its hidden tests left out), as the learner's notebook runs it."""
    (source,) = ["".join(c["source"]) for c in CELLS if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id]
    return source.split("### BEGIN HIDDEN TESTS")[0]


def run(source: str, names: dict) -> str | None:
    """Run `source` in the IPython shell holding `names` (what `define` left there); its error in words, or None."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    shell.user_ns.update(names)
    result = shell.run_cell(source, store_history=False, silent=True)
    if result.success:
        return None
    error = result.error_in_exec or result.error_before_exec
    return f"{type(error).__name__}: {error}"


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """What the notebook defines before its exercises, with no Slurm here: WORK (a temporary folder), the rank
    map's run_placement and CORES, the time-limit .err line; temporary folders (kernel prefixes) made under it."""
    from IPython.core.interactiveshell import InteractiveShell

    work = tmp_path_factory.mktemp("hpc")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tempfile, "tempdir", str(work))
        names = {"os": os, "tempfile": tempfile, "Path": Path, "jobs": jobs, "WORK": work, "SLURM": False}
        for marker in ("def run_placement(", "timeout_err = ("):
            problem = run(notebook_cell(marker), names)
            assert problem is None, f"the notebook's cell with {marker!r}: {problem}"
            names = dict(InteractiveShell.instance().user_ns)
        yield names


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
    judge(case, lambda: run(check_cell(f"{grade_id}-check"), define(case, context)))
