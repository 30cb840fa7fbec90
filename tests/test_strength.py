"""Strength of the checks, for every graded exercise of every notebook in solutions/ (and the fixture).

For each notebook: every plausible wrong answer in tests/fixtures/wrong_answers/<notebook>.json loses points on
its own exercise's checks, and together they lose points on every graded cell; every other right answer in
tests/fixtures/right_answers/<notebook>.json keeps full marks; the released stub of each answer
(what an unanswered notebook holds) scores zero on every check of its exercise, and its own cell fails, if at all, only
by saying it is unanswered (NotImplementedError); the solution keeps full marks, also run again right after
its exercise's first trial (a learner who fixes a mistake keeps full marks: proved once per exercise; after the
other trials the solution runs again only where a trial may leave state the next would inherit).
Each notebook runs once for all of these (tests/answer_trials.py: every answer tried in place, just before its
exercise). In `make test` each notebook's run and its tests are one unit of pytest-xdist's workers, the costliest
first (conftest.py), beside the tests that mostly wait for Slurm, a hub or a browser; their clusters are on record
in an IPYTHONDIR of their own, out of the way of those tests' checks. The fixture
course is also graded for real, as a class of submissions, with `python -m course grade` (nbgrader's autograde, hidden tests restored), and both ways must agree: that holds the
one-run shortcut to nbgrader's grading. nbgrader's own `nbgrader validate` must accept every solution notebook
(the fixture here). The same run is each solution notebook's top-to-bottom run: every cell runs without an error,
the notebook stops its cluster, peaks under Binder's memory, publishes its key figures, and nbgrader's validator
accepts it as it ran; with the released stub of its first exercise, it is what a learner meets running the student
notebook from the top (tests/test_notebooks_execute.py checks the cells before it are the solution's, and runs apart
the notebooks that act on NBGRADER_EXECUTION, solution and student version).
Notebooks added to solutions/ join here.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from course import memory, processes, run
from course.grading.release import render, student_version
from course.mutation.trials import spans
from tests.conftest import ROOT
from tests.grading_support import (
    answer_cells,
    FIXTURE_COURSE,
    by_cell,
    combine,
    course_notebooks,
    errors,
    exercise_checks,
    first_answer,
    grade,
    graded_cells,
    reads_grading_mode,
    right_answers,
    validate_executed,
    with_answers,
    wrong_answers,
)

FIXTURE = FIXTURE_COURSE / "99_fixture.ipynb"


def _params():
    return [pytest.param(p, id=p.stem, marks=() if p == FIXTURE else (pytest.mark.slow,)) for p in course_notebooks()]


def stubs(source: Path) -> dict[str, str]:
    """answer grade_id -> what the released notebook holds in that cell."""
    released = student_version(nbformat.read(str(source), as_version=4), source.stem)
    return {
        c.metadata.nbgrader["grade_id"]: c.source
        for c in released.cells
        if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")
        if not c.metadata.nbgrader.get("grade")
    }


def trials(source: Path) -> list[tuple[str, dict[str, str]]]:
    """(what it is, answer grade_id -> source) for every wrong answer, every answer's released stub, then every
    other right answer."""
    wrong = [(f"wrong answer {k} ({w.get('why')})", answer_cells(w)) for k, w in enumerate(wrong_answers(source.stem))]
    right = [(f"right answer {k} ({w.get('why')})", answer_cells(w)) for k, w in enumerate(right_answers(source.stem))]
    return wrong + [(f"the released stub of {g}", {g: s}) for g, s in stubs(source).items()] + right


def first_trials(source: Path) -> list[int]:
    """The first trial of each exercise that has more than one: the solution must run again after it."""
    labelled = trials(source)
    where = spans(source, nbformat.read(str(source), as_version=4), [answers for _, answers in labelled])
    at: dict[int, list[int]] = {}
    for k, (first, _) in enumerate(where):
        at.setdefault(first, []).append(k)
    return [ks[0] for ks in at.values() if len(ks) > 1]


_TRIED: dict[str, dict] = {}  # each notebook's trials, run once for the tests that read them


def _try(source: Path, base: Path) -> dict:
    """SOURCE's trials in a process of their own. Its IPYTHONDIR is its own: its clusters are not on record where the
    rest of the suite looks for clusters left running (course.cluster.running_ids), while both run side by side."""
    work = base / source.stem
    work.mkdir()
    (work / "trials.json").write_text(json.dumps([answers for _, answers in trials(source)]))
    started = time.monotonic()
    command = [
        sys.executable,
        "-m",
        "tests.answer_trials",
        str(source),
        work / "trials.json",
        work / "tried.json",
        work,
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IPYTHONDIR": str(work / "ipython")}
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    ) as process:
        try:
            _, stderr = process.communicate(timeout=3000)
        finally:
            processes.kill_group(process.pid)  # whatever the notebook left behind it (its engines) ends with it
    assert process.returncode == 0, f"trying the answers to {source.name} failed:\n{stderr[-3000:]}"
    wall = round(time.monotonic() - started, 1)
    return {**json.loads((work / "tried.json").read_text()), "executed": work / "executed.ipynb", "wall": wall}


def tried(source: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """SOURCE's trials, run by the first test that asks for them. A notebook's tests are one xdist group
    (conftest.py): they run in one worker, one after the other, and share this one run."""
    if source.stem not in _TRIED:
        _TRIED[source.stem] = _try(source, tmp_path_factory.mktemp("tried"))
    return _TRIED[source.stem]


TRIAL_SECONDS = ROOT / "tests" / "fixtures" / "trial_seconds.json"  # each notebook's trials in a full run, measured


@functools.cache
def trial_cost(source: Path) -> float:
    """How long SOURCE's trials took in a full run (TRIAL_SECONDS: a run's JUnit XML, notebook_seconds), so that
    the suite starts the costliest first; a notebook not measured yet counts as the costliest."""
    measured = json.loads(TRIAL_SECONDS.read_text())
    return measured.get(source.stem, max(measured.values()))


@pytest.mark.timeout(3600)  # the notebook's first test runs its trials
@pytest.mark.parametrize("source", _params())
def test_solution_full_marks_unanswered_zero_wrong_answers_lose_points(source, request, tmp_path_factory):
    cells = graded_cells(source)
    assert cells, f"{source.name} has no graded cells"
    result, labelled = tried(source, tmp_path_factory), trials(source)
    costly = sorted(zip(result["seconds"], (what for what, _ in labelled)), reverse=True)[:5]
    request.node.user_properties.append(("trials", len(labelled)))  # in the JUnit XML a full run writes
    request.node.user_properties.append(("notebook_seconds", result["wall"]))
    request.node.user_properties.append(("trial_seconds", round(sum(result["seconds"]), 1)))
    request.node.user_properties.append(("costliest_trials", "; ".join(f"{s:.0f} s {w}" for s, w in costly)))
    retry = "run right after a wrong answer to its exercise: does a learner who retries lose points?"
    assert not result["solution"], f"the solution of {source.name} loses points: {result['solution']} ({retry})"
    for k, again in result["retried"].items():
        assert not again, f"the solution of {source.name} loses points {again} ({retry}: {labelled[int(k)][0]})"
    unretried = sorted(set(first_trials(source)) - {int(k) for k in result["retried"]})
    assert not unretried, f"{source.name}: the solution did not run again after trials {unretried} ({retry})"
    checks = exercise_checks(source)
    orphans = set(cells) - set().union(*checks.values())
    assert not orphans, f"{sorted(orphans)} of {source.name} come before any answer cell: no exercise of theirs"
    lowered = set()
    for (what, answers), failed in zip(labelled, result["failed"]):
        own = set().union(*(checks.get(g, set()) for g in answers))
        if what.startswith("right answer"):
            assert not failed, f"{what} of {source.stem} loses points on {sorted(failed)}: a valid answer refused"
            continue
        if what.startswith("the released stub"):
            kept = own - set(failed)
            assert not kept, f"the unanswered notebook scores on {sorted(kept)} of {source.stem}: the check is too weak"
            continue
        assert set(failed) & own, f"{what} of {source.stem} keeps full marks on its exercise's checks"
        lowered |= set(failed)
    assert lowered == set(cells), f"no wrong answer loses points on {sorted(set(cells) - lowered)} of {source.stem}"


def unexplained(raised: dict) -> list[str]:
    """The errors of an unanswered answer cell (answer_trials' record of it) that do not say it is unanswered: all
    but NotImplementedError, and ipyparallel's AlreadyDisplayedError after a %%px cell showed the engines' one."""
    return [
        name
        for name in raised["enames"]
        if name != "NotImplementedError" and not (name == "AlreadyDisplayedError" and raised["shows_not_implemented"])
    ]


def test_unexplained_accepts_only_not_implemented():
    """The rule the next test applies, on the errors it can meet."""
    assert unexplained({"enames": [], "shows_not_implemented": False}) == []
    assert unexplained({"enames": ["NotImplementedError"], "shows_not_implemented": True}) == []
    assert unexplained({"enames": ["AlreadyDisplayedError"], "shows_not_implemented": True}) == []
    assert unexplained({"enames": ["AlreadyDisplayedError"], "shows_not_implemented": False}) == [
        "AlreadyDisplayedError"
    ]
    assert unexplained({"enames": ["NameError"], "shows_not_implemented": True}) == ["NameError"]


@pytest.mark.timeout(3600)  # as above: the notebook's first test runs its trials
@pytest.mark.parametrize("source", _params())
def test_every_unanswered_exercise_says_so(source, tmp_path_factory):
    """Each released stub, tried in place (the exercises before it answered), fails in its own cell only with
    NotImplementedError, if at all, never some other way. The first one is what a learner running the student
    notebook from the top meets (tests/test_notebooks_execute.py: its cells before it are the solution's)."""
    result, notebook = tried(source, tmp_path_factory), nbformat.read(str(source), as_version=4)
    cell_of = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(notebook.cells)}
    stubbed = {
        grade_id: raised
        for (what, _), by_cell in zip(trials(source), result["raised"])
        if what.startswith("the released stub")
        for grade_id, raised in by_cell.items()
    }
    first = notebook.cells[first_answer(notebook)].metadata.nbgrader["grade_id"]
    assert first in stubbed, f"{source.name}: its first exercise {first} was not tried unanswered (its released stub)"
    failing = [
        f"{source.name}: the unanswered exercise in cell {cell_of[grade_id]} fails with {unexplained(raised)}"
        for grade_id, raised in stubbed.items()
        if unexplained(raised)
    ]
    assert failing == [], "\n".join(failing)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # as above: the notebook's first test runs its trials
@pytest.mark.parametrize(
    "source", [p for p in course_notebooks() if p != FIXTURE and not reads_grading_mode(p)], ids=lambda p: p.stem
)
def test_solution_runs_top_to_bottom_and_nbgrader_validates_it(source, tmp_path_factory):
    """The solution's own line through the one run: its cells as they last ran, top to bottom."""
    result = tried(source, tmp_path_factory)
    executed = nbformat.read(str(result["executed"]), as_version=4)
    assert executed.metadata.kernelspec.name == run.KERNEL
    assert errors(executed) == [], f"{source.name} raised while running top to bottom"
    verdict = validate_executed(source, executed)
    assert verdict == {}, f"nbgrader's validator rejects {source.name}: {verdict}"
    assert not result["left_running"], f"{source.name} left its cluster running: end it with a stop cell"
    assert 0 < result["peak"] < memory.BINDER_LIMIT, (
        f"{source.name} peaked at {memory.megabytes(result['peak'])}: Binder restarts "
        f"the kernel above {memory.megabytes(memory.BINDER_LIMIT)}"
    )
    assert run.figures_in(executed), f"{source.name} publishes no key figure (course.run.key_figure)"


def test_trying_answers_in_one_run_agrees_with_grading_them(tmp_path_factory, tmp_path):
    """The fixture's class graded for real (the unanswered release, the solution, one submission per group of wrong
    answers): per cell, the points nbgrader gives are zero exactly where the one-run trial saw a check fail."""
    wrong = wrong_answers(FIXTURE.stem)
    submissions = tmp_path / "class"
    entries = {
        "unanswered": render(student_version(nbformat.read(str(FIXTURE), as_version=4), FIXTURE.stem)),
        "solution": FIXTURE.read_text(),
    }
    holder = {}
    for n, group in enumerate(combine(wrong)):
        entries[f"wrong{n}"] = with_answers(FIXTURE, {g: s for k in group for g, s in answer_cells(wrong[k]).items()})
        holder.update({k: f"wrong{n}" for k in group})
    for student, text in entries.items():
        (submissions / student).mkdir(parents=True)
        (submissions / student / FIXTURE.name).write_text(text)
    graded = grade(submissions, tmp_path / "out", "--workers", "2", solutions=FIXTURE_COURSE)
    assert graded.returncode == 0, graded.stderr
    table, cells = by_cell(tmp_path / "out"), graded_cells(FIXTURE)
    checks = exercise_checks(FIXTURE)

    def lost(student: str) -> set[str]:
        return {c for c, points in cells.items() if float(table[(student, FIXTURE.stem, c)]["points"]) < points}

    result = tried(FIXTURE, tmp_path_factory)
    assert lost("solution") == set(result["solution"]) == set()
    stubbed = set().union(*(f for (what, _), f in zip(trials(FIXTURE), result["failed"]) if "stub" in what))
    assert lost("unanswered") == stubbed == set(cells)
    for k, answer in enumerate(wrong):
        own = set().union(*(checks[g] for g in answer_cells(answer)))
        assert lost(holder[k]) & own == set(result["failed"][k]) & own, f"wrong answer {k}: {answer['why']}"


def test_nbgrader_validate_accepts_the_solution():
    """`nbgrader validate` itself, on the fixture; the course's notebooks go through nbgrader's validator on the
    run above (test_solution_runs_top_to_bottom_and_nbgrader_validates_it) or in tests/test_notebooks_execute.py."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(
        [sys.executable, "-m", "nbgrader", "validate", str(FIXTURE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert "Success! Your notebook passes all the tests." in result.stdout, result.stdout[-3000:]
