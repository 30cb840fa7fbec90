"""Checks are code (CONTRIBUTING.md): a notebook's check cell only calls its check in course/checks/ (at most
12 lines above its hidden tests, and no function of its own), and every answer in tests/fixtures/ is tried
against those functions directly by a fast test (tests/test_checks_*.py, each naming its NOTEBOOK and the
answer cells it COVERS)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.check_cases import covered
from tests.conftest import ROOT

LONGEST = 12  # lines of a check cell above its hidden tests


def visible_lines(source: str) -> list[str]:
    """A check cell's lines, its hidden tests left out."""
    return source.split("### BEGIN HIDDEN TESTS")[0].rstrip("\n").splitlines()


def check_cells(notebook: str) -> dict[str, str]:
    cells = json.loads((ROOT / "solutions" / f"{notebook}.ipynb").read_text())["cells"]
    return {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in cells
        if c["metadata"].get("nbgrader", {}).get("grade")
    }


def todos(root: Path = ROOT) -> list[str]:
    """Where a TODO the `new-exercise` scaffold writes is left: the notebooks, checks, their fast tests, the
    fixtures and the exercises' data files, solutions/exercises/*.yml (file: line)."""
    places = [
        *(root / "solutions").glob("*.ipynb"),
        *(root / "course" / "checks").glob("*.py"),
        *(root / "tests").glob("test_checks_*.py"),
        *(root / "tests" / "fixtures").glob("*_answers/*.json"),
        *(root / "solutions" / "exercises").glob("*.yml"),
    ]
    return [
        f"{path.relative_to(root)}: {line.strip()[:80]}"
        for path in sorted(places)
        for line in path.read_text().splitlines()
        if "TODO" in line
    ]


NOTEBOOKS = sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))


def test_visible_lines_leave_out_the_hidden_tests():
    cell = "a = 1\nassert a\n### BEGIN HIDDEN TESTS\nassert 2\n### END HIDDEN TESTS"
    assert visible_lines(cell) == ["a = 1", "assert a"]
    assert visible_lines("x\n") == ["x"]


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_check_cells_call_a_check_module(notebook):
    for grade_id, source in check_cells(notebook).items():
        lines = visible_lines(source)
        assert len(lines) <= LONGEST, (
            f"{notebook} {grade_id}: {len(lines)} lines above its hidden tests; move the check into course/checks/ "
            f"and call it (at most {LONGEST} lines)"
        )
        defined = [line for line in lines if line.lstrip().startswith(("def ", "class "))]
        assert not defined, f"{notebook} {grade_id} defines {defined[0].strip()!r}: put it in course/checks/"


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_check_a_cell_calls_is_in_its_modules_index(notebook):
    """A check module's docstring lists the checks its notebooks' cells call (new-exercise adds the line)."""
    for grade_id, source in check_cells(notebook).items():
        visible = "\n".join(visible_lines(source))
        for module, alias in re.findall(r"^from course\.checks import (\w+) as (\w+)", visible, re.M):
            index = importlib.import_module(f"course.checks.{module}").__doc__ or ""
            for name in sorted(set(re.findall(rf"\b{alias}\.(\w+)\(", visible))):
                assert re.search(rf"^ +{name}\(", index, re.M), (
                    f"{notebook} {grade_id} calls {module}.{name}, which course/checks/{module}.py's docstring does "
                    f"not list: add a line `    {name}(...)    # {grade_id.removesuffix('-check')}: what it checks`"
                )


def fast_tests() -> dict[str, set[str]]:
    """notebook -> the answer cells the fast tests cover (each tests/test_checks_*.py module's COVERED)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").glob("test_checks_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        if hasattr(module, "NOTEBOOK"):
            found.setdefault(module.NOTEBOOK, set()).update(module.COVERED)
    return found


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_fixture_answer_has_a_fast_test(notebook):
    missing = covered(notebook) - fast_tests().get(notebook, set())
    assert not missing, (
        f"fixture answers to {sorted(missing)} of {notebook} are tried by no fast test: add them to a "
        "tests/test_checks_*.py module's COVERED, with a test that tries them (tests/check_cases.py)"
    )


def test_no_todo_is_left_from_a_new_exercise():
    left = todos()
    assert not left, f"{len(left)} TODO(s) of `python -m course new-exercise` left to write, first {left[0]}"
