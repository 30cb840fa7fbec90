"""The course on nbgrader's own layout: one assignment per notebook, plus the whole course as one.

    export COURSE_NBGRADER_ROOT=$HOME/ddl-hpc-grading     # optional: default build/nbgrader in the checkout
    python -m course nbgrader-setup                       # links source/<assignment>/ to solutions/, makes the gradebook
    nbgrader generate_assignment 02-sgd                   # then nbgrader's own commands (nbgrader_config.py)

Assignment ids are the notebook names with dashes (`02_sgd.ipynb` -> `02-sgd`); `ddl-hpc` holds every
notebook, for workshops that grade the course at once. nbgrader_config.py only reads settings (`configure`),
so loading it changes nothing on disk; `setup` is the one step that writes, under a folder the instructor
chooses, so a read-only checkout works.
"""

from __future__ import annotations

import os
from pathlib import Path

from course import UserError, settings
from course.grading import ASSIGNMENT, CELL_TIMEOUT, KERNEL_START_TIMEOUT, ROOT

ENV_ROOT = "COURSE_NBGRADER_ROOT"
ENV_EXCHANGE = "COURSE_NBGRADER_EXCHANGE"
FEEDBACK = [
    "nbgrader.preprocessors.GetGrades",
    "course.grading.feedback.HideHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]


def course_root(checkout: Path = ROOT) -> Path:
    """nbgrader's course directory: $COURSE_NBGRADER_ROOT, else build/nbgrader in the checkout."""
    return Path(settings.get(ENV_ROOT) or checkout / "build" / "nbgrader").expanduser().resolve()


def assignment_id(notebook: str) -> str:
    """The nbgrader assignment of one notebook: its name with dashes (02_sgd -> 02-sgd)."""
    return Path(notebook).stem.replace("_", "-")


def assignments(solutions: Path) -> dict[str, list[Path]]:
    """Assignment id -> its instructor notebooks: one per notebook, and ASSIGNMENT with all of them."""
    from course.grading.release import course_notebooks

    notebooks = course_notebooks(solutions)
    return {**{assignment_id(p.name): [p] for p in notebooks}, ASSIGNMENT: notebooks}


def configure(c, checkout: Path) -> None:
    """Fill nbgrader's config object `c` for the course (what nbgrader_config.py calls; reads only)."""
    from nbgrader.converters import Autograde  # nbgrader is loading this

    from course.grading.names import NameStudent
    from course.grading.stubs import PYTHON_STUB, generate_assignment_preprocessors

    root = course_root(checkout)
    c.CourseDirectory.course_id = ASSIGNMENT
    c.CourseDirectory.root = str(root)
    c.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    # `nbgrader export` writes grades.csv beside the gradebook, not into the folder it runs from (a read-only checkout).
    c.CsvExportPlugin.to = str(root / "grades.csv")
    if os.environ.get(ENV_EXCHANGE):
        c.Exchange.root = os.environ[ENV_EXCHANGE]
    c.ExchangeFactory.submit = "course.grading.exchange.Submit"  # too large a folder: one line (exchange.py)
    # nbgrader's default of 30 s per cell is too short for the training cells; the course's own grader uses the same.
    c.Execute.timeout = CELL_TIMEOUT
    c.Execute.interrupt_on_timeout = True
    c.Execute.startup_timeout = KERNEL_START_TIMEOUT
    # Every notebook nbgrader runs gets a cluster id of its own, and its engines end with its kernel (even after an
    # error, a time limit or a crash), so no submission attaches to another's engines (course/grading/isolation.py).
    c.Execute.kernel_manager_class = "course.grading.isolation.IsolatedKernelManager"
    c.ClearSolutions.code_stub = {"python": PYTHON_STUB}
    # generate_assignment stubs a batch script's solution with a comment, as `course release` does (course/grading/stubs.py).
    c.GenerateAssignment.preprocessors = generate_assignment_preprocessors()
    # Autograde names a student nbgrader added without a name, from their account (course/grading/names.py).
    c.Autograde.sanitize_preprocessors = [NameStudent, *Autograde.class_traits()["sanitize_preprocessors"].default()]
    # Feedback shows a learner their graded notebook without the hidden tests (course/grading/feedback.py).
    c.GenerateFeedback.preprocessors = FEEDBACK


def setup(root: Path | None = None, solutions: Path | None = None) -> list[str]:
    """Link ROOT/source/<assignment>/<notebook>.ipynb to solutions/ and make a working gradebook; returns notes."""
    solutions = Path(solutions).resolve() if solutions is not None else ROOT / "solutions"
    root = Path(root).resolve() if root is not None else course_root(solutions.parent)
    notes = []
    for assignment, notebooks in assignments(solutions).items():
        folder = root / "source" / assignment
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot create {folder} ({exc.strerror}); choose a folder you can write to with {ENV_ROOT}=DIR"
            ) from None
        for source in notebooks:
            link = folder / source.name
            if link.is_symlink() and link.resolve() == source.resolve():
                continue
            if link.exists() and not link.is_symlink():
                notes.append(f"{link} is a file, not a link to {source}: kept as it is (delete it to link solutions/)")
                continue
            link.unlink(missing_ok=True)
            link.symlink_to(source)
    notes += _gradebook(root / "gradebook.db")
    return notes


def _gradebook(path: Path) -> list[str]:
    """Create the gradebook with its schema version, or repair one a failed first run left without it."""
    import sqlite3

    from nbgrader.api import Gradebook

    from course.grading.autograde import _alembic_in_process
    import nbgrader.api as api

    _alembic_in_process()  # nbgrader would ask the `alembic` command, which is not on PATH outside the environment
    if path.exists():
        with sqlite3.connect(path) as db:
            tables = {row[0] for row in db.execute("select name from sqlite_master where type = 'table'")}
            if tables and "alembic_version" not in tables:
                db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
                db.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (api.get_alembic_version(),))
                return [f"repaired {path}: a failed first run had left it without its schema version"]
    with Gradebook(f"sqlite:///{path}", ASSIGNMENT):
        pass
    return []
