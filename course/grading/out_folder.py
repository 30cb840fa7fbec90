"""The folder a grading writes (`--out`): one `course grade` at a time, and a Slurm grading there that is not
collected yet, which must be collected before anything else grades into the folder."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator

from course import UserError

LOCK = ".grading.lock"  # held while a `course grade` writes the folder
SLURM_RUN = ".grading-slurm"  # what a Slurm array works on, until it is collected
SLURM_JOB = "job"  # in SLURM_RUN: the array's job id, once submitted


@contextlib.contextmanager
def writing(out: Path) -> Iterator[None]:
    """Hold OUT for one grading: a second `course grade` into the same folder is refused, not interleaved."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK, "a+") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                f"another `course grade` is writing {out} right now: wait for it to end, or choose another --out"
            ) from None
        yield


def slurm_run(out: Path) -> Path:
    """Where a Slurm grading into OUT keeps what its array works on."""
    return Path(out).resolve() / SLURM_RUN


def pending(out: Path) -> int | None:
    """The job id of a Slurm grading into OUT that is not collected yet, else None."""
    try:
        return int((slurm_run(out) / SLURM_JOB).read_text())
    except (OSError, ValueError):
        return None


def refuse_pending(out: Path) -> None:
    """A Slurm grading into OUT that was submitted with --no-wait and not collected must be collected first."""
    job = pending(out)
    if job:
        raise UserError(
            f"a Slurm grading into {out} (job {job}) is not collected yet: run `course grade --collect {out}` first"
        )
