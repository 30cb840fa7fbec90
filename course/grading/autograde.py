"""Grade one submission against the instructor's notebook, on nbgrader's machinery.

The instructor's cells (hidden tests included) go into a throwaway nbgrader gradebook with
nbgrader's SaveCells (`gradebook()`, once per notebook). Each submission is then put right the way
nbgrader's autograder does it (ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells,
CheckCellMetadata), executed under limits (course.grading.execute), and scored by LimitOutput and
SaveAutoGrades. Around that we add what a class needs: tampering reported in words, deleted test
cells put back (RestoreInstructorCells), cells a dead kernel never ran scored as not run (MarkNotRun:
nbgrader would count a cell with no output as passed), and one row per graded cell with a plain-words
message. The steps are the two named lists BEFORE_RUN and AFTER_RUN, as in nbgrader's converters/autograde.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode

from course.grading import ASSIGNMENT, FIELDS, number, quiet_log, row  # noqa: F401 - FIELDS still importable here
from course.grading import explain
from course.grading.execute import MAX_OUTPUT, Outcome, run, size_words

warnings.filterwarnings("ignore", message=".*not in session.*")  # nbgrader's add_submission, harmless


@dataclass
class Cell:
    """What the instructor's notebook says about one nbgrader cell."""

    grade_id: str
    cell_type: str
    grade: bool
    solution: bool
    locked: bool
    points: float
    checksum: str  # of the released cell (what a learner has)
    full_checksum: str  # of the instructor's cell, hidden tests included (what nbgrader stores)


@dataclass
class Spec:
    """An instructor notebook as the grader needs it: its cells in order and its gradebook."""

    notebook: str
    cells: list[Cell]
    gradebook: str  # path of a gradebook file holding this notebook (copied per submission)
    released: str  # the released notebook as text (to identify misnamed submissions)

    @property
    def graded(self) -> list[Cell]:
        return [c for c in self.cells if c.grade]

    @property
    def total(self) -> float:
        return sum(c.points for c in self.graded)


@dataclass
class Job:
    """One submission to grade: who, which notebook, the file's bytes (read once, never written)."""

    student: str
    file: str
    spec: Spec
    data: bytes
    timeout: float
    memory: int
    note: str = ""  # e.g. graded under another name


@dataclass
class Result:
    rows: list[dict] = field(default_factory=list)
    feedback: str = ""
    machinery: str = ""  # why the grading machinery (not the submission) failed: not a score, never cached


MACHINERY_ERRORS = ("ClusterDown",)  # raised by course.cluster when its processes fail, whatever the learner wrote


class Problem(Exception):
    """A submission that cannot be graded at all (status, message)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def gradebook(source: Path, workdir: Path) -> Spec:
    """Save the instructor's notebook into a fresh nbgrader gradebook (nbgrader's SaveCells)."""
    from nbgrader.api import Gradebook
    from nbgrader.utils import compute_checksum

    from course.grading.release import read_source, render, student_version

    _alembic_in_process()
    notebook = source.stem
    db = workdir / f"{notebook}.gradebook.db"
    db.unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    with Gradebook(url) as gb:
        gb.add_assignment(ASSIGNMENT)
    released = student_version(read_source(source), notebook, db_url=url)
    with Gradebook(url) as gb:
        full = {c.name: c.checksum for c in gb.find_notebook(notebook, ASSIGNMENT).source_cells}
    cells = []
    for cell in released.cells:
        meta = cell.metadata.get("nbgrader", {})
        if "grade_id" in meta:
            cells.append(
                Cell(
                    meta["grade_id"],
                    cell.cell_type,
                    bool(meta.get("grade")),
                    bool(meta.get("solution")),
                    bool(meta.get("locked")),
                    float(meta.get("points", 0) or 0),
                    meta.get("checksum") or compute_checksum(cell),
                    full.get(meta["grade_id"], ""),
                )
            )
    return Spec(notebook, cells, str(db), render(released))


def _alembic_in_process() -> None:
    """nbgrader asks the `alembic` command for its schema head when it creates a gradebook (a new
    Python process, seconds on a busy node); ask alembic's own Python API the same question instead."""
    import nbgrader.api as api

    if getattr(api.get_alembic_version, "in_process", False):
        return

    def get_alembic_version() -> str:
        from alembic.config import Config
        from alembic.script import ScriptDirectory

        with api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
            return ScriptDirectory.from_config(Config(ini)).get_current_head()

    get_alembic_version.in_process = True  # type: ignore[attr-defined]
    api.get_alembic_version = get_alembic_version


def parse(data: bytes) -> NotebookNode:
    """The submitted notebook, or a Problem saying in words why the file is not one."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise Problem("invalid", "not a notebook: the file is not text (a PDF, an image or an archive?)") from None
    if not text.strip():
        raise Problem("invalid", "the file is empty")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise Problem(
            "invalid",
            f"the file is not valid notebook JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}); it may be cut short or edited outside Jupyter",
        ) from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise Problem("invalid", "the file is JSON but not a Jupyter notebook (it has no list of cells)")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat raises several kinds for broken structure
        raise Problem("invalid", f"the notebook's structure is broken: {explain.one_line(exc)}") from None
    good = []
    for cell in nb.cells:
        if isinstance(cell, dict) and cell.get("cell_type") in ("code", "markdown", "raw") and "source" in cell:
            cell.setdefault("metadata", NotebookNode())
            if cell.cell_type == "code":
                cell.setdefault("outputs", [])
                cell.setdefault("execution_count", None)
            if isinstance(cell.source, list):
                cell.source = "".join(cell.source)
            good.append(cell)
    nb.cells = good
    return nb


def _metadata(cell: Cell) -> dict:
    meta = {
        "grade": cell.grade,
        "solution": cell.solution,
        "locked": cell.locked,
        "grade_id": cell.grade_id,
        "schema_version": 3,
        "checksum": cell.checksum,
    }
    if cell.grade:
        meta["points"] = cell.points
    return meta


class RestoreInstructorCells(Preprocessor):
    """Reset every nbgrader cell's metadata to the instructor's and put deleted test cells back, saying in words
    what was found (resources["course"]: notes for the notebook, per_cell notes by grade_id)."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        notes, per_cell = repair(nb, resources["course"]["spec"])
        resources["course"].update(notes=notes, per_cell=per_cell)
        return nb, resources


class MarkNotRun(Preprocessor):
    """Cells the kernel never ran (it died or hit a limit) get an error output, so SaveAutoGrades scores them 0."""

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        outcome, reason = resources["course"]["outcome"], resources["course"]["stop"]
        for index, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and cell.source.strip() and index not in outcome.executed:
                cell.outputs = [
                    nbformat.v4.new_output("error", ename="NotRun", evalue=reason or "not run", traceback=[])
                ]
        return nb, resources


def repair(nb: NotebookNode, spec: Spec) -> tuple[list[str], dict[str, str]]:
    """Reset nbgrader metadata to the instructor's, put deleted test cells back; report it in words.

    Returns notebook-wide notes and notes per grade_id.
    """
    notes: list[str] = []
    per_cell: dict[str, str] = {}
    present = _reset_metadata(nb, spec, notes, per_cell)
    _restore_tests(nb, spec, present, notes, per_cell)
    return notes, per_cell


def _reset_metadata(nb: NotebookNode, spec: Spec, notes: list[str], per_cell: dict[str, str]) -> dict[str, int]:
    """Give every nbgrader cell the instructor's metadata, noting each cell whose type, locked source or metadata
    was changed; cells nbgrader does not know, and second copies, become ordinary code. Returns where each is."""
    from nbgrader.utils import compute_checksum

    known = {c.grade_id: c for c in spec.cells}
    present: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader")
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if meta is None:
            continue
        if grade_id not in known or grade_id in present:
            what = "a second copy of" if grade_id in present else "an unknown nbgrader cell"
            notes.append(f"{what} {grade_id or '(no id)'} (cell {index + 1}) was graded as ordinary code")
            del cell.metadata["nbgrader"]
            continue
        present[grade_id] = index
        source = known[grade_id]
        if cell.cell_type != source.cell_type:
            per_cell[grade_id] = f"its cell type was changed to {cell.cell_type}; the instructor's type was used"
        elif source.locked and compute_checksum(
            nbformat.from_dict({**cell, "metadata": {**cell.metadata, "nbgrader": _metadata(source)}})
        ) not in (source.checksum, source.full_checksum):
            kind = "test cell" if source.grade else "locked cell"
            per_cell[grade_id] = f"this {kind} was edited; the instructor's version was used"
        elif any(meta.get(k) != v for k, v in _metadata(source).items() if k not in ("checksum", "schema_version")):
            per_cell[grade_id] = "its grading metadata was changed; the instructor's was used"
        cell.metadata["nbgrader"] = nbformat.from_dict(_metadata(source))
        if source.locked:
            cell.metadata["deletable"] = False
            cell.metadata["editable"] = False
    return present


def _restore_tests(
    nb: NotebookNode, spec: Spec, present: dict[str, int], notes: list[str], per_cell: dict[str, str]
) -> None:
    """Put each deleted test cell back after the nearest earlier cell that is still there (nbgrader's own
    OverwriteCells builds it from the gradebook); a missing answer cell is only noted."""
    from nbgrader.preprocessors import OverwriteCells

    restore = OverwriteCells(log=quiet_log())
    order = [c.grade_id for c in spec.cells]
    for position, source in enumerate(spec.cells):
        if source.grade_id in present:
            continue
        if source.solution and not source.grade:
            notes.append(f"the answer cell {source.grade_id} is missing")
            continue
        if not source.grade:
            continue  # a deleted instruction cell changes nothing
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{spec.gradebook}") as gb:
            stored = gb.find_source_cell(source.grade_id, spec.notebook, ASSIGNMENT)
            new = nbformat.from_dict(restore.missing_cell_transform(stored, source.points, is_solution=source.solution))
        new.source = stored.source  # run the instructor's test as it is (no added comment line)
        new.metadata["nbgrader"] = nbformat.from_dict(_metadata(source))
        earlier = [present[g] for g in order[:position] if g in present]
        at = max(earlier) + 1 if earlier else 0
        nb.cells.insert(at, new)
        present = {g: (i + 1 if i >= at else i) for g, i in present.items()}
        present[source.grade_id] = at
        per_cell[source.grade_id] = "this test cell had been deleted; the instructor's version was put back"


def _label(nb: NotebookNode, index: int | None) -> str:
    if index is None or index >= len(nb.cells):
        return ""
    grade_id = nb.cells[index].metadata.get("nbgrader", {}).get("grade_id")
    return f"cell {index + 1} ({grade_id})" if grade_id else f"cell {index + 1}"


def grade(job: Job) -> Result:
    """Grade one submission; never raises for anything the submission does."""
    try:
        return _grade(job)
    except Problem as problem:
        return _whole(job, problem.status, problem.message)
    except Exception as exc:  # the last line of defence: one bad submission never stops the class
        return _whole(
            job, "error", f"the grader could not grade this file: {type(exc).__name__}: {explain.one_line(exc)}"
        )


def _whole(job: Job, status: str, message: str) -> Result:
    """Every graded cell at zero with the same reason (the notebook could not be run)."""
    spec = job.spec
    rows = [row(job.student, spec.notebook, status, message, c.grade_id, 0, number(c.points)) for c in spec.graded]
    text = _feedback(job, rows, [message])
    return Result(rows, text)


def steps() -> tuple[list[type], list[type]]:
    """The preprocessors that run before the submission is executed, and after: nbgrader's own, and ours."""
    from nbgrader.preprocessors import (
        CheckCellMetadata,
        ClearOutput,
        DeduplicateIds,
        LimitOutput,
        OverwriteCells,
        OverwriteKernelspec,
        SaveAutoGrades,
    )

    before_run = [
        RestoreInstructorCells,
        ClearOutput,
        DeduplicateIds,
        OverwriteKernelspec,
        OverwriteCells,
        CheckCellMetadata,
    ]
    after_run = [MarkNotRun, LimitOutput, SaveAutoGrades]
    return before_run, after_run


def _grade(job: Job) -> Result:
    from nbgrader.api import Gradebook

    spec = job.spec
    nb = parse(job.data)
    work = Path(tempfile.mkdtemp(prefix="course-grade-"))
    try:
        db = work / "gradebook.db"
        shutil.copyfile(spec.gradebook, db)
        url = f"sqlite:///{db}"
        with Gradebook(url) as gb:
            gb.add_student(job.student)
            gb.add_submission(ASSIGNMENT, job.student)
        resources = {
            "nbgrader": {"notebook": spec.notebook, "assignment": ASSIGNMENT, "student": job.student, "db_url": url},
            "metadata": {"path": str(work)},
            "course": {"spec": spec},
        }
        log = quiet_log()
        before_run, after_run = steps()
        for step in before_run:
            nb, resources = step(log=log).preprocess(nb, resources)
        outcome = run(nb, str(work), job.timeout, job.memory)  # under the limits (course.grading.execute)
        stop = ""
        if outcome.stopped:
            stop = explain.stop_words(outcome, _label(nb, outcome.stopped_cell), job.timeout, job.memory)
        resources["course"].update(outcome=outcome, stop=stop)
        for step in after_run:
            nb, resources = step(log=log).preprocess(nb, resources)
        notes, per_cell = resources["course"]["notes"], resources["course"]["per_cell"]
        with Gradebook(url) as gb:
            scores = {
                g.name: (g.auto_score, g.max_score)
                for g in gb.find_submission_notebook(spec.notebook, ASSIGNMENT, job.student).grades
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    broken = _machinery_failure(nb)
    if outcome.stopped == "nostart":  # no code of the learner ran: not their score to lose
        broken = f"the kernel would not start: {outcome.detail}"
    if broken:
        return _machinery(job, broken)
    rows = _rows(job, nb, scores, outcome, per_cell) + _notebook_rows(job, nb, outcome, stop, notes)
    return Result(rows, _feedback(job, rows, notes, nb))


def _notebook_rows(job: Job, nb: NotebookNode, outcome: Outcome, stop: str, notes: list[str]) -> list[dict]:
    """Rows about the whole notebook: why it stopped, then a warning per note (how the file was recognised, the
    repairs, where output was cut). NOTES gets the same words, in the order the feedback shows them."""
    if outcome.truncated:
        labels = ", ".join(_label(nb, i) for i in sorted(outcome.truncated))
        notes.append(f"output was cut at {size_words(MAX_OUTPUT)} per cell in {labels}")
    warnings = ([job.note] if job.note else []) + notes
    rows = [row(job.student, job.spec.notebook, "warning", note) for note in warnings]
    if outcome.stopped:
        status = {"memory": "memory", "timeout": "timeout"}.get(outcome.stopped, "crashed")
        rows.insert(0, row(job.student, job.spec.notebook, status, stop))
        notes.insert(0, stop)
    if job.note:
        notes.insert(0, job.note)
    return rows


def _machinery_failure(nb: NotebookNode) -> str:
    """The first error of the grading machinery in the run (a cluster that could not start or was lost), if any."""
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "error" and (
                output.get("ename") in MACHINERY_ERRORS or "ClusterDown" in str(output.get("evalue", ""))
            ):
                return f"{_label(nb, index)}: {output.get('ename')}: {explain.one_line(output.get('evalue', ''))}"
    return ""


def _machinery(job: Job, detail: str) -> Result:
    """Rows for a submission the grading machinery failed on: status error, no points (not the learner's score)."""
    message = (
        f"not graded: the grading machinery failed, not this submission ({detail}); "
        f"it was not saved, so the next `course grade` grades it again"
    )
    rows = [
        row(job.student, job.spec.notebook, "error", message, c.grade_id, "", number(c.points)) for c in job.spec.graded
    ]
    return Result(rows, _feedback(job, rows, [message]), machinery=detail)


def _answer_trouble(nb: NotebookNode, index: int, timeout: float) -> str:
    """The error of the answer cell nearest above a test cell, if it failed."""
    for cell in reversed(nb.cells[:index]):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            return ""
        if meta.get("solution") and cell.cell_type == "code":
            words = explain.cell_error_words(cell, timeout)
            return f"{meta.get('grade_id')}: {words}" if words else ""
    return ""


def _rows(job: Job, nb: NotebookNode, scores: dict, outcome: Outcome, per_cell: dict[str, str]) -> list[dict]:
    where = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in enumerate(nb.cells)}
    rows = []
    for source in job.spec.graded:
        index = where.get(source.grade_id)
        if index is None:  # could not be put back (should not happen): zero, and say so
            rows.append(
                row(
                    job.student,
                    job.spec.notebook,
                    "missing",
                    "this test cell is missing",
                    source.grade_id,
                    0,
                    number(source.points),
                )
            )
            continue
        cell = nb.cells[index]
        auto, maximum = scores.get(source.grade_id, (0, source.points))
        error = explain.first_error(cell)
        if auto is None:
            status, points, message = "manual", 0, "needs grading by hand"
        elif index not in outcome.executed:
            status, points = "not run", 0
            message = (error.evalue if error is not None else "") or "not run"
            if index == outcome.stopped_cell:
                status = {"memory": "memory", "timeout": "timeout"}.get(outcome.stopped or "", "crashed")
        elif index in outcome.timed_out:
            status, points = "timeout", 0
            message = explain.error_words("CellTimeoutError", "", job.timeout)
        elif auto >= maximum:
            status, points, message = "passed", auto, ""
        else:
            points = auto
            status = (
                "timeout"
                if error is not None and error.ename == "CellTimeoutError"
                else ("partial" if auto > 0 else "failed")
            )
            message = explain.cell_error_words(cell, job.timeout) or "failed"
            trouble = _answer_trouble(nb, index, job.timeout)
            if trouble and error is not None and error.ename != "AssertionError":
                message += f" (answer {trouble})"
        if source.grade_id in per_cell:
            message = f"{message}; {per_cell[source.grade_id]}" if message else per_cell[source.grade_id]
        rows.append(
            row(job.student, job.spec.notebook, status, message, source.grade_id, number(points), number(maximum))
        )
    return rows


def _feedback(job: Job, rows: list[dict], notes: list[str], nb: NotebookNode | None = None) -> str:
    """A plain-text feedback sheet for one student and notebook."""
    graded = [r for r in rows if r["cell"]]
    got = sum(float(r["points"] or 0) for r in graded)
    total = sum(float(r["max_points"]) for r in graded)
    score = (
        f"{number(got)} / {number(total)} points"
        if all(r["points"] != "" for r in graded)
        else f"not graded yet (out of {number(total)} points): see the note below"
    )
    lines = [f"Feedback for {job.student} on {job.spec.notebook} (file: {job.file})", f"Score: {score}", ""]
    width = max([len(r["cell"]) for r in graded] + [4])
    for r in graded:
        line = f"  {r['cell']:<{width}}  {str(r['points']):>4} / {str(r['max_points']):<4} {r['status']}"
        lines.append(line + (f": {r['message']}" if r["message"] else ""))
    if nb is not None:
        troubles = []
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type == "code" and not meta.get("grade"):
                words = explain.cell_error_words(cell, job.timeout)
                if words and explain.first_error(cell) is not None and explain.first_error(cell).ename != "NotRun":
                    troubles.append(f"  {_label(nb, index)}: {words}")
        if troubles:
            lines += ["", "Errors in your cells (other than the checks):"] + troubles
    if notes:
        lines += ["", "Notes:"] + [f"  - {n}" for n in notes]
    lines += ["", "The checks used are the instructor's, including tests you did not see in your copy."]
    return "\n".join(lines) + "\n"
