"""The notebook pages' outputs (figures, printed results), from a recorded run of the solutions.

    python -m course run --out dry-run                 # the run: executed notebooks and record.json
    DOCS_RUN=dry-run python -m website.build           # or: make docs DOCS_RUN=dry-run

A teaching cell (neither an answer nor a check, as nbgrader's own metadata says) gets the outputs the run gave it,
matched by cell id, where the student copy shows the very code that ran; an answer's or a check's output, and any
cell changed since the run, stay empty. Each page says which run its outputs come from, or that it has none.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from course import UserError, records
from course.run import FIGURE_MIME
from website import results


@dataclass(frozen=True)
class Run:
    """A folder `python -m course run --out` wrote: its record (date, commit, machine, each notebook's status)."""

    folder: Path
    record: dict[str, Any]

    def entry(self, name: str) -> dict[str, Any] | None:
        """The record's entry for notebook NAME, if the run ran it."""
        return next((e for e in self.record["notebooks"] if e["notebook"] == name), None)


def load(folder: str | Path) -> Run:
    """The run in FOLDER, or a UserError saying what it lacks."""
    folder = Path(folder).expanduser().resolve()
    path = folder / "record.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        raise UserError(f"DOCS_RUN: no record.json in {folder}; give a folder of python -m course run --out") from None
    if record.get("schema") != records.SCHEMA or record.get("kind") != records.RUN:
        raise UserError(f"DOCS_RUN: {path} is not the record of a `course run` of schema {records.SCHEMA}")
    return Run(folder, record)


def teaching(cell: NotebookNode) -> bool:
    """A code cell the course teaches with: not an answer (a solution cell) nor a check (a graded cell)."""
    from nbgrader.utils import is_grade, is_solution

    return cell.cell_type == "code" and not is_solution(cell) and not is_grade(cell)


def copy_outputs(student: NotebookNode, executed: NotebookNode) -> int:
    """Give STUDENT's teaching cells the outputs of EXECUTED's cells of the same id and the same code; how many
    teaching cells of STUDENT changed since (left without outputs)."""
    ran = {cell.get("id"): cell for cell in executed.cells if teaching(cell)}
    changed = 0
    for cell in student.cells:
        if not teaching(cell):
            continue
        source = ran.get(cell.get("id"))
        if source is None or source.source != cell.source:
            changed += 1
            continue
        cell.outputs = [_shown(output) for output in source.outputs]
    return changed


def _shown(output: NotebookNode) -> NotebookNode:
    """OUTPUT without the key figure's data (for `course run`'s index; the page shows its text)."""
    output.get("data", {}).pop(FIGURE_MIME, None)
    return output


def show(student: NotebookNode, name: str, run: Run | None) -> str:
    """Copy the outputs RUN gave notebook NAME onto STUDENT (its student copy); the page's note saying where its
    outputs come from, in Markdown."""
    entry = run.entry(name) if run else None
    path = run.folder / f"{name}.ipynb" if run else None
    if run is None:
        said = "This page shows the notebook without outputs: the site was built without a recorded run."
    elif entry is None or not path.is_file():
        said = "This page shows the notebook without outputs: the recorded run the site was built from did not run it."
    elif entry["status"] != "ok":
        said = f"This page shows the notebook without outputs: its recorded run failed ({entry['error']})."
    else:
        import nbformat

        changed = copy_outputs(student, nbformat.read(str(path), as_version=4))
        said = (
            "The outputs on this page (figures, printed results) come from a run of the solutions. "
            f"{results.provenance(run.record, source='')} Your numbers will differ with the machine and its load; "
            "the exercises and their checks are shown as you get them, without outputs."
        )
        if changed:
            said += f" {changed} cell(s) changed since that run and show no output."
    return "\n".join(["```{admonition} Where the outputs come from", ":class: note", "", said, "```"])
