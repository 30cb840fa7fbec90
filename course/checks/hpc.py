"""Notebook 11's check of a job request written with course.jobs: the `#SBATCH --name=value` lines of the script
it gives, each against what the exercise asks; the per-node counts against digests (course.checks.quiz), so that
the check says which is not right yet without showing the number. The batch script written by hand and the srun
command have their own checks (course.checks.sbatch_script).

    two_node_request(jobs.script(request), WORK)     # None, or what is wrong
"""

from __future__ import annotations

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
