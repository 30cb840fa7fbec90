"""MPI ranks kept up between `course.comm.on_ranks` calls of one process that asks for it (`rank_pool.KEEP = True`:
a process that runs many checks one after another, such as an instructor's batch of checks).

Starting `mpiexec` and importing NumPy and mpi4py on every rank takes about a second; a check that tries a
learner's collective on a dozen cases pays it a dozen times.
Here the ranks of one job size stay up: each call is a job file in the pool's private folder; every rank runs it
on a new duplicate of MPI.COMM_WORLD (so that a message a wrong answer left unreceived never reaches a later
job), writes `started` when it begins and its result when it ends, as a fresh `mpiexec` job's ranks do. A job
that hangs, or fails on a rank (which aborts the job, as before), ends the pool: the next call starts another.
Elsewhere (a learner's kernel, a notebook being graded) every call is a fresh job, and no rank
stays up holding memory that a learner's session would not hold.

    python -c "...; from course.rank_pool import serve; serve(FOLDER)"   # what each rank runs
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KEEP = False  # set by the process that wants its ranks kept; not inherited by the processes it starts
MAX_JOBS = 300  # jobs per pool: each leaves a duplicated communicator behind it, so a pool is renewed now and then
POLL = 0.005  # seconds between a waiting rank's looks for the next job, right after the last one ...
IDLE_POLL = 0.25  # ... growing to this while no job comes: a dozen idle pools then cost ~1% of a core, not half

_RANK_PROGRAM = "import sys; sys.path.insert(0, sys.argv[1]); from course.rank_pool import serve; serve(*sys.argv[2:])"


def wanted() -> bool:
    """Whether on_ranks keeps its ranks up between calls in this process."""
    return KEEP


class Pool:
    """`mpiexec -n RANKS` ranks waiting for jobs in a private folder, started in the caller's folder and
    environment (a call from elsewhere, or with another environment, gets a pool of its own)."""

    def __init__(self, ranks: int, env: dict[str, str]):
        from course import mpi, processes

        self.ranks, self.env, self.cwd, self.jobs = ranks, env, os.getcwd(), 0
        self.folder = Path(tempfile.mkdtemp(prefix="course-rank-pool-"))  # mode 0700: this user's only
        self.segments = mpi.segments_folder()  # the ranks' shared memory, removed with the pool
        root = str(Path(__file__).resolve().parent.parent)
        program = [sys.executable, "-c", _RANK_PROGRAM, root, str(self.folder)]
        with open(self.folder / "output", "w") as output:
            self.process = subprocess.Popen(
                mpi.command(ranks, *program),
                stdout=output,
                stderr=subprocess.STDOUT,
                env=mpi.with_segments(processes.as_caller(dict(env)), self.segments),
                start_new_session=True,
            )

    def fits(self, ranks: int, env: dict[str, str]) -> bool:
        return (
            self.process.poll() is None
            and self.jobs < MAX_JOBS
            and (self.ranks, self.env, self.cwd) == (ranks, env, os.getcwd())
        )

    def submit(self, payload: bytes) -> Path:
        """Hand the ranks a job (a pickled (function, args)); its files are named from the path returned."""
        self.jobs += 1
        job = self.folder / f"job-{self.jobs}"
        staged = job.with_suffix(".staged")
        staged.write_bytes(payload)
        staged.rename(job.with_suffix(".pkl"))  # whole, or not there yet: a rank never reads half a job
        return job

    def output(self) -> str:
        return (self.folder / "output").read_text(errors="replace")

    def close(self) -> None:
        from course import processes

        if self.process.poll() is None:
            processes.kill_group(self.process.pid)
        self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)
        shutil.rmtree(self.segments, ignore_errors=True)


_POOLS: dict[int, Pool] = {}


def pool(ranks: int, env: dict[str, str]) -> Pool:
    """The pool of `ranks` ranks for this folder and environment, started if there is none (or it ended). One pool
    per rank count: the checks go from one count to another and back."""
    current = _POOLS.get(ranks)
    if current is not None and current.fits(ranks, env):
        return current
    if current is not None:
        current.close()
    _POOLS[ranks] = Pool(ranks, env)
    return _POOLS[ranks]


def discard(ranks: int) -> None:
    """End the pool of `ranks` ranks (after a job that hung or failed on a rank)."""
    current = _POOLS.pop(ranks, None)
    if current is not None:
        current.close()


@atexit.register
def close_all() -> None:
    for ranks in list(_POOLS):
        discard(ranks)


def serve(folder: str) -> None:
    """One rank of a pool: run each job as it comes, until the folder goes or the process that started it ends."""
    from mpi4py import MPI

    from course.processes import exit_with_caller

    exit_with_caller()  # also in the middle of a job: a rank stuck in a collective ends with its caller
    world, place, number = MPI.COMM_WORLD, Path(folder), 1
    rank = world.Get_rank()
    while True:
        job, idle = place / f"job-{number}.pkl", 0.0
        while not job.exists():
            if not place.exists():
                return
            pause = min(IDLE_POLL, POLL + idle / 20)
            time.sleep(pause)
            idle += pause
        MPI.COMM_WORLD = world.Dup()  # a communicator of the job's own: what earlier jobs left unreceived stays behind
        out = place / f"job-{number}.{rank}"
        try:
            function, args = pickle.loads(job.read_bytes())
            Path(f"{out}.started").touch()
            result = ("ok", function(*args))
        except BaseException as exc:
            result = ("error", f"{type(exc).__name__}: {exc}")
        staged = Path(f"{out}.staged")
        staged.write_bytes(pickle.dumps(result))
        staged.rename(out)
        if result[0] == "error":
            world.Abort(1)  # the other ranks may wait for this one in a collective: end the job, as a fresh one ends
        number += 1
