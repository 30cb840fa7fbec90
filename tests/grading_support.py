"""Helpers for the grading tests: the fixture course, class folders, and reading grades.csv."""

from __future__ import annotations

import atexit
import csv
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat

from course.mutation.semantic import answer_cells  # noqa: F401 (one reader of the fixtures' format, the report's)
from course.mutation.trials import exercise_checks  # noqa: F401 (the tests import it from here)
from tests.conftest import ROOT, run_course

FIXTURES = ROOT / "tests" / "fixtures"
FIXTURE_COURSE = FIXTURES / "course"  # 99_fixture.ipynb: two quick exercises
WRONG = FIXTURES / "wrong_answers"  # <notebook>.json: plausible wrong answers
RIGHT = FIXTURES / "right_answers"  # <notebook>.json: other ways of writing a right answer (optional)


def build_hostile(target: Path) -> Path:
    """The hostile class at `target`: the committed folders of tests/fixtures/hostile, plus the broken files made
    here from the good submission (JSON cut in half, binary bytes named .ipynb, a browser's download name), so
    the repository itself holds no broken notebooks."""
    shutil.copytree(FIXTURES / "hostile", target)
    good = (target / "good" / "99_fixture.ipynb").read_bytes()
    broken = {
        "malformed/99_fixture.ipynb": good[: len(good) // 2],
        "not_a_notebook/99_fixture.ipynb": b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
        "misnamed/99_Fixture (1).ipynb": good,
    }
    for name, content in broken.items():
        (target / name).parent.mkdir(exist_ok=True)
        (target / name).write_bytes(content)
    return target


_HOSTILE_HOME = Path(tempfile.mkdtemp(prefix="course-hostile-"))
atexit.register(shutil.rmtree, _HOSTILE_HOME, True)
HOSTILE = build_hostile(_HOSTILE_HOME / "class")  # one folder per way a submission goes wrong


def course_notebooks() -> list[Path]:
    """Every instructor notebook the checks must hold for: the fixture and all of solutions/."""
    return [FIXTURE_COURSE / "99_fixture.ipynb", *sorted((ROOT / "solutions").glob("*.ipynb"))]


def reads_grading_mode(path: Path) -> bool:
    """Whether a solution notebook acts on NBGRADER_EXECUTION (11 submits its Slurm jobs only outside grading): such
    a notebook runs top to bottom on its own too, as a learner runs it, besides the strength test's graded run."""
    return "NBGRADER_EXECUTION" in path.read_text()


def first_answer(notebook) -> int:
    """Index of the first cell a learner must write (nbgrader's solution cells)."""
    return next(i for i, cell in enumerate(notebook.cells) if cell.metadata.get("nbgrader", {}).get("solution"))


def course_answers() -> dict[str, list[str]]:
    """The course's own answers (course/answers.py, instructor-only): function name -> its code lines, stripped,
    without the docstring or blank lines. The student copy and a hub's learners must hold none of them."""
    import inspect

    from course import answers

    return {
        f.__name__: [line.strip() for line in inspect.getsource(f).split('"""')[-1].splitlines() if line.strip()]
        for f in answers.ALL
    }


def errors(notebook) -> list[str]:
    """'cell N: ExcName: message' for every code cell of an executed notebook that raised."""
    return [
        f"cell {i}: {out.ename}: {out.evalue}"
        for i, cell in enumerate(notebook.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if out.output_type == "error"
    ]


def validate_executed(path: Path, executed) -> dict:
    """nbgrader's validator's verdict on PATH (what `nbgrader validate` says), judged on EXECUTED, the notebook as
    it already ran, instead of running it once more."""
    from nbgrader.validator import Validator

    class AlreadyExecuted(Validator):
        def _preprocess(self, nb):
            return executed

    return AlreadyExecuted().validate(str(path))


def grade(
    submissions: Path,
    out: Path,
    *args: str,
    solutions: Path = FIXTURE_COURSE,
    env: dict | None = None,
    timeout: float = 1800,
):
    """Run `python -m course grade` as an instructor would."""
    return run_course(
        "grade", str(submissions), "--out", str(out), "--solutions", str(solutions), *args, env=env, timeout=timeout
    )


def rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def by_cell(out: Path) -> dict[tuple[str, str, str], dict]:
    """grades.csv rows keyed by (student, notebook, cell); notebook-wide rows by status in place of cell."""
    result = {}
    for row in rows(out):
        key = (row["student"], row["notebook"], row["cell"] or f"*{row['status']}")
        result[key] = row
    return result


def graded_cells(nb_path: Path) -> dict[str, float]:
    """grade_id -> points of the graded cells of a notebook."""
    nb = nbformat.read(str(nb_path), as_version=4)
    return {
        c.metadata.nbgrader["grade_id"]: float(c.metadata.nbgrader["points"])
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
    }


def with_answers(nb_path: Path, answers: dict[str, str]) -> str:
    """The notebook with some answer cells' sources replaced (grade_id -> source), as text."""
    nb = nbformat.read(str(nb_path), as_version=4)
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id, source in answers.items():
        assert grade_id in ids, f"{nb_path.name} has no cell {grade_id!r} (fix tests/fixtures/wrong_answers)"
        ids[grade_id].source = source
    return nbformat.writes(nb)


def combine(answers: list[dict]) -> list[list[int]]:
    """Group wrong answers (by index) so that no two in a group replace the same cell: one submission per group."""
    groups: list[list[int]] = []
    for k, answer in enumerate(answers):
        cells = set(answer_cells(answer))
        for group in groups:
            if not any(cells & set(answer_cells(answers[j])) for j in group):
                group.append(k)
                break
        else:
            groups.append([k])
    return groups


def wrong_answers(notebook: str) -> list[dict]:
    path = WRONG / f"{notebook}.json"
    assert path.is_file(), (
        f"no plausible wrong answers for {notebook}: add {path.relative_to(ROOT)} "
        f"(see {WRONG.relative_to(ROOT)}/README.md)"
    )
    return json.loads(path.read_text())


def right_answers(notebook: str) -> list[dict]:
    """Other right answers a learner would plausibly write (same format as the wrong ones); none if no file."""
    path = RIGHT / f"{notebook}.json"
    return json.loads(path.read_text()) if path.is_file() else []


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under FOLDER with its sha256 (to prove grading changed nothing)."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def copy_tree(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def tagged_env(tag: str) -> dict:
    """The environment with a marker every process of a grading run inherits (to find leftovers)."""
    return {**os.environ, "COURSE_TEST_GRADE_TAG": tag}
