"""Grading on nbgrader's machinery: release student notebooks, validate one, autograde a class.

Modules: `release` (solutions/ -> notebooks/), `execute` (running a notebook under time, memory and
output limits), `explain` (errors in plain words), `validate` (a learner's check), `autograde` (one
submission against the instructor's tests), `grade` (a class folder, in parallel, incrementally).
"""

from __future__ import annotations

from pathlib import Path

ASSIGNMENT = "ddl-hpc"          # the nbgrader assignment id of the course (see nbgrader_config.py)
CELL_TIMEOUT = 300              # seconds per cell: generous for the quick profile's training cells
MEMORY_LIMIT = "4G"             # per kernel, counting the processes it starts (engines)
ROOT = Path(__file__).resolve().parents[2]


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
