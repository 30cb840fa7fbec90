"""The site's reference of what each exercise must do and which check holds each statement, generated from one data
file per notebook, solutions/exercises/NN_name.yml (instructor-only: solutions/ is not in the student copy).

    write_pages(source)       # SOURCE/reference/exercises.md and one exercises-NN.md per notebook (label())

A data file lists, per graded cell (its grade_id), the statements an answer must satisfy: their kind (result,
process, leaves), their words, the checks that hold them (`visible:` or `hidden:`, each a `course.` function the
cell's part calls or words of that part) and how each is measured. The exercises' titles are read from the
notebook's `## Exercise` headings, never written in the data; an `answer:` (what the checks hold only as digests)
stays in the data file and never reaches a page. tests/test_exercise_references.py holds the files to the notebooks.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from course import UserError, contents

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "solutions" / "exercises"
HEADING = re.compile(r"^## (Exercise\b.*)$", re.M)
HIDDEN = "### BEGIN HIDDEN TESTS"
KINDS = ("result", "process", "leaves")

INTRO = """\
An exercise is right when its result, the way it was computed and what it leaves behind are right: a learner who
gets the right numbers without the distributed work has not done the exercise. For every graded exercise, its page
says what must be true of an answer, of three kinds: **result** (values, shapes, dtypes, tolerance), **process**
(where it ran, which ranks did what, what was communicated and how much, the arguments the run was made with) and
**leaves** (files, by which rank, rows and their fields, compared with the run's own measurements). Each statement
names the check that holds it: **visible**, the check cell under the exercise, which tells the learner what is
wrong (the function of `course.checks` it calls, or the cell's own words), or **hidden**, the hidden tests run
only when grading; and how it is measured: from outside the answer (the runtime's records, the communicator's
counts, the process's memory, a run of its own), or, where it says so, from what the answer reports about itself.

These pages are generated from `solutions/exercises/NN_name.yml`, one file per notebook (in the instructors'
checkout only); `python -m course new-exercise` adds an exercise's entry there."""


@dataclass(frozen=True)
class Graded:
    """A graded cell of a solution notebook: the `## Exercise` heading it is under and its two parts' source."""

    grade_id: str
    title: str
    visible: str
    hidden: str


def graded_cells(path: Path) -> dict[str, Graded]:
    """grade_id -> the graded cell of the notebook at PATH, in the notebook's order."""
    found, title = {}, ""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        headings = HEADING.findall(source)
        if headings:
            title = headings[-1].strip()
        nbgrader = cell["metadata"].get("nbgrader", {})
        if nbgrader.get("grade"):
            visible, _, hidden = source.partition(HIDDEN)
            found[nbgrader["grade_id"]] = Graded(nbgrader["grade_id"], title, visible, hidden)
    return found


def load(path: Path) -> dict[str, Any]:
    """A notebook's data file, read."""
    import yaml

    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _cell(text: str) -> str:
    """TEXT as one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _held_by(items: list[dict[str, str]]) -> str:
    return "; ".join(f"{part} `{_cell(what)}`" for item in items for part, what in item.items())


def label(notebook: contents.Notebook, found: list[contents.Notebook]) -> str:
    """How NOTEBOOK's page is named and headed: its number, or its name where the notebooks FOUND share the number
    (a notebook in parts, as 07's: exercises-07_horovod, exercises-07_horovod_script; and 06's, 09's and 11's)."""
    return notebook.name if sum(nb.number == notebook.number for nb in found) > 1 else notebook.number


def page(notebook: contents.Notebook, data: dict[str, Any], cells: dict[str, Graded], name: str = "") -> str:
    """The Markdown reference page of NOTEBOOK (headed NAME, its number by default): its exercises in the notebook's
    order, each with its table."""
    entries = {entry["grade_id"]: entry for entry in data.get("exercises") or []}
    unknown = sorted(set(entries) - set(cells))
    missing = [g for g in cells if g not in entries]
    where = f"solutions/exercises/{notebook.name}.yml"
    if unknown:
        raise UserError(f"{where} names {unknown}, which solutions/{notebook.name}.ipynb has no graded cell for")
    if missing:
        raise UserError(
            f"{where} has no entry for the graded cell(s) {missing}: python -m course new-exercise writes one"
        )
    lines = [
        f"# Notebook {name or notebook.number}: what each exercise must do",
        "",
        f"The graded exercises of [{notebook.title}](../notebooks/{notebook.name}.ipynb), what must be true of an "
        "answer, which check holds each statement and how it is measured.",
        "",
    ]
    if data.get("intro"):
        lines += [data["intro"].strip(), ""]
    for grade_id, graded in cells.items():
        lines += [f"## {graded.title or grade_id}", "", f"Graded cell `{grade_id}`.", ""]
        lines += ["| kind | what must be true | held by | how it is measured |", "|---|---|---|---|"]
        for statement in entries[grade_id]["statements"]:
            must = _cell(statement["must"])
            if statement.get("of"):
                must = f"{_cell(statement['of'])}: {must}"
            lines.append(
                f"| {statement['kind']} | {must} | {_held_by(statement['held_by'])} | {_cell(statement['measured'])} |"
            )
        lines.append("")
    if data.get("not_checked"):
        lines += ["## Not checked", "", data["not_checked"].strip(), ""]
    return "\n".join(lines)


def index_page(found: list[contents.Notebook]) -> str:
    """The reference's first page: what the per-notebook pages say, and their table of contents."""
    toc = [f"exercises-{label(nb, found)}" for nb in found]
    return "\n".join(
        ["# What each exercise must do", "", INTRO, "", "```{toctree}", ":maxdepth: 1", "", *toc, "```", ""]
    )


def write_pages(source: Path, solutions: Path = ROOT / "solutions") -> list[Path]:
    """Write SOURCE/reference/exercises.md and exercises-NN.md for every solution notebook; returns the pages."""
    found = contents.notebooks(solutions)
    folder = source / "reference"
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "exercises.md"]
    written[0].write_text(index_page(found), encoding="utf-8")
    for notebook in found:
        data_file = solutions / "exercises" / f"{notebook.name}.yml"
        if not data_file.is_file():
            raise UserError(
                f"no solutions/exercises/{notebook.name}.yml: every notebook's exercises are described there"
            )
        cells = graded_cells(solutions / f"{notebook.name}.ipynb")
        path = folder / f"exercises-{label(notebook, found)}.md"
        path.write_text(page(notebook, load(data_file), cells, label(notebook, found)), encoding="utf-8")
        written.append(path)
    return written
