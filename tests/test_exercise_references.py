"""References to exercises that would drift, held to the notebooks: course/answers.py's `ALL` is every answer in it
and each names its answer cell by grade_id (which stays when exercises are renumbered); solutions/exercises/NN.yml,
what each exercise must do (the site's reference pages), has an entry for every graded cell and none for another,
and every check it names exists: a function of the course that the cell's part calls, or words of that part. Fast:
no notebook runs."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import nbformat
import pytest
import yaml

from course import answers, contents
from tests.conftest import ROOT
from website import exercises

CITED = re.compile(r"(\d\d)'s `([\w-]+-answer)`")  # how an answer's docstring names its cell: 03's `ex2-answer`
NOTEBOOKS = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
DOTTED = re.compile(r"^course(\.\w+)+$")  # a check named by the function that holds it
FILE_KEYS = {"intro", "not_checked", "exercises"}
ENTRY_KEYS = {"grade_id", "statements"}
STATEMENT_KEYS = {"kind", "of", "must", "answer", "held_by", "measured"}


def _solution(number: str) -> Path:
    [path] = (ROOT / "solutions").glob(f"{number}_*.ipynb")
    return path


def _graded(notebook: str) -> dict[str, dict[str, str]]:
    """grade_id -> {"visible": the graded cell's source above its hidden tests, "hidden": its hidden tests}."""
    found = {}
    for cell in nbformat.read(str(ROOT / "solutions" / f"{notebook}.ipynb"), as_version=4).cells:
        nbgrader = cell.metadata.get("nbgrader", {})
        if nbgrader.get("grade"):
            visible, _, hidden = cell.source.partition("### BEGIN HIDDEN TESTS")
            found[nbgrader["grade_id"]] = {"visible": visible, "hidden": hidden}
    return found


def _data(notebook: str) -> dict:
    return yaml.safe_load((ROOT / "solutions" / "exercises" / f"{notebook}.yml").read_text())


def _resolves(dotted: str) -> bool:
    """Whether DOTTED (course.checks.engines.stopped) is an importable module's attribute."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name, None)
        return found is not None
    return False


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


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_graded_cell_has_one_entry_and_every_entry_a_graded_cell(notebook):
    data, graded = _data(notebook), _graded(notebook)
    assert set(data) <= FILE_KEYS and data.get("exercises"), f"solutions/exercises/{notebook}.yml: keys {FILE_KEYS}"
    named = [entry["grade_id"] for entry in data["exercises"]]
    assert len(named) == len(set(named)), f"{notebook}.yml names a grade_id twice: {sorted(named)}"
    assert not set(named) - set(graded), (
        f"{notebook}.yml names {sorted(set(named) - set(graded))}: solutions/{notebook}.ipynb has no such graded cell "
        "(change the entry's grade_id to the cell's)"
    )
    assert not set(graded) - set(named), f"{notebook}.yml has no entry for {sorted(set(graded) - set(named))}"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_statement_is_held_by_a_check_that_exists(notebook):
    graded, wrong = _graded(notebook), []
    for entry in _data(notebook)["exercises"]:
        assert set(entry) == ENTRY_KEYS, f"{notebook}.yml {entry.get('grade_id')}: keys {sorted(ENTRY_KEYS)}"
        cell = graded[entry["grade_id"]]
        for statement in entry["statements"]:
            said = f"{notebook}.yml {entry['grade_id']} ({statement.get('must', '')[:50]}...)"
            assert set(statement) <= STATEMENT_KEYS, f"{said}: keys {sorted(set(statement) - STATEMENT_KEYS)}"
            assert re.match(r"^(result|process|leaves)\b", statement["kind"]), f"{said}: kind {statement['kind']!r}"
            assert statement["must"].strip() and statement["measured"].strip(), f"{said}: says what and how measured"
            assert statement["held_by"], f"{said}: name the check that holds it"
            for item in statement["held_by"]:
                [(part, what)] = item.items()
                assert part in ("visible", "hidden"), f"{said}: held_by {part!r} (visible or hidden)"
                source = " ".join(cell[part].split())
                if DOTTED.match(what):
                    if not _resolves(what):
                        wrong.append(f"{said}: {what} cannot be imported")
                    elif not re.search(rf"\b{what.rsplit('.', 1)[1]}\b", source):
                        wrong.append(f"{said}: the cell's {part} part does not call {what}")
                elif " ".join(what.split()) not in source:
                    wrong.append(f"{said}: {what!r} is not in the cell's {part} part")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_page_takes_its_titles_from_the_notebook_and_shows_no_answer(notebook):
    data, path = _data(notebook), ROOT / "solutions" / f"{notebook}.ipynb"
    for entry in data["exercises"]:
        for statement in entry["statements"]:
            for value in (statement["must"], statement.get("of") or ""):
                assert not re.match(r"\s*(## )?Exercise\b", value), f"{notebook}.yml: a title written by hand: {value}"
    headings = [
        line
        for cell in nbformat.read(str(path), as_version=4).cells
        for line in re.findall(r"^## Exercise\b.*", cell.source, re.M)
    ]
    page = exercises.page(contents.read(path), data, exercises.graded_cells(path))
    assert headings and all(f"\n{heading.strip()}\n" in page for heading in headings), (
        f"the page of {notebook} should have every `## Exercise` heading of the notebook as it is written there"
    )
    for entry in data["exercises"]:
        for statement in entry["statements"]:
            if statement.get("answer"):
                assert " ".join(statement["answer"].split()) not in page, f"{notebook}'s page shows an answer"


CONSTANT = re.compile(r"`([A-Z][A-Z0-9_]*)`")  # a check's cases named in a statement: `SERVER_CASES`
RANK_COUNTS = re.compile(r"(\d+(?:(?:,|,? and|,? or)(?: on)? \d+)*) ranks")  # "on 1, 2 and 3 ranks", "8 and on 6 ranks"


def _rank_counts(cases) -> set[int]:
    """The job sizes a constant of cases holds: each case's `ranks` (0, the notebook's engines, left out), or its
    integers where it is a tuple of rank counts."""
    found = [getattr(case, "ranks", case) for case in cases]
    return {n for n in found if isinstance(n, int) and not isinstance(n, bool) and n > 0}


def _stated(text: str) -> set[int]:
    return {int(n) for group in RANK_COUNTS.findall(text) for n in re.findall(r"\d+", group)}


def _exercise_text(notebook: str, answer_id: str) -> str:
    """The markdown of the exercise whose answer cell is `answer_id`: from its heading to the answer cell."""
    cells = nbformat.read(str(ROOT / "solutions" / f"{notebook}.ipynb"), as_version=4).cells
    ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in cells]
    if answer_id not in ids:
        return ""
    at = ids.index(answer_id)
    start = next((i for i in range(at, -1, -1) if cells[i].source.startswith("#")), at)
    return "\n".join(c.source for c in cells[start:at] if c.cell_type == "markdown")


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_rank_counts_a_check_runs_are_the_ones_its_statements_and_correct_line_say(notebook):
    """A constant of cases named in a statement (`DOUBLING_RANKS`) is the one fact: the statement, the check cell's
    "Correct:" line and the exercise's text list each of its rank counts, so changing it alone fails here."""
    graded = _graded(notebook)
    for entry in _data(notebook)["exercises"]:
        correct = " ".join(re.findall(r"Correct[^\n]*", graded.get(entry["grade_id"], {}).get("visible", "")))
        text = _exercise_text(notebook, entry["grade_id"].removesuffix("-check") + "-answer")
        for statement in entry["statements"]:
            modules = {
                ".".join(item.split(".")[:3])
                for held in statement.get("held_by", [])
                for item in held.values()
                if isinstance(item, str) and DOTTED.match(item) and item.startswith("course.checks.")
            }
            for name in CONSTANT.findall(statement.get("measured", "")):
                cases = next(
                    (
                        getattr(importlib.import_module(m), name)
                        for m in sorted(modules)
                        if hasattr(importlib.import_module(m), name)
                    ),
                    None,
                )
                if not isinstance(cases, tuple):
                    continue
                counts = _rank_counts(cases)
                where = f"{notebook}'s {entry['grade_id']}: {name} runs on {sorted(counts)} ranks"
                missing = counts - _stated(statement["measured"])
                assert not missing, f"{where}; its statement ({statement['kind']}) does not say {sorted(missing)}"
                for place, words in (("the cell's Correct line", correct), ("the exercise's text", text)):
                    missing = counts - _stated(words) if _stated(words) else set()
                    assert not missing, f"{where}; {place} does not say {sorted(missing)}"
