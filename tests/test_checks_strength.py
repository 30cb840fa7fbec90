"""Strength of the checks, for every graded exercise of every notebook in solutions/ (and the fixture).

For each notebook: the solution scores full marks on every graded cell (graded here for the fixture;
for the course's notebooks nbgrader's validator in tests/test_notebooks_execute.py proves it while it
runs them top to bottom, so the slow notebooks are not executed a third time); the released, unanswered
notebook scores zero on every graded cell; every plausible wrong answer in
tests/fixtures/wrong_answers/<notebook>.json loses points, and together they lose points on every
graded cell. Wrong answers to different exercises share one submission (each must then lose points
on its own exercise's checks) so that the slow notebooks run as few times as possible, and the whole class
(every notebook's submissions) is graded in one run. Graded with `python -m course grade` (hidden tests restored). nbgrader's own
`nbgrader validate` must accept every solution notebook (the fixture here, the course's notebooks in
tests/test_notebooks_execute.py). Notebooks added to solutions/ join here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.grading.release import render, student_version
from tests.conftest import ROOT
from tests.grading_support import (
    FIXTURE_COURSE,
    by_cell,
    combine,
    course_notebooks,
    exercise_checks,
    grade,
    graded_cells,
    with_answers,
    wrong_answers,
)


def _params():
    return [
        pytest.param(p, id=p.stem, marks=() if p.parent == FIXTURE_COURSE else (pytest.mark.slow,))
        for p in course_notebooks()
    ]


def _graded_class(sources: list[Path], solutions: Path, base: Path) -> tuple[Path, dict[str, dict[int, str]]]:
    """One class for all of `sources`, graded in one `course grade` run; (its output folder, for every notebook the
    student who holds each wrong answer). Per notebook: `unanswered` (the released notebook), `solution` for the
    fixture, and `wrongN`, one student per group of wrong answers (a student holds several notebooks). One run keeps
    both workers busy to the end, where one run per notebook left a worker idle in its last round."""
    submissions, submission_of = base / "class", {}
    for source in sources:
        notebook = source.stem
        wrong = wrong_answers(notebook)
        entries = {"unanswered": render(student_version(nbformat.read(str(source), as_version=4), notebook))}
        if source.parent == FIXTURE_COURSE:
            entries["solution"] = source.read_text()
        groups = combine(wrong)
        submission_of[notebook] = {k: f"wrong{n}" for n, group in enumerate(groups) for k in group}
        for n, group in enumerate(groups):
            entries[f"wrong{n}"] = with_answers(
                source, {g: s for k in group for g, s in wrong[k].items() if g != "why"}
            )
        for student, text in entries.items():
            (submissions / student).mkdir(parents=True, exist_ok=True)
            (submissions / student / source.name).write_text(text)
    result = grade(submissions, base / "out", "--workers", "2", solutions=solutions, timeout=3600)
    assert result.returncode == 0, result.stderr
    return base / "out", submission_of


@pytest.fixture(scope="module")
def fixture_class(tmp_path_factory):
    return _graded_class([FIXTURE_COURSE / "99_fixture.ipynb"], FIXTURE_COURSE, tmp_path_factory.mktemp("fixture"))


@pytest.fixture(scope="module")
def course_class(tmp_path_factory):
    sources = [p for p in course_notebooks() if p.parent != FIXTURE_COURSE]
    return _graded_class(sources, ROOT / "solutions", tmp_path_factory.mktemp("course"))


@pytest.mark.timeout(3600)  # the first course notebook's test grades the whole class (about 13 minutes on 2 cores)
@pytest.mark.parametrize("source", _params())
def test_solution_full_marks_unanswered_zero_wrong_answers_lose_points(source, request):
    notebook = source.stem
    wrong = wrong_answers(notebook)
    cells = graded_cells(source)
    assert cells, f"{source.name} has no graded cells"
    out, submission_of = request.getfixturevalue("fixture_class" if source.parent == FIXTURE_COURSE else "course_class")
    table = by_cell(out)
    for cell, points in cells.items():
        if source.parent == FIXTURE_COURSE:
            row = table[("solution", notebook, cell)]
            assert float(row["points"]) == points, f"the solution loses points on {cell}: {row['message']}"
        row = table[("unanswered", notebook, cell)]
        assert float(row["points"]) == 0, f"the unanswered notebook scores on {cell}: the check is too weak"
    lowered = set()
    checks = exercise_checks(source)
    for k, answer in enumerate(wrong):
        student = submission_of[notebook][k]
        lost = {cell for cell, points in cells.items() if float(table[(student, notebook, cell)]["points"]) < points}
        own = set().union(*(checks.get(g, set()) for g in answer if g != "why"))
        assert lost & own, (
            f"wrong answer {k} of {notebook} ({answer.get('why')}) keeps full marks on its exercise's checks"
        )
        lowered |= lost
    assert lowered == set(cells), f"no wrong answer loses points on {sorted(set(cells) - lowered)} of {notebook}"


def test_nbgrader_validate_accepts_the_solution():
    """`nbgrader validate` itself, on the fixture; the course's notebooks go through nbgrader's validator
    in tests/test_notebooks_execute.py, in the same run that executes them."""
    source = FIXTURE_COURSE / "99_fixture.ipynb"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", str(source)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout[-3000:]
