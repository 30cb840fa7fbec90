"""`python -m course student-copy OUT`: the course as learners get it, with no answers in it.

The copy is built once; every file in it is searched for the solution code and the hidden tests of every
solution notebook; notebook 00 from it, completed with the instructor's solution cells, runs on the copy's
own package and gets full marks from the instructor's grader (hidden tests included).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import nbformat
import pytest

from course.cli import main
from course.grading.release import course_notebooks
from tests.conftest import ROOT, run_course
from tests.grading_support import course_answers, grade, rows

SOLUTIONS = course_notebooks(ROOT / "solutions")
# Answers the course's own package also implements, because the notebooks use or compare against it (reported to
# the notebook owners; anything else found in the copy fails): Horovod's standard GPU pinning in course.training,
# and the relaxed-sync fold in course.averaging that notebook 05 then runs at scale.
LIBRARY = {
    ("07_horovod ex1-answer", "course/training.py"),
    ("05_parameter_averaging ex3-answer", "course/averaging.py"),
}


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "ddl-hpc"
    result = run_course("student-copy", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _regions(source: str, begin: str, end: str) -> list[list[str]]:
    """The lines between each BEGIN/END pair of markers (stripped, blank lines dropped)."""
    regions, current = [], None
    for line in source.splitlines():
        if begin in line:
            current = []
        elif end in line and current is not None:
            regions.append(current)
            current = None
        elif current is not None and line.strip():
            current.append(line.strip())
    return regions


def _secrets() -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    """(solutions, hidden tests): (where, lines) for every answer region and hidden-test region of solutions/."""
    answers, hidden = [], []
    for path in SOLUTIONS:
        for cell in nbformat.read(str(path), as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            where = f"{path.stem} {meta.get('grade_id', '')}"
            if meta.get("solution"):
                found = _regions(cell.source, "BEGIN SOLUTION", "END SOLUTION")
                if not found and cell.cell_type == "markdown":  # a written answer: the whole cell is the answer
                    found = [[line.strip() for line in cell.source.splitlines() if line.strip()]]
                answers += [(where, lines) for lines in found]
            hidden += [(where, lines) for lines in _regions(cell.source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")]
    answers += [(f"course.answers.{name}", lines) for name, lines in course_answers().items()]
    return answers, hidden


def _distinctive(line: str, public: set[str]) -> bool:
    """A line that would give something away: not an import, not trivial, not in the released notebooks."""
    return len(line) >= 12 and not line.startswith(("import ", "from ", "#")) and line not in public


def test_the_copy_has_what_a_learner_needs_and_nothing_of_the_instructors(copy):
    for needed in (
        "course/__init__.py",
        "course/data.py",
        "environment.yml",
        "binder/postBuild",
        "binder/start",
        "README.md",
        "Makefile",
        "scripts/setup-python.sh",
        "scripts/python-choice.sh",
        "scripts/setup-system.sh",
        "pyproject.toml",
    ):
        assert (copy / needed).is_file(), f"the student copy lacks {needed}"
    assert sorted(p.name for p in (copy / "notebooks").glob("*.ipynb")) == [p.name for p in SOLUTIONS]
    names = {str(p.relative_to(copy)) for p in copy.rglob("*")}
    for banned in ("solutions", "tests", "docs", "nbgrader_config.py", "course/answers.py", "course/mutation"):
        assert banned not in names, f"the student copy holds {banned}"
    # its package runs without the answers: the checks refuse only what the copy has. -S: the copy's package alone,
    # with this environment's libraries but not its editable install of the checkout (which would find the answers)
    probe = "from course import shortcuts; print(' '.join(f.__name__ for f in shortcuts.references()))"
    path = os.pathsep.join([str(copy), sysconfig.get_paths()["purelib"]])
    found = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        cwd=copy,
    )
    assert found.returncode == 0 and found.stdout.split() == ["reduce_scatter_allgather", "mpi_allreduce"], found
    assert not [n for n in names if "wrong_answers" in n or "instructor" in n or "hostile" in n]
    readme = (copy / "README.md").read_text()
    assert "solutions/" not in readme and "validate" in readme and "mybinder.org" in readme
    # `make setup` / `make lab` work in the copy: its Makefile's targets and scripts are all there (running the
    # full set-up here would take ten minutes; the checkout's own set-up is what `make test` runs)
    makefile = (copy / "Makefile").read_text()
    assert "setup:" in makefile and "lab: setup" in makefile
    assert "scripts/setup-system.sh" in makefile and "scripts/setup-python.sh" in makefile
    # ... and the copy's set-up chooses its Python (scripts/python-choice.sh, which it sources, came along)
    chosen = subprocess.run(
        ["bash", str(copy / "scripts" / "setup-python.sh"), "--print-python"],
        env={**os.environ, "PYTHON": sys.executable, "COURSE_NO_UV_INSTALL": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chosen.returncode == 0 and chosen.stdout.strip() == sys.executable, chosen.stderr


def test_no_solution_code_or_hidden_test_is_anywhere_in_the_copy(copy):
    public = {
        line.strip()
        for nb in (copy / "notebooks").glob("*.ipynb")
        for cell in nbformat.read(str(nb), as_version=4).cells
        for line in cell.source.splitlines()
    }
    files = {}
    for path in copy.rglob("*"):
        if path.is_file() and ".git" not in path.parts:
            try:
                files[str(path.relative_to(copy))] = {line.strip() for line in path.read_text("utf-8").splitlines()}
            except UnicodeDecodeError:
                files[str(path.relative_to(copy))] = set()
    leaks = answers_in(files, public, allowed=LIBRARY)
    assert not leaks, "the student copy gives answers away:\n" + "\n".join(leaks[:20])


def answers_in(files: dict[str, set[str]], public: set[str], allowed=frozenset()) -> list[str]:
    """What of solutions/ FILES ({name: its stripped lines}) give away: any line of a hidden test, or more than half
    of an answer's lines (the PUBLIC lines, the released notebooks', left out; ALLOWED: (answer, file) pairs that
    may). Also the website's test (tests/test_site.py) scans the built HTML with it."""
    answers, hidden = _secrets()
    assert answers and hidden
    leaks = []
    for where, lines in hidden:  # not one line of a hidden test, anywhere
        for line in (line for line in lines if _distinctive(line, public)):
            leaks += [f"hidden test of {where} in {name}: {line}" for name, have in files.items() if line in have]
    for where, lines in answers:  # no answer, or most of one, in any file
        secret = [line for line in lines if _distinctive(line, public)]
        for name, have in files.items():
            found = [line for line in secret if line in have]
            if secret and len(found) * 2 > len(secret) and (where, name) not in allowed:
                leaks.append(f"answer {where} in {name}: {len(found)} of its {len(secret)} lines, e.g. {found[0]}")
    return leaks


def test_building_again_refreshes_a_copy_and_refuses_other_folders(copy, tmp_path, capsys):
    (copy / ".git").mkdir(exist_ok=True)  # CI refreshes a checkout of the student branch in place
    (copy / ".git" / "HEAD").write_text("ref: refs/heads/student\n")
    (copy / "stale.txt").write_text("from an older copy")
    before = (copy / "notebooks" / f"{SOLUTIONS[0].name}").read_text()
    assert main(["student-copy", str(copy)]) == 0
    assert not (copy / "stale.txt").exists() and (copy / ".git" / "HEAD").is_file()
    assert (copy / "notebooks" / f"{SOLUTIONS[0].name}").read_text() == before
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("my notes")
    capsys.readouterr()
    assert main(["student-copy", str(other)]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "not empty" in error[0], error
    assert [p.name for p in other.iterdir()] == ["notes.txt"] and (other / "notes.txt").read_text() == "my notes"


def test_a_hub_copy_built_twice_is_the_same_byte_for_byte(tmp_path):
    """scripts/setup-hub.sh reinstalls the student package when the copy's digest changes: building it again from
    the same checkout must give the same files, or every `make setup HUB=1` reinstalls."""
    first, second = tmp_path / "first", tmp_path / "second"
    for out in (first, second):
        assert main(["student-copy", str(out), "--hub"]) == 0
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    differ = [str(f) for f in files if (first / f).read_bytes() != (second / f).read_bytes()]
    assert differ == [], f"built twice, these differ: {differ}"
    assert "**Practice copy.**" in (first / "notebooks" / SOLUTIONS[0].name).read_text()


@pytest.mark.slow
def test_notebook_00_from_the_copy_completed_with_the_solutions_gets_full_marks(copy, tmp_path):
    """Run on the copy's own package (PYTHONPATH), graded by the instructor's grader against solutions/."""
    name = "00_environment_and_cluster"
    answers = {
        c.metadata.nbgrader["grade_id"]: c.source
        for c in nbformat.read(str(ROOT / "solutions" / f"{name}.ipynb"), as_version=4).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    nb = nbformat.read(str(copy / "notebooks" / f"{name}.ipynb"), as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell.source = answers[grade_id]
    (tmp_path / "class" / "learner").mkdir(parents=True)
    nbformat.write(nb, str(tmp_path / "class" / "learner" / f"{name}.ipynb"))
    env = {**os.environ, "PYTHONPATH": str(copy), "IPYTHONDIR": str(tmp_path / "ipython"), "COURSE_PROFILE": "quick"}
    result = grade(tmp_path / "class", tmp_path / "out", "--workers", "1", solutions=ROOT / "solutions", env=env)
    assert result.returncode == 0, result.stderr
    graded = [r for r in rows(tmp_path / "out") if r["cell"]]
    assert graded and all(r["status"] == "passed" for r in graded), graded
    assert sum(float(r["points"]) for r in graded) == sum(float(r["max_points"]) for r in graded) > 0
    shutil.rmtree(tmp_path / "ipython", ignore_errors=True)
