"""Semantic mutants: what a learner might write instead of an exercise's solution, tried like operator mutants.

They are the plausible wrong answers listed beside each notebook for the strength test,
tests/fixtures/wrong_answers/<notebook>.json (its README says the format): one list, read here as it is. Each entry
replaces whole answer cells (by grade_id) and says `why` it is wrong; `hidden_only` says which hidden case catches
it when the visible check lets it through. An entry that writes several exercises' cells counts for the first of
them in the notebook's order; its trial runs through the last check of every exercise it writes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from course import UserError
from course.grading import ROOT
from course.mutation.operators import Mutant, short_diff

FOLDER = ROOT / "tests" / "fixtures" / "wrong_answers"  # the strength test's list, one file per notebook
NOTES = frozenset({"why", "hidden_only"})  # an entry's keys that are not answer cells


def answer_cells(entry: dict) -> dict[str, str]:
    """An entry's answer cells: grade_id -> source, without its notes (`why`, `hidden_only`)."""
    return {g: s for g, s in entry.items() if g not in NOTES}


@dataclass
class SemanticMutant(Mutant):
    """A plausible wrong answer: the answer cells it writes (its exercise's first), and why it is wrong."""

    cells: dict[str, str] = field(default_factory=dict)
    hidden_only: str = ""  # the list's word on which hidden case catches it ('' if the visible check should)
    number: int = 0  # its place in the list (0, 1, ...), to find it there

    @property
    def trial(self) -> dict[str, str]:
        return dict(self.cells)


def read(notebook: str, folder: Path = FOLDER) -> list[dict]:
    """The list of wrong answers for NOTEBOOK (a stem) in FOLDER; none if there is no file."""
    path = Path(folder) / f"{notebook}.json"
    if not path.is_file():
        return []
    try:
        entries = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON ({exc}): fix the list of wrong answers") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UserError(f"{path} should hold a list of entries (objects of answer cells and `why`)")
    return entries


def mutants(notebook: str, solution: dict[str, str], folder: Path = FOLDER) -> dict[str, list[SemanticMutant]]:
    """answer grade_id -> its semantic mutants, from the list for NOTEBOOK; SOLUTION maps each answer cell of the
    notebook to its source, in the notebook's order (the diffs are against it)."""
    order = list(solution)
    found: dict[str, list[SemanticMutant]] = {}
    for number, entry in enumerate(read(notebook, folder)):
        cells = answer_cells(entry)
        unknown = sorted(set(cells) - set(solution))
        if unknown or not cells:
            named = f"cell {unknown[0]!r}, which is not one of its answer cells" if unknown else "no answer cell"
            raise UserError(f"{Path(folder) / notebook}.json: entry {number} names {named} (fix the list)")
        written = sorted(cells, key=order.index)
        why = str(entry.get("why", "")).strip() or f"entry {number} of the list"
        diff = "\n".join((f"{g}:\n" if len(written) > 1 else "") + short_diff(solution[g], cells[g]) for g in written)
        mutant = SemanticMutant(written[0], "semantic", why, -1, -1, cells[written[0]], diff)
        mutant.cells, mutant.hidden_only, mutant.number = cells, str(entry.get("hidden_only", "")), number
        found.setdefault(written[0], []).append(mutant)
    return found
