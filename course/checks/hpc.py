"""Notebook 11's checks of a job request written with course.jobs (part one, 11_job_scripts): the `#SBATCH
--name=value` lines of the script it gives, each against what the exercise asks; the per-node counts against digests
(course.checks.quiz), so that the check says which is not right yet without showing the number. And the learner's
reader of a job's `.err` file (part two, 11_running_on_a_cluster), on the notebook's own job and a named table of what
Slurm writes there (TIME_LIMIT_CASES). The batch script written by hand and the srun command have their own checks
(course.checks.sbatch_script).

    two_node_request(jobs.script(request), WORK)     # None, or what is wrong
    time_limit_kill(killed_by_time_limit, timeout_err)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from course import jobs
from course.checks import check, expect, quiz

# Digests of the two per-node counts of exercise ex1 (course.checks.quiz): right or not, without showing them
PER_NODE = {
    "gres": "d0df53301068d278a175fe001c3e71d33485a572423d1ad72d9146f11d85bfd5",
    "ntasks-per-node": "c54aed52956a12bcfa82276da02af1009c5afb7db3c567e659bd07d0a614e133",
}


def sbatch_options(text: str) -> dict[str, str]:
    """The `#SBATCH --name=value` lines of a script, as {name: value} (the forms course.jobs writes)."""
    return dict(
        line[len("#SBATCH --") :].split("=", 1)
        for line in text.splitlines()
        if line.startswith("#SBATCH --") and "=" in line
    )


@check
def two_node_request(text: str, work: str | Path) -> None:
    """Exercise `ex1`: the UQ workshop's Horovod job on two nodes of 4 GPUs: nodes, the per-node GPUs and tasks,
    CPUs per task, one hour, partition LMA, job name SGD-Train, output files in `work`."""
    sbatch = sbatch_options(text)
    expect(sbatch.get("nodes") == "2", "the job should ask for two nodes (--nodes)")
    expect(
        quiz.is_right("gres", sbatch.get("gres", ""), PER_NODE),
        "--gres is not right yet: it counts the GPUs of ONE node, not of the whole job",
    )
    expect(
        quiz.is_right("ntasks-per-node", sbatch.get("ntasks-per-node", ""), PER_NODE),
        "--ntasks-per-node is not right yet: it counts the tasks of ONE node - how many Horovod processes do its "
        "GPUs need?",
    )
    expect(sbatch.get("cpus-per-task") == "7", "the job should ask for 7 CPUs per task (--cpus-per-task)")
    expect(jobs.parse_time(sbatch.get("time", "00:00:01")) == 3600, "the time limit should be one hour (--time)")
    expect(sbatch.get("partition") == "LMA", "the partition should be LMA")
    expect(sbatch.get("job-name") == "SGD-Train", "the job name should be SGD-Train (--job-name)")
    expect(sbatch.get("output", "").startswith(f"{work}/"), "the output files should be written in WORK (--output)")


@dataclass(frozen=True)
class ErrCase:
    """A job's `.err` text, whether Slurm killed that job at its time limit, and a name the message cites."""

    name: str
    text: str
    time_limit: bool


# What slurmstepd and srun write to a job's .err (Slurm's src/slurmd/slurmstepd/req.c: "*** JOB|STEP <id> ON <node>
# CANCELLED AT <time> [DUE TO TIME LIMIT|PREEMPTION|NODE FAILURE, ...|JOB REQUEUE] ***"; scancel adds no reason).
_LIMIT = "slurmstepd: error: *** {} ON n3 CANCELLED AT 2026-02-03T04:05:06 DUE TO {} ***\n"
_SRUN = (
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\nsrun: error: n3: task 0: Terminated\n"
)
_TRACE = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\nKeyboardInterrupt\n'
TIME_LIMIT_CASES = (
    ErrCase(
        "the time-limit line in the middle of the file (the program's traceback before it, srun's lines after)",
        _TRACE + _LIMIT.format("JOB 812", "TIME LIMIT") + _SRUN,
        True,
    ),
    ErrCase(
        "a job step's time-limit line, then srun's lines, then the job's",
        _LIMIT.format("STEP 812.0", "TIME LIMIT") + _SRUN + _LIMIT.format("JOB 812", "TIME LIMIT"),
        True,
    ),
    ErrCase(
        "the line as srun prints it, after a timestamp",
        "[2026-02-03T04:05:06.789] error: *** JOB 812 ON n3 CANCELLED AT 2026-02-03T04:05:06 DUE TO TIME LIMIT ***\n",
        True,
    ),
    ErrCase("a job preempted by a higher-priority one", _SRUN + _LIMIT.format("JOB 812", "PREEMPTION"), False),
    ErrCase("a job requeued", _LIMIT.format("JOB 812", "JOB REQUEUE"), False),
    ErrCase(
        "a job whose node failed",
        _LIMIT.format("JOB 812", "NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS") + _SRUN,
        False,
    ),
    ErrCase(
        "the program's own error about a time limit (no Slurm message)",
        "TimeoutError: the data server gave no answer within its time limit (30 s)\n",
        False,
    ),
    ErrCase("warnings only: a job that went well", "UserWarning: the GPU is not found, running on the CPU\n", False),
)


@check
def time_limit_kill(killed_by_time_limit: Callable[[str], bool], timeout_err: str) -> None:
    """Exercise `ex4`: `killed_by_time_limit(err_text)` is True for the notebook's own job killed at its time limit
    and False for scancel, a Python error and an empty file; then every case of TIME_LIMIT_CASES (the line in the
    middle, a step's line, srun's timestamp, the other reasons Slurm cancels a job, the program's own words)."""
    expect(killed_by_time_limit(timeout_err) is True, "the job above was killed at its time limit")
    expect(
        killed_by_time_limit("Traceback (most recent call last):\nValueError: bad input\n") is False,
        "a Python error is not a time limit",
    )
    cancelled = "slurmstepd: error: *** JOB 77 ON vm CANCELLED AT 2026-01-01T10:00:00 ***\n"
    expect(
        killed_by_time_limit(cancelled) is False,
        "a job ended by scancel also reads CANCELLED, without DUE TO TIME LIMIT: that is not a time limit",
    )
    expect(killed_by_time_limit("") is False, "an empty .err file (a job that went well) is not a time limit")
    for case in TIME_LIMIT_CASES:
        got = killed_by_time_limit(case.text)
        expect(
            got is case.time_limit,
            f"{case.name}: killed_by_time_limit gives {got!r} for this .err, it should give {case.time_limit}:\n"
            + case.text,
        )
