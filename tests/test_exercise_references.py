"""References to exercises that would drift, held to the notebooks: course/answers.py's `ALL` is every answer in it
and each names its answer cell by grade_id (which stays when exercises are renumbered); the instructor guide's
exercises page (docs/guide/exercises.md) numbers each exercise as its notebook's `## Exercise N` heading does. Fast:
no notebook runs."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import nbformat

from course import answers
from tests.conftest import ROOT

CITED = re.compile(r"(\d\d)'s `([\w-]+-answer)`")  # how an answer's docstring names its cell: 03's `ex2-answer`
PART = re.compile(r"-(answer|check|text|instructions|given)$")  # an exercise's cells: ex2-answer, ex2-check, ...


def _solution(number: str) -> Path:
    [path] = (ROOT / "solutions").glob(f"{number}_*.ipynb")
    return path


def _exercises(path: Path) -> tuple[dict[str, int], int]:
    """A solution notebook's exercises: each grade_id's stem (ex2 of ex2-answer) -> the number of the `## Exercise N`
    heading it is under; and how many exercise headings there are."""
    under, headings, number = {}, 0, None
    for cell in nbformat.read(str(path), as_version=4).cells:
        heading = re.search(r"^## Exercise (\d+)", cell.source, re.M)
        if heading:
            number, headings = int(heading.group(1)), headings + 1
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id:
            under[PART.sub("", grade_id)] = number
    return under, headings


def test_all_is_every_answer_in_the_module():
    defined = [
        f.__name__
        for _, f in inspect.getmembers(answers, inspect.isfunction)
        if f.__module__ == answers.__name__ and not f.__name__.startswith("_")
    ]
    missing = sorted(set(defined) - {f.__name__ for f in answers.ALL})
    assert not missing, (
        f"add {missing} to ALL in course/answers.py: the checks refuse, and the student-copy and hub tests look for, "
        "only what ALL lists"
    )


def test_each_answer_names_an_answer_cell_that_exists():
    for function in answers.ALL:
        cited = CITED.findall(function.__doc__ or "")
        assert cited, f"course.answers.{function.__name__}: name the answer cell it answers, as 03's `ex2-answer`"
        for number, grade_id in cited:
            path = _solution(number)
            cells = {
                c.metadata.get("nbgrader", {}).get("grade_id") for c in nbformat.read(str(path), as_version=4).cells
            }
            assert grade_id in cells, (
                f"course.answers.{function.__name__} answers {number}'s `{grade_id}`, which solutions/{path.name} "
                "does not have: change the docstring to the cell's grade_id"
            )


def test_the_guides_exercises_page_numbers_each_exercise_as_its_notebook_does():
    section = (ROOT / "docs" / "guide" / "exercises.md").read_text()
    wrong, rows = [], 0
    for part in re.split(r"^## Notebook ", section, flags=re.M)[1:]:
        number = part[:2]
        path = _solution(number)
        under, headings = _exercises(path)
        for row, name in re.findall(r"^\| (\d+)(?: `([^`]+)`)?", part, re.M):
            rows += 1
            if int(row) > headings or (name in under and under[name] != int(row)):
                said = f"`{name}` is under Exercise {under[name]}" if name in under else f"has {headings} exercises"
                wrong.append(f"notebook {number}: a row says exercise {row} `{name}`; solutions/{path.name} {said}")
    assert rows > 100, f"docs/guide/exercises.md has {rows} exercise rows this test can read"
    assert not wrong, (
        "\n".join(wrong) + "\nThe notebook's heading is the source: change the number in docs/guide/exercises.md to it"
    )
