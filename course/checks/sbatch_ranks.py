"""What each rank of a batch job gets beyond the `#SBATCH` header, by sbatch's and srun's rules: srun's own options
(`split_srun`), the CPUs srun gives each task by this machine's Slurm version (`srun_cpus`), and the per-task
variables a script reads in the batch step, which runs once, as the first node's task 0 (`per_rank_variables`).
"""

from __future__ import annotations

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
