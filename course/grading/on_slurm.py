"""`course grade SUBMISSIONS --out DIR --slurm`: grade a class as one Slurm job array, a share per array task.

The command plans as local grading does (the same plan and the same cache of what was graded), puts what the
tasks need in DIR/.grading-slurm/ (the submissions to grade, read once, and the instructor notebooks' gradebooks),
submits one array and follows it. Each task grades every N-th submission on its node with the same isolation and
limits as local grading, saving each result as it comes. The results found are merged into the same grades.csv,
totals.csv and feedback; a submission whose task failed, was cancelled or hit its time limit gets "not graded"
rows (no points) and no cache entry, so the next run grades only those. DIR must be on a filesystem the compute
nodes share; the submissions need not be.

    python -m course grade SUBMISSIONS --out DIR --slurm --tasks 4 --time 02:00:00 [--partition P] [--no-wait]
    python -m course grade --collect DIR        # after --no-wait: follow the array to its end, write the grades
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from course import UserError, slurm
from course.grading.grade import Grading, check_options, finish, prepare, run_jobs
from course.grading.out_folder import SLURM_JOB, refuse_pending, slurm_run, writing

JOB_NAME = "course-grade"
LOCAL_ONLY = ("/tmp", "/var/tmp", "/dev/shm")  # node-local on clusters: compute nodes would not see them
POLL = 1.0  # seconds between looks at the array while following it
START_UP = 60  # seconds an array task needs before its first cell: Python, nbgrader, a kernel


@dataclass
class Run:
    """What the array works on: the planned grading, and the job doing it."""

    grading: Grading
    tasks: int
    cpus_per_task: int
    job_id: int = 0


def _load(folder: Path) -> Run:
    with open(folder / "run.pickle", "rb") as f:
        return pickle.load(f)


def _save(path: Path, value: object) -> None:
    """Write atomically: a task killed mid-write leaves no half result."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(value, f)
    tmp.replace(path)


def check_request(out: Path, tasks: int | None, time_limit: str, timeout: float, partition: str | None) -> None:
    """Refuse, in one line and before anything is planned, what the array could not do."""
    local = next((p for p in LOCAL_ONLY if out == Path(p) or Path(p) in out.parents), None)
    if local:
        raise UserError(
            f"--out {out} is under {local}, a node's own disk: compute nodes cannot see it; choose a folder on "
            f"the cluster's shared filesystem (e.g. in your home)"
        )
    if tasks is not None and (isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1):
        raise UserError(f"--tasks must be a whole number >= 1, not {tasks!r}")
    seconds = slurm.time_limit_seconds(time_limit)
    if seconds is None:
        raise UserError(f"--time {time_limit!r} is not a Slurm time limit: use {slurm.TIME_FORMS}")
    if seconds < timeout + START_UP:
        raise UserError(
            f"--time {time_limit} is shorter than one notebook cell may take (--timeout {timeout:g} s, plus "
            f"{START_UP} s to start): ask for at least {slurm_time(timeout + START_UP)}"
        )
    down = slurm.controller_down()
    if down or not slurm.available():
        raise UserError(
            f"no Slurm answers here ({down or 'sinfo lists no partition'}): grade without --slurm, or run this on "
            f"the cluster's login node"
        )
    slurm.check_fits(nodes=1, tasks_per_node=1, partition=partition)  # an unknown partition is named here


def slurm_time(seconds: float) -> str:
    """Seconds as sbatch's HH:MM:SS, rounded up to the minute."""
    minutes = -(-int(seconds) // 60)
    return f"{minutes // 60:02d}:{minutes % 60:02d}:00"


def submit(
    submissions: Path,
    out: Path,
    solutions: Path | None = None,
    timeout: float | None = None,
    memory: str | int | None = None,
    regrade: bool = False,
    tasks: int | None = None,
    time_limit: str = "01:00:00",
    partition: str | None = None,
    wait: bool = True,
    progress: bool = True,
) -> str:
    """Plan the grading, submit the array; follow it to the end and write the grades (or return at once)."""
    from course.grading import CELL_TIMEOUT

    out = Path(out).resolve()
    check_request(out, tasks, time_limit, CELL_TIMEOUT if timeout is None else timeout, partition)
    part = next((p for p in slurm.partitions() if p.name == partition or partition is None), None)
    cpus = part.cpus_per_node if part else 1  # each task takes a whole node's CPUs, one grader per CPU
    options = check_options(submissions, out, solutions, timeout, cpus, memory)
    with writing(out):
        refuse_pending(out)
        folder = slurm_run(out)
        shutil.rmtree(folder, ignore_errors=True)  # a run never submitted (the job was refused)
        (folder / "results").mkdir(parents=True)
        (folder / "gradebooks").mkdir()
        g = prepare(options, folder / "gradebooks", regrade)
        if not g.todo:
            shutil.rmtree(folder)
            return finish(g, {}, where="Slurm (nothing to grade)")
        count = min(tasks or (part.nodes if part else 1), len(g.todo))
        run = Run(g, count, cpus)
        _save(folder / "run.pickle", run)
        script = folder / "grade.sbatch"
        script.write_text(_script(folder, run, time_limit, partition))
        try:
            run.job_id = slurm.submit(str(script))
        except UserError:
            shutil.rmtree(folder)
            raise
        _save(folder / "run.pickle", run)
        (folder / SLURM_JOB).write_text(str(run.job_id))  # from now on, collect before grading into OUT again
    said = f"submitted Slurm job {run.job_id}: {len(g.todo)} submission(s) in {count} array task(s)"
    if not wait:
        return f"{said}; `course grade --collect {out}` writes the grades once it has ended"
    print(said, file=sys.stderr)
    return collect(out, progress)


def _script(folder: Path, run: Run, time_limit: str, partition: str | None) -> str:
    """The array's batch script: each task grades its share with the Python that submitted it."""
    options = slurm.Options(
        job_name=JOB_NAME,
        output=f"{folder}/task-%a.out",
        error=f"{folder}/task-%a.err",
        chdir=str(folder),
        ntasks=1,
        cpus_per_task=run.cpus_per_task,
        time=time_limit,
        partition=partition,
        array=f"0-{run.tasks - 1}",
    )
    return "\n".join(
        [
            "#!/bin/bash",
            f"# Grading {len(run.grading.todo)} submission(s) into {run.grading.out}: array task i grades every "
            f"{run.tasks}-th from the i-th",
            *slurm.sbatch_lines(options),
            "",
            f"exec {sys.executable} -m course.grading.on_slurm {folder} ${{SLURM_ARRAY_TASK_ID}}",
            "",
        ]
    )


def collect(out: Path, progress: bool = True) -> str:
    """Follow the array until every task has ended, then write the grades; the run folder is removed after."""
    from tqdm import tqdm

    out = Path(out).resolve()
    folder = slurm_run(out)
    try:
        run = _load(folder)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError):
        raise UserError(f"no Slurm grading to collect in {out}: start one with `course grade ... --slurm`") from None
    with writing(out):
        total = len(run.grading.todo)
        bar = tqdm(total=total, unit="notebook", desc=f"job {run.job_id}", disable=not progress or None, leave=False)
        job = slurm.job(run.job_id)
        found = _results(folder)
        # Every result in means every grade is written: no need to wait for Slurm to see the tasks end (seconds
        # while they stop their workers and the job completes); a task that ended early leaves results missing.
        while job is not None and not job.ended and len(found) < total:
            bar.update(len(found) - bar.n)
            time.sleep(POLL)
            job = slurm.job(run.job_id)
            found = _results(folder)
        bar.close()
        fresh = {n: found[n] if n in found else _not_graded(run, n, job) for n in range(total)}
        summary = finish(run.grading, fresh, where=f"Slurm job {run.job_id} ({run.tasks} array task(s))")
        logs = out / "slurm-logs" / str(run.job_id)
        logs.mkdir(parents=True, exist_ok=True)
        for log in folder.glob("task-*"):
            shutil.move(str(log), logs / log.name)
        shutil.rmtree(folder)
    return summary


def _results(folder: Path) -> dict:
    found = {}
    for path in (folder / "results").glob("*.pickle"):
        try:
            with open(path, "rb") as f:
                found[int(path.stem)] = pickle.load(f)
        except (OSError, EOFError, ValueError, pickle.UnpicklingError):
            pass
    return found


def _not_graded(run: Run, n: int, job: slurm.Job | None):
    """The rows of a submission no task graded: not a score, and graded again by the next run."""
    from course.grading.autograde import _machinery

    task = n % run.tasks
    state = slurm.array_task_state(job, task) if job is not None else "UNKNOWN"
    why = f"its Slurm array task {run.job_id}_{task} ended {state} before grading it"
    return _machinery(run.grading.plan.jobs[run.grading.todo[n]], why)


def grade_share(folder: Path, task: int) -> int:
    """In array task `task`: grade every tasks-th submission from the task-th, each result saved as it comes."""
    run = _load(folder)
    mine = [n for n in range(len(run.grading.todo)) if n % run.tasks == task]
    jobs = [run.grading.plan.jobs[run.grading.todo[n]] for n in mine]
    cpus = int(os.environ.get("SLURM_CPUS_PER_TASK") or run.cpus_per_task)
    began = time.monotonic()
    print(
        f"array task {task}: {len(jobs)} submission(s) on {os.uname().nodename} with {cpus} CPU(s), "
        f"from {time.strftime('%H:%M:%S')}",
        flush=True,
    )

    def save(i: int, result) -> None:
        _save(folder / "results" / f"{mine[i]}.pickle", result)
        print(f"{time.monotonic() - began:7.1f} s  graded {jobs[i].file}", flush=True)

    run_jobs(jobs, workers=cpus, progress=False, cores=cpus, on_result=save)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m course.grading.on_slurm RUN_FOLDER TASK_INDEX", file=sys.stderr)
        sys.exit(2)
    sys.exit(grade_share(Path(sys.argv[1]), int(sys.argv[2])))
