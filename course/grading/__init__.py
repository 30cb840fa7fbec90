"""Grading on nbgrader's machinery: release student notebooks, validate one, autograde a class.

Modules: `release` (solutions/ -> notebooks/), `execute` (running a notebook under time, memory and
output limits), `explain` (errors in plain words), `validate` (a learner's check), `autograde` (one
submission against the instructor's tests), `grade` (a class folder, in parallel, incrementally; `on_slurm` as a
job array), `student_copy` (the course as a learner gets it: no solutions, no hidden tests, no answers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ASSIGNMENT = "ddl-hpc"  # the nbgrader assignment id of the course (see nbgrader_config.py)
CELL_TIMEOUT = 300  # seconds per cell: generous for the quick profile's training cells
# seconds a new kernel has to answer: beside other kernels training, one took more than nbclient's 60
KERNEL_START_TIMEOUT = 180
MEMORY_LIMIT = "4G"  # per kernel, counting the processes it starts (engines)
ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("student", "notebook", "cell", "points", "max_points", "status", "message")  # the columns of grades.csv


def solutions_dir(given: str | Path | None = None) -> Path:
    """The instructor notebooks: GIVEN, else ./solutions if there is one, else the checkout's."""
    if given is not None:
        return Path(given)
    here = Path("solutions")
    return here if here.is_dir() else ROOT / "solutions"


def notebooks_dir(given: str | Path | None = None) -> Path:
    """Where the student notebooks are generated: GIVEN, else next to the solutions folder."""
    if given is not None:
        return Path(given)
    return solutions_dir().parent / "notebooks"


def quiet_log():
    """A logger for nbgrader's preprocessors: their warnings become our plain-words reports instead."""
    import logging

    log = logging.getLogger("course.grading.nbgrader")
    log.propagate = False
    log.setLevel(logging.CRITICAL)
    return log


def parse_memory(text: str | int | float) -> int:
    """Bytes from '4G', '512M', '1.5G' or a plain number of gigabytes."""
    from course import UserError

    value = str(text).strip().upper().removesuffix("B")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    try:
        if value and value[-1] in scale:
            amount = float(value[:-1]) * scale[value[-1]]
        else:
            amount = float(value) * scale["G"]
    except ValueError:
        raise UserError(f"memory limit {text!r} is not a size; write it like 4G or 512M") from None
    if amount < 64 * 2**20:
        raise UserError(f"memory limit {text!r} is too small for a Python kernel; give at least 64M")
    return int(amount)


def size_words(n: int) -> str:
    """A byte count as people say it (1.5 GB, 300 MB)."""
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def row(
    student: str, notebook: str, status: str, message: str, cell: str = "", points: Any = 0, max_points: Any = 0
) -> dict:
    """One row of grades.csv (FIELDS): a graded cell's score, or a note about the whole notebook (cell "")."""
    return dict(zip(FIELDS, (student, notebook, cell, points, max_points, status, message)))


def number(x: float) -> float | int:
    """Points as people write them: 2, not 2.0; at most two decimals."""
    return int(x) if float(x).is_integer() else round(float(x), 2)
