"""A batch script run for real where a Slurm partition has the exercise's shape (nodes, cores, GPUs per node): its
program is replaced by a probe (course/programs/rank_probe.py), and what each rank got is read from the ranks
themselves: the node it ran on, its rank, the GPU it computes on, its threads.

    part = sbatch_run.site_partition(want)              # None where no partition here can hold the exercise's job
    ranks, failed = sbatch_run.run(text, want, part, folder)
    sbatch_run.problems(ranks, want)                    # [] or one sentence per way the job differs from the exercise
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from course import mpi, slurm
from course.checks.sbatch_header import read

if TYPE_CHECKING:
    from course.checks.sbatch_script import Exercise

PROBE = Path(__file__).resolve().parents[1] / "programs" / "rank_probe.py"
# The launcher's own rank first: under mpiexec, SLURM_PROCID is that of the daemon that started the rank.
RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "HOROVOD_RANK", "SLURM_PROCID")


@dataclass
class Rank:
    """What one process of the job got: its node, its rank, the GPUs it sees and its OpenMP threads."""

    host: str
    rank: int | None
    visible: list[str]
    threads: str | None

    @classmethod
    def read(cls, record: dict) -> Rank:
        env = record["env"]
        rank = next((env[v] for v in RANK_VARIABLES if env.get(v, "").isdigit()), None)
        # unset where srun binds no GPU (--gpu-bind=none): the rank then sees its job's GPUs on its node
        seen = env.get("CUDA_VISIBLE_DEVICES", env.get("SLURM_JOB_GPUS", ""))
        visible = [d for d in seen.split(",") if d.strip()]
        return cls(record["host"], int(rank) if rank is not None else None, visible, env.get("OMP_NUM_THREADS"))


def site_partition(want: Exercise) -> slurm.Partition | None:
    """The first partition here whose nodes can hold the exercise's job as written (None where none can)."""
    cores = want.cores_per_node or want.gpus_per_node * want.cpus_per_task
    for part in slurm.partitions():
        if part.nodes >= want.nodes and part.gpus_per_node >= want.gpus_per_node and part.cpus_per_node >= cores:
            return part
    return None


def probe_script(text: str, want: Exercise) -> str | None:
    """The script with the program of its launch command (python -m want.module ...) replaced by the probe, run by
    this Python; None when no command runs want.module."""
    h = read(text)
    found = next(((n, line) for n, line in h.commands if want.module in line), None)
    if found is None:
        return None
    start, command = found
    lines = text.splitlines()
    end = start
    while end < len(lines) and lines[end - 1].rstrip().endswith("\\"):
        end += 1
    program = re.compile(r"\S+\s+-m\s+" + re.escape(want.module) + r"\b.*$")
    probe = f"{shlex.quote(sys.executable)} {shlex.quote(str(PROBE))}"
    lines[start - 1 : end] = [program.sub(lambda _: probe, command)]
    # a GPU type is the site's own name: any type does here
    header = [_UNTYPED.sub(r"\1", line) if line.startswith("#SBATCH") else line for line in lines[: start - 1]]
    return "\n".join(header + lines[start - 1 :]) + "\n"


_LOG = re.compile(r"^\d{4}-\d\d-\d\d [\d:.]+: [IW] ")  # TensorFlow's start-up lines, not errors
_UNTYPED = re.compile(r"(gpu:|--gpus(?:-per-node|-per-task)?[= ]|-G ?)[A-Za-z][\w.-]*:(?=\d)")


def run(
    text: str, want: Exercise, part: slurm.Partition, folder: str | Path, timeout: float = 120
) -> tuple[list[Rank], str | None]:
    """Submit the probed script to `part` and wait for it: (one Rank per process, Slurm's words where it failed).

    It runs in a new folder under `folder` (shared with the nodes, as a course's work folder is), removed after;
    the job's files go there, not where its #SBATCH lines say. TimeoutError where it did not end in `timeout`."""
    probed = probe_script(text, want)
    if probed is None:
        return [], f"no command runs python -m {want.module}"
    where = Path(tempfile.mkdtemp(prefix=".probe-", dir=folder))
    try:
        (where / "job.sbatch").write_text(probed)
        # the job's environment: this Python's folder first on PATH (its launchers), as in an activated environment
        path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
        env = {**os.environ, "PATH": path, "COURSE_PROBE_DIR": str(where)}
        env.update(mpi.ROOT_SETTINGS if os.geteuid() == 0 else {})
        args = [slurm.tool("sbatch"), f"--partition={part.name}", "--job-name=course-probe"]
        args += [f"--output={where}/job.out", f"--error={where}/job.err", f"--chdir={where}", "job.sbatch"]
        # a job no node can run would wait in the queue for ever: ask first
        tested = _sbatch([args[0], "--test-only", *args[1:]], env, where)
        if tested.returncode != 0:
            return [], f"Slurm refuses it ({_first_error(tested.stderr)})"
        done = _sbatch([args[0], "--parsable", *args[1:]], env, where)
        if done.returncode != 0:
            return [], f"Slurm refuses it ({_first_error(done.stderr)})"
        job = _wait(int(done.stdout.strip().split(";")[0]), timeout, part)
        ranks = [Rank.read(json.loads(p.read_text())) for p in sorted(where.glob("*.json"))]
        return ranks, None if job.state == "COMPLETED" else _failure(where, job)
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _sbatch(args: list[str], env: dict[str, str], where: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=where, timeout=60)
    except subprocess.TimeoutExpired:
        raise TimeoutError("sbatch got no answer from Slurm within 60 s") from None


def _wait(job_id: int, timeout: float, part: slurm.Partition) -> slurm.Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = slurm.job(job_id)
        if job is None or job.ended:
            return job or slurm.Job(job_id, "UNKNOWN")
        time.sleep(0.2)
    slurm.cancel_quietly(job_id)
    raise TimeoutError(f"the job did not end within {timeout:g} s on partition {part.name}")


def _failure(where: Path, job: slurm.Job) -> str:
    err = (where / "job.err").read_text(errors="replace") if (where / "job.err").exists() else ""
    return f"the job failed, {job.state} with exit code {job.exit_code} ({_first_error(err)})"


def _first_error(said: str) -> str:
    lines = [line.strip() for line in said.splitlines() if line.strip(" -") and not _LOG.search(line)]
    errors = [line for line in lines if re.search(r"error|fatal|failed|failure|refus|not enough", line, re.I)]
    return (errors or lines or ["no message"])[0]


def _listed(ranks: list[int | None]) -> str:
    shown = sorted(r for r in ranks if r is not None)
    return ", ".join(map(str, shown)) if len(shown) <= 4 else f"{shown[0]}, {shown[1]}, ..., {shown[-1]}"


def gpus(ranks: list[Rank]) -> list[tuple[Rank, str | None]]:
    """Each rank with the GPU it computes on: visible[local rank % how many it sees], as Horovod programs pin
    (course.devices.pin_tensorflow); the local rank is the rank's place among its node's ranks."""
    found = []
    for host in sorted({r.host for r in ranks}):
        here = sorted((r for r in ranks if r.host == host), key=lambda r: (r.rank is None, r.rank))
        found += [(r, r.visible[local % len(r.visible)] if r.visible else None) for local, r in enumerate(here)]
    return found


def problems(ranks: list[Rank], want: Exercise) -> list[str]:
    """How the ranks the job started differ from the exercise: their count, nodes, numbers, GPUs and threads."""
    found = []
    per_node = Counter(r.host for r in ranks)
    if len(ranks) != want.ranks:
        found.append(f"the job started {len(ranks)} process(es); the exercise needs {want.ranks}, one per GPU")
    if len(per_node) != want.nodes or set(per_node.values()) != {want.gpus_per_node}:
        spread = ", ".join(f"{n} on {host}" for host, n in sorted(per_node.items()))
        found.append(
            f"the ranks ran {spread or 'nowhere'}: the exercise needs {want.gpus_per_node} on each of {want.nodes} nodes"
        )
    numbers = [r.rank for r in ranks]
    if sorted(n for n in numbers if n is not None) != list(range(len(ranks))):
        found.append(
            f"the processes' rank numbers are {_listed(numbers)}, not 0 to {len(ranks) - 1}: they are not one job "
            "of that many ranks"
        )
    on = gpus(ranks)
    blind = [r.rank for r, gpu in on if gpu is None]
    if blind:
        found.append(f"rank(s) {_listed(blind)} see no GPU (CUDA_VISIBLE_DEVICES empty): they would train on CPUs")
    for host in sorted({r.host for r, _ in on}):
        used = Counter(gpu for r, gpu in on if r.host == host and gpu is not None)
        if any(n > 1 for n in used.values()):
            gpu = next(g for g, n in used.items() if n > 1)
            who = [r for r, g in on if (r.host, g) == (host, gpu)]
            found.append(
                f"on {host}, {sum(used.values())} ranks compute on {len(used)} GPU(s): ranks "
                f"{_listed([r.rank for r in who])} all on GPU {gpu} (the first sees CUDA_VISIBLE_DEVICES="
                f"{','.join(who[0].visible)}); each rank of a node should have its own GPU"
            )
    threads = {r.threads for r in ranks if r.threads is not None}
    if threads - {str(want.cpus_per_task)}:
        found.append(
            f"the ranks run OMP_NUM_THREADS={','.join(sorted(threads))} thread(s) each, but each has "
            f"{want.cpus_per_task} CPUs: one thread per CPU of its task"
        )
    return found


def summary(ranks: list[Rank], part: slurm.Partition) -> str:
    """One line on where the ranks ran, for a job that ran as asked."""
    nodes = sorted({r.host for r in ranks})
    return (
        f"it ran as asked on Slurm's partition {part.name} ({part.nodes} nodes of {part.cpus_per_node} cores and "
        f"{part.gpus_per_node} GPUs; the program replaced by a probe): {len(ranks)} ranks, "
        f"{len(ranks) // max(1, len(nodes))} on each of {', '.join(nodes)}, each on its own GPU"
    )
