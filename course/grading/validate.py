"""`python -m course validate NOTEBOOK`: run a learner's notebook and say which checks pass, in words.

Like `nbgrader validate` (it uses nbgrader's Execute, checksums and `determine_grade`), but the report
is one line per check with the reason it failed, never a traceback. Hidden tests are not in a
learner's copy, so passing here is necessary, not sufficient, for full marks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from course import UserError
from course.grading import CELL_TIMEOUT, MEMORY_LIMIT, parse_memory
from course.grading import explain


def validate(path: Path, timeout: float | None = None, memory: str | None = None) -> tuple[bool, list[str]]:
    """Run the notebook at PATH (a copy: the file is not changed); returns (all passed, report lines)."""
    path = Path(path)
    from course.grading.execute import check_timeout

    timeout = check_timeout(CELL_TIMEOUT if timeout is None else timeout)
    memory_bytes = parse_memory(MEMORY_LIMIT if memory is None else memory)
    if not path.is_file():
        raise UserError(f"no notebook at {path}")
    if path.suffix.lower() != ".ipynb":
        raise UserError(f"{path} is not a notebook (.ipynb)")
    nb, checks = _read(path)
    notes = _changed_notes(nb)
    outcome, stop = _run(nb, path, timeout, memory_bytes)
    passed, got, total, results = _check_lines(checks, outcome, stop, timeout)
    header = f"{path.name}: {passed} of {len(checks)} checks pass ({got:g} of {total:g} points)"
    footer = (
        "All visible checks pass. Hidden tests are added when it is graded."
        if passed == len(checks)
        else "Fix the failing checks above, then validate again."
    )
    return passed == len(checks), [header, *notes, *results, *_answer_notes(nb, outcome, timeout), footer]


def _read(path: Path) -> tuple[Any, list[tuple[int, Any]]]:
    """The notebook, and its checks as (cell index, cell); a file that is not one, or has none, is a UserError."""
    from course.grading.autograde import Problem, parse
    from nbgrader.utils import is_grade, is_solution

    try:
        nb = parse(path.read_bytes())
    except Problem as problem:
        raise UserError(f"{path.name}: {problem.message}") from None
    checks = [(i, c) for i, c in enumerate(nb.cells) if is_grade(c) and not is_solution(c)]
    if not checks:
        raise UserError(f"{path.name} has no graded checks (no cells with nbgrader grade metadata)")
    return nb, checks


def _changed_notes(nb: Any) -> list[str]:
    """A NOTE line for each locked cell the learner changed (grading uses the original)."""
    from nbgrader.utils import compute_checksum, is_grade, is_locked

    lines = []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if is_locked(cell) and meta.get("checksum") and compute_checksum(cell) != meta["checksum"]:
            what = "check" if is_grade(cell) else "locked cell"
            lines.append(
                f"  NOTE  {what} {meta.get('grade_id', index + 1)} was changed: grading uses the "
                f"original, so get a fresh copy of it from notebooks/"
            )
    return lines


def _run(nb: Any, path: Path, timeout: float, memory_bytes: int) -> tuple[Any, str]:
    """Run the notebook from empty outputs in its folder: the outcome, and why it stopped early ('' if it did not)."""
    from course.grading.execute import run

    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    outcome = run(nb, str(path.parent.resolve()), timeout, memory_bytes)
    stop = ""
    if outcome.stopped:
        label = f"cell {outcome.stopped_cell + 1}" if outcome.stopped_cell is not None else ""
        stop = explain.stop_words(outcome, label, timeout, memory_bytes)
    return outcome, stop


def _check_lines(
    checks: list[tuple[int, Any]], outcome: Any, stop: str, timeout: float
) -> tuple[int, float, float, list[str]]:
    """A PASS or FAIL line for each check: (checks passed, points got, points in all, lines)."""
    from nbgrader.utils import determine_grade

    total = got = 0.0
    passed = 0
    lines = []
    for index, cell in checks:
        grade_id = cell.metadata.nbgrader.get("grade_id", f"cell {index + 1}")
        score, points = determine_grade(cell)
        total += points
        if index not in outcome.executed:
            lines.append(f"  FAIL  {grade_id} ({points:g} points): not run: {stop or 'the notebook stopped before it'}")
            continue
        if score is not None and score >= points:
            passed += 1
            got += points
            lines.append(f"  PASS  {grade_id} ({points:g} points)")
        else:
            got += score or 0
            why = explain.cell_error_words(cell, timeout) or "failed"
            lines.append(f"  FAIL  {grade_id} ({points:g} points): {why}")
    return passed, got, total, lines


def _answer_notes(nb: Any, outcome: Any, timeout: float) -> list[str]:
    """A short note for each of the learner's own answer cells that raised."""
    from nbgrader.utils import is_solution

    lines = []
    for index, cell in enumerate(nb.cells):
        if is_solution(cell) and index in outcome.executed:
            error = explain.first_error(cell)
            if error is not None:
                lines.append(
                    f"  note  answer {cell.metadata.nbgrader.get('grade_id', index + 1)}: "
                    f"{explain.error_words(error.ename, error.evalue, timeout)}"
                )
    return lines
