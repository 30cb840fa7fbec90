"""Strength of the checks, for every graded exercise of every notebook in solutions/ (and the fixture).

For each notebook: every plausible wrong answer in tests/fixtures/wrong_answers/<notebook>.json loses points on
its own exercise's checks, and together they lose points on every graded cell; every other right answer in
tests/fixtures/right_answers/<notebook>.json keeps full marks; the released stub of each answer
(what an unanswered notebook holds) scores zero on every check of its exercise, and its own cell fails, if at all, only
by saying it is unanswered (NotImplementedError); the solution keeps full marks.
Each notebook runs once for all of these (tests/answer_trials.py: every answer tried in place, just before its
exercise), two notebooks at a time, started in the background as soon as the tests are collected (conftest.py), so
that they use the cores the tests before this module leave idle while they wait for Slurm, a hub or a browser;
their clusters are on record in an IPYTHONDIR of their own, out of the way of those tests' checks. The fixture
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

import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from course import memory, processes, run
from course.grading.release import render, student_version
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

WORKERS = 2  # notebooks tried side by side, as `course grade --workers 2` on this 2-core machine
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


_RUNNING: set[subprocess.Popen] = set()  # the notebooks being tried now, so that an early end of the session ends them
_STOPPED = threading.Event()  # set when the session ends: no notebook starts after it
_STARTED: dict[str, Future] = {}  # the course's trials, started as soon as the tests are collected
_BACKGROUND = ThreadPoolExecutor(1, thread_name_prefix="strength")


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
        _RUNNING.add(process)
        if _STOPPED.is_set():  # the session ended while this one was starting
            processes.kill_group(process.pid)
        try:
            _, stderr = process.communicate(timeout=3000)
        finally:
            processes.kill_group(process.pid)  # whatever the notebook left behind it (its engines) ends with it
            _RUNNING.discard(process)
    assert process.returncode == 0, f"trying the answers to {source.name} failed:\n{stderr[-3000:]}"
    wall = round(time.monotonic() - started, 1)
    return {**json.loads((work / "tried.json").read_text()), "executed": work / "executed.ipynb", "wall": wall}


def _try_all(sources: list[Path], base: Path) -> dict[str, dict]:
    """Every notebook's trials, two notebooks at a time, the ones with the most trials first."""
    sources = sorted(sources, key=lambda p: -len(trials(p)))
    with ThreadPoolExecutor(WORKERS) as pool:
        return dict(zip((p.stem for p in sources), pool.map(lambda p: _try(p, base), sources)))


def start_course_trials(session: pytest.Session) -> None:
    """Start trying the selected course notebooks' answers at once, in the background (conftest calls this when the
    tests are collected): the trials keep both cores busy while the tests before this module mostly wait (for
    Slurm, a hub, a browser), and this module's tests wait for the trials' result."""
    chosen = selected(session, sys.modules[__name__])
    sources = [p for p in course_notebooks() if p != FIXTURE and p in chosen]
    if sources and "course" not in _STARTED:
        base = session.config._tmp_path_factory.mktemp("course")  # pytest's own temporary folders (kept, the last 3)
        _STARTED["course"] = _BACKGROUND.submit(_try_all, sources, base)


def stop_course_trials() -> None:
    """End the trials still running, and start no other (the session ended before their tests, e.g. `-x` after an
    earlier failure)."""
    _STOPPED.set()
    for process in list(_RUNNING):
        processes.kill_group(process.pid)


@pytest.fixture(scope="module")
def tried_fixture(tmp_path_factory) -> dict[str, dict]:
    return _try_all([FIXTURE], tmp_path_factory.mktemp("fixture"))


def selected(session: pytest.Session, module) -> set[Path]:
    """The notebooks this module's selected tests ask for: `-k 03_parallelism` tries only 03's answers."""
    return {
        item.callspec.params["source"]
        for item in session.items
        if item.module is module and "source" in getattr(getattr(item, "callspec", None), "params", {})
    }


@pytest.fixture(scope="module")
def tried_course(request) -> dict[str, dict]:
    start_course_trials(request.session)  # started already, unless this module was not collected with the session
    return _STARTED["course"].result()


@pytest.mark.timeout(3600)  # the first course notebook's test waits for every notebook's trials (started at collection)
@pytest.mark.parametrize("source", _params())
def test_solution_full_marks_unanswered_zero_wrong_answers_lose_points(source, request):
    cells = graded_cells(source)
    assert cells, f"{source.name} has no graded cells"
    tried = request.getfixturevalue("tried_fixture" if source == FIXTURE else "tried_course")
    result, labelled = tried[source.stem], trials(source)
    costly = sorted(zip(result["seconds"], (what for what, _ in labelled)), reverse=True)[:5]
    request.node.user_properties.append(("trials", len(labelled)))  # in the JUnit XML a full run writes
    request.node.user_properties.append(("notebook_seconds", result["wall"]))
    request.node.user_properties.append(("trial_seconds", round(sum(result["seconds"]), 1)))
    request.node.user_properties.append(("costliest_trials", "; ".join(f"{s:.0f} s {w}" for s, w in costly)))
    retry = "run right after a wrong answer to its exercise: does a learner who retries lose points?"
    assert not result["solution"], f"the solution of {source.name} loses points: {result['solution']} ({retry})"
    for k, again in result["retried"].items():
        assert not again, f"the solution of {source.name} loses points {again} ({retry}: {labelled[int(k)][0]})"
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


@pytest.mark.timeout(3600)  # as above: the first course notebook's test waits for every notebook's trials
@pytest.mark.parametrize("source", _params())
def test_every_unanswered_exercise_says_so(source, request):
    """Each released stub, tried in place (the exercises before it answered), fails in its own cell only with
    NotImplementedError, if at all, never some other way. The first one is what a learner running the student
    notebook from the top meets (tests/test_notebooks_execute.py: its cells before it are the solution's)."""
    tried = request.getfixturevalue("tried_fixture" if source == FIXTURE else "tried_course")
    result, notebook = tried[source.stem], nbformat.read(str(source), as_version=4)
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
@pytest.mark.timeout(3600)  # the first test to ask for the course's run waits for all of it
@pytest.mark.parametrize(
    "source", [p for p in course_notebooks() if p != FIXTURE and not reads_grading_mode(p)], ids=lambda p: p.stem
)
def test_solution_runs_top_to_bottom_and_nbgrader_validates_it(source, tried_course):
    """The solution's own line through the one run: its cells as they last ran, top to bottom."""
    result = tried_course[source.stem]
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


def test_trying_answers_in_one_run_agrees_with_grading_them(tried_fixture, tmp_path):
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

    result = tried_fixture[FIXTURE.stem]
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
