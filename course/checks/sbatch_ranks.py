"""What each rank of a batch job gets beyond the `#SBATCH` header, by sbatch's and srun's rules: srun's own options
(`split_srun`), the CPUs srun gives each task by this machine's Slurm version (`srun_cpus`), and the per-task
variables a script reads in the batch step, which runs once, as the first node's task 0 (`per_rank_variables`).
"""

from __future__ import annotations

import re
from pathlib import Path

from course import slurm
from course.checks.sbatch_header import SHORT, WITH_VALUE, Header, long_name


def split_srun(words: list[str]) -> tuple[list[str], list[str]]:
    """`srun OPTIONS PROGRAM ARGS` as words: (srun's option words, the program's words), cut where the options end
    (the first word that is neither an option nor an option's value)."""
    i = 1
    while i < len(words) and words[i].startswith("-"):
        word = words[i]
        i += 1
        if word.startswith("--"):
            written, has_value, _ = word[2:].partition("=")
            i += 1 if long_name(written) in WITH_VALUE and not has_value else 0
        elif len(word) == 2 and SHORT.get(word[1]):  # -n 1 (a value in the next word), not -n1
            i += 1
    return words[1:i], words[i:]


INHERITS = (23, 11)  # srun reads SLURM_CPUS_PER_TASK again from 23.11 (SchedMD's release notes); 22.05-23.02 do not


def srun_cpus(h: Header, words: list[str], number: int, version: tuple[int, int] | None = None) -> list[str]:
    """srun in a batch job of Slurm 22.05-23.02 does not inherit --cpus-per-task: the launch line or the
    environment (SRUN_CPUS_PER_TASK, exported before it) must ask again. From 23.11 a bare srun inherits it, so
    where this machine's Slurm (`version`, default `slurm.version()`) is one of those, a bare srun is right."""
    cpus = h.get("cpus-per-task")
    if not cpus or cpus == "1":
        return []
    options, _ = split_srun(words)
    if any(
        long_name(w[2:].partition("=")[0]) == "cpus-per-task" if w.startswith("--") else w.startswith("-c")
        for w in options
    ):
        return []
    if any("SRUN_CPUS_PER_TASK=" in line for n, line in h.commands if n < number):
        return []
    version = version or slurm.version()
    if version is not None and version >= INHERITS:
        return []
    here = f" (this machine's is {version[0]}.{version[1]:02d})" if version else ""
    return [
        f"line {number}: srun in Slurm 22.05 to 23.02{here} does not inherit --cpus-per-task from the job, so each "
        f"rank would get 1 CPU, not {cpus} (23.11 and later do): give srun -c $SLURM_CPUS_PER_TASK, right on every "
        "version"
    ]


# Set by srun for each task of a step: in the batch step (which runs once, on the job's first node) they hold that
# one task's values, so an export there gives every rank the first node's first task's value.
PER_TASK = ("SLURM_LOCALID", "SLURM_PROCID", "SLURM_NODEID")


def per_rank_variables(h: Header) -> list[str]:
    """An export in the batch step that reads a per-task variable sets one value for every rank."""
    found = []
    for number, line in h.commands:
        words = line.split()
        if not words or words[0] not in ("export", "declare") and "=" not in words[0]:
            continue
        used = next((v for v in PER_TASK if v in line), None)
        if used:
            found.append(
                f"line {number} reads ${used} in the batch step, which runs once, on the job's first node, as task 0: "
                f"every rank would get that one value. Read it where each rank runs (a command srun starts per task), "
                "or let Slurm bind each rank's GPU (--gpus-per-task, --gpu-bind)"
            )
    return found


# Open MPI starts its daemon on each other node with `srun --ntasks-per-node=1`, and srun reads the job's GPU options
# from the environment sbatch set: per task or for the whole job, they do not fit that one-task step. Measured with
# Slurm 22.05 and Open MPI 4.1 (tests/test_sbatch_run.py runs each on the virtual cluster).
MPIEXEC_GPU_OPTIONS = {
    "gpus": "srun asks for the whole job's GPUs (SLURM_GPUS) on one node for it: Slurm refuses that step and the job "
    "fails",
    "gpus-per-task": "srun gives that one task one GPU (SLURM_GPUS_PER_TASK): every rank on the other nodes then "
    "computes on the same GPU",
    "ntasks-per-gpu": "srun refuses its --ntasks-per-node beside SLURM_NTASKS_PER_GPU (mutually exclusive) and the "
    "job fails",
}


def mpiexec_gpus(h: Header, words: list[str], number: int) -> list[str]:
    """mpiexec in a job that asks for GPUs per task or for the whole job: ask per node, or start with srun."""
    if Path(words[0]).name not in ("mpiexec", "mpirun"):
        return []
    return [
        f"line {number}: mpiexec starts its daemons on the other nodes with srun, and with --{name} {why}: with "
        "mpiexec ask for GPUs per node (--gres=gpu:N or --gpus-per-node=N), or start the ranks with srun"
        for name, why in MPIEXEC_GPU_OPTIONS.items()
        if h.get(name) is not None or (name == "gpus-per-task" and "gpu" in (h.get("tres-per-task") or ""))
    ]


# Per-node or per-job counts: as threads per rank they oversubscribe each node by its ranks per node.
NOT_PER_TASK = (
    "SLURM_CPUS_ON_NODE",
    "SLURM_JOB_CPUS_PER_NODE",
    "SLURM_NTASKS",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_NNODES",
)


def threads(h: Header, cpus_per_task: int) -> list[str]:
    """An OMP_NUM_THREADS set in the batch script to anything but each task's CPUs."""
    found = []
    for number, line in h.commands:
        for value in re.findall(r"\bOMP_NUM_THREADS=(\S+)", line):
            name = value.strip("\"'${}")
            if (value.isdigit() and int(value) != cpus_per_task) or name in NOT_PER_TASK:
                found.append(
                    f"line {number} gives each rank OMP_NUM_THREADS={value}, but each rank has {cpus_per_task} CPUs "
                    "(--cpus-per-task): one thread per CPU of its task, $SLURM_CPUS_PER_TASK"
                )
    return found
