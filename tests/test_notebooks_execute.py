"""Every instructor notebook (solutions/*.ipynb) runs top to bottom in the quick profile on a clean kernel,
as CI and Binder run it, stops the clusters it started, and nbgrader's own validator (what `nbgrader validate`
runs) accepts it, and its peak memory (kernel, engines and their children, sampled while it runs) stays under
Binder's 2 GB. Every student notebook (notebooks/*.ipynb) runs up to its first unanswered exercise with
no cell before it failing, and that exercise, left unanswered, says so.

The notebooks are slow, and each runs once for all of its checks: the strength test's run (tests/answer_trials.py,
which also tries every answer and released stub in place) is held to the above in tests/test_strength.py.
A student notebook's cells before its first exercise are the solution's (checked here, without a kernel), so the
solution's run covers them. Here run only the notebooks that act on NBGRADER_EXECUTION (11 submits its Slurm jobs
only outside grading), solution and student version, as a learner runs them.
The instructor's dry run (`python -m course run`) is tested on small notebooks in tests/test_run.py.
"""

from __future__ import annotations

import time

import pytest
from nbgrader.validator import Validator
from traitlets.config import Config

from course import cluster, memory, run
from course.grading import KERNEL_START_TIMEOUT
from tests.conftest import MACHINE, ROOT
from tests.grading_support import errors, first_answer, reads_grading_mode

# Notebook 11 (both parts) submits its jobs to this machine's Slurm where one answers: it runs in the Slurm tests' worker (conftest.py)
pytestmark = pytest.mark.xdist_group(MACHINE)

NOTEBOOKS = [p for p in sorted((ROOT / "solutions").glob("*.ipynb")) if reads_grading_mode(p)]
RELEASED = sorted((ROOT / "notebooks").glob("*.ipynb"))
RELEASED_READING_GRADING_MODE = [ROOT / "notebooks" / p.name for p in NOTEBOOKS]  # their graded run is not a learner's
WITHOUT_FIGURES = {"11_job_scripts", "11_running_on_a_cluster"}  # they write and submit job scripts; nothing to measure


class RecordingValidator(Validator):
    """nbgrader's Validator, keeping the notebook it executed so the test can also look at every cell."""

    executed = None

    def _preprocess(self, nb):
        self.executed = super()._preprocess(nb)
        return self.executed


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes_and_nbgrader_validates_it(path, tmp_path, monkeypatch):
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))  # its clusters live apart from anyone else's
    monkeypatch.setenv("COURSE_PROFILE", "quick")
    monkeypatch.setenv("COURSE_CLUSTER_ID", f"nbtest-{path.stem}")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    validator = RecordingValidator(
        config=Config({"Execute": {"timeout": run.CELL_TIMEOUT, "startup_timeout": KERNEL_START_TIMEOUT}})
    )
    started, left_running, peak = time.perf_counter(), None, memory.PeakMemory()
    try:
        with peak:  # the kernel is a child of this process, its engines are the kernel's
            verdict = validator.validate(str(path))
        left_running = cluster.running_ids()
    finally:  # the slowest and the largest notebook, visible with -s
        print(f"{path.name}: {time.perf_counter() - started:.1f} s, peak memory {memory.megabytes(peak.peak)}")
        cluster.stop(f"nbtest-{path.stem}")  # a failing notebook must not leave engines behind
    assert validator.executed is not None and validator.executed.metadata.kernelspec.name == run.KERNEL
    assert errors(validator.executed) == [], f"{path.name} raised while running top to bottom"
    assert verdict == {}, f"nbgrader's validator rejects {path.name}: {verdict}"
    assert left_running == [], f"{path.name} left its cluster(s) {left_running} running: end it with a stop cell"
    assert 0 < peak.peak < memory.BINDER_LIMIT, (
        f"{path.name} peaked at {memory.megabytes(peak.peak)}: Binder restarts "
        f"the kernel above {memory.megabytes(memory.BINDER_LIMIT)}"
    )
    if path.stem not in WITHOUT_FIGURES:  # what `course run` shows an instructor in its index
        assert run.figures_in(validator.executed), f"{path.name} publishes no key figure (course.run.key_figure)"


def as_run(cell) -> tuple:
    """What a kernel is given of a cell: its type and source, and its tags (nbclient skips or expects errors by tag)."""
    return cell.cell_type, cell.source, cell.metadata.get("tags", [])


@pytest.mark.parametrize("path", RELEASED, ids=[p.stem for p in RELEASED])
def test_released_notebook_up_to_its_first_exercise_is_the_solution(path):
    """The student notebook's cells before its first exercise are the solution's, as run (release only locks them
    and adds nbgrader metadata), and its first exercise is the solution's first: the solution's run top to bottom in
    the strength test, free of errors, is a learner's run up to there, and there it tries the released stub."""
    import nbformat

    solution_path = ROOT / "solutions" / path.name
    assert solution_path.is_file(), f"{path.name} has no solution notebook in solutions/"
    released, solution = (nbformat.read(str(p), as_version=4) for p in (path, solution_path))
    stop_at = first_answer(released)
    assert stop_at == first_answer(solution), (
        f"{path.name}: its first exercise is cell {stop_at}, the solution's is cell {first_answer(solution)}"
    )
    for index in range(stop_at):
        assert as_run(released.cells[index]) == as_run(solution.cells[index]), (
            f"{path.name}: cell {index}, before the first exercise, is not the solution's (run: python -m course release)"
        )
    grade_ids = [nb.cells[stop_at].metadata.nbgrader.get("grade_id") for nb in (released, solution)]
    assert grade_ids[0] == grade_ids[1], (
        f"{path.name}: its first exercise is {grade_ids[0]}, the solution's {grade_ids[1]}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("path", RELEASED_READING_GRADING_MODE, ids=[p.stem for p in RELEASED_READING_GRADING_MODE])
def test_released_notebook_runs_to_its_first_exercise(path, tmp_path, monkeypatch):
    """A learner who opens the student notebook and runs from the top meets no error before the first exercise,
    and that exercise, left unanswered, says so (NotImplementedError) rather than failing some other way. Only for
    notebooks that act on NBGRADER_EXECUTION: for the others the strength test's graded run shows the same
    (test_released_notebook_up_to_its_first_exercise_is_the_solution, test_every_unanswered_exercise_says_so)."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("COURSE_PROFILE", "quick")
    monkeypatch.setenv("COURSE_CLUSTER_ID", f"nbstudent-{path.stem}")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    notebook = nbformat.read(str(path), as_version=4)
    stop_at = first_answer(notebook)
    notebook.cells = notebook.cells[: stop_at + 1]
    client = NotebookClient(
        notebook,
        kernel_name=run.KERNEL,
        timeout=run.CELL_TIMEOUT,
        startup_timeout=KERNEL_START_TIMEOUT,
        allow_errors=True,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    finally:
        cluster.stop(f"nbstudent-{path.stem}")
    before = errors(nbformat.from_dict({"cells": notebook.cells[:stop_at]}))
    assert before == [], f"{path.name} fails before its first exercise (cell {stop_at})"
    raised = [out for out in notebook.cells[stop_at].get("outputs", []) if out.output_type == "error"]
    # on %%px cells the engines' NotImplementedError is shown first, then ipyparallel raises AlreadyDisplayedError
    shown = "\n".join(
        str(out.get("text", "")) + "\n".join(out.get("traceback", [])) + str(out.get("data", ""))
        for out in notebook.cells[stop_at].get("outputs", [])
    )
    unexplained = [
        out.ename
        for out in raised
        if out.ename != "NotImplementedError"
        and not (out.ename == "AlreadyDisplayedError" and "NotImplementedError" in shown)
    ]
    assert unexplained == [], f"{path.name}: the unanswered exercise in cell {stop_at} fails with {unexplained}"


def test_validator_catches_a_failing_check(tmp_path, monkeypatch):
    """The same validator on the fixture notebook with a wrong answer: it must say so (the test above can fail)."""
    from tests.grading_support import FIXTURE_COURSE, answer_cells, with_answers, wrong_answers

    source = FIXTURE_COURSE / "99_fixture.ipynb"
    wrong = answer_cells(wrong_answers("99_fixture")[0])
    broken = tmp_path / "99_fixture.ipynb"
    broken.write_text(with_answers(source, wrong))
    validator = RecordingValidator(config=Config({"Execute": {"timeout": 120}}))
    assert "failed" in validator.validate(str(broken))
