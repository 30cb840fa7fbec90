"""`python -m course release`: generate notebooks/ (student versions) from solutions/ with nbgrader.

The pipeline is nbgrader's own `GenerateAssignment` preprocessor list (LockCells, ClearSolutions,
ClearOutput, CheckCellMetadata, ComputeChecksums, [SaveCells], ClearHiddenTests, ClearMarkScheme,
ComputeChecksums, CheckCellMetadata), without a header file or a course directory. The output is
byte-for-byte deterministic, so `release --check` (and tests/test_release.py) can detect drift.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from nbformat import NotebookNode

from course import UserError
from course.grading import ASSIGNMENT, quiet_log, solutions_dir


def read_source(path: Path) -> NotebookNode:
    """An instructor notebook, or a UserError naming the file and what is wrong with it."""
    try:
        nb = nbformat.read(str(path), as_version=4)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise UserError(f"{path} cannot be read as a notebook ({exc}); fix or remove it") from None
    return nb


def course_notebooks(solutions: Path) -> list[Path]:
    """The instructor notebooks of the course, in order (solutions/*.ipynb)."""
    if not solutions.is_dir():
        raise UserError(f"no solutions folder at {solutions}; run from the course checkout or pass --solutions DIR")
    return sorted(p for p in solutions.glob("*.ipynb") if not p.name.startswith("."))


def _preprocessors(db_url: str | None) -> list:
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearHiddenTests,
        ClearMarkScheme,
        ClearOutput,
        ComputeChecksums,
        LockCells,
        SaveCells,
    )

    from course.grading.stubs import ClearSolutionsAnyLanguage

    log = quiet_log()
    before = [LockCells, ClearSolutionsAnyLanguage, ClearOutput, CheckCellMetadata, ComputeChecksums]
    after = [ClearHiddenTests, ClearMarkScheme, ComputeChecksums, CheckCellMetadata]
    chain = before + ([SaveCells] if db_url else []) + after
    return [cls(log=log) for cls in chain]


def student_version(nb: NotebookNode, notebook_id: str, db_url: str | None = None) -> NotebookNode:
    """The released notebook: solutions stubbed, hidden tests removed, outputs cleared, checksums set.

    With `db_url` (an nbgrader gradebook) the instructor's cells, hidden tests included, are saved
    into it on the way (nbgrader's SaveCells), which is what autograding restores from.
    """
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))  # a deep copy: the source is never changed
    _stable_ids(nb)
    resources = {"nbgrader": {"notebook": notebook_id, "assignment": ASSIGNMENT, "db_url": db_url}}
    try:
        for preprocessor in _preprocessors(db_url):
            nb, resources = preprocessor.preprocess(nb, resources)
    except Exception as exc:  # nbgrader reports a malformed source notebook with RuntimeError/ValueError/...
        raise UserError(f"solutions/{notebook_id}.ipynb is not a valid nbgrader notebook: {exc}") from None
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def _stable_ids(nb: NotebookNode) -> None:
    """Give cells without an id a deterministic one (nbformat would invent random ids)."""
    nb.nbformat_minor = max(nb.get("nbformat_minor", 5), 5)
    seen: set[str] = set()
    for index, cell in enumerate(nb.cells):
        cell_id = cell.get("id") or cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell-{index}"
        if cell_id in seen:
            cell_id = f"{cell_id}-{index}"
        cell["id"] = cell_id
        seen.add(cell_id)


def render(nb: NotebookNode) -> str:
    """The notebook as text, the same bytes every time for the same content."""
    return nbformat.writes(nb, version=4) + "\n"


def release(solutions: Path | None = None, notebooks: Path | None = None, check: bool = False) -> list[str]:
    """Write (or with `check`, compare) notebooks/ from solutions/; returns what changed, in words."""
    solutions = solutions_dir(solutions)
    notebooks = Path(notebooks) if notebooks is not None else solutions.parent / "notebooks"
    sources = course_notebooks(solutions)
    expected = {p.name: render(student_version(read_source(p), p.stem)) for p in sources}
    changes = []
    existing = {p.name for p in notebooks.glob("*.ipynb")} if notebooks.is_dir() else set()
    for name, text in expected.items():
        target = notebooks / name
        if name not in existing:
            changes.append(f"{name} (new)")
        elif target.read_text(encoding="utf-8") != text:
            changes.append(f"{name} (changed)")
        else:
            continue
        if not check:
            notebooks.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
    for name in sorted(existing - set(expected)):
        changes.append(f"{name} (no longer in {solutions.name}/, removed)")
        if not check:
            (notebooks / name).unlink()
    if check and changes:
        raise UserError(f"{notebooks.name}/ is out of date: {', '.join(changes)}; run: python -m course release")
    return changes
