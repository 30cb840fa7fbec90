"""The kinds of engines: local processes, the ranks of one mpiexec, the tasks of one Slurm job.

One small class per system, as ipyparallel's cluster/launcher.py has one launcher class per system: what differs
between the kinds, including how their engines start (options, environment), how a failed start shows, and how they
stop. KIND is the table that start(), the records and the command line choose from; the name is also the
ipyparallel launcher's.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from course import UserError, mpi, processes, slurm
from course.cluster.errors import ClusterError, ended, engine_tail, tail
from course.cluster.records import PREFIX, profile_dir
from course.devices import thread_env, visible_gpus

SLURM_HINT = (
    "install Slurm's client commands (Debian/Ubuntu: apt-get install slurm-wlm munge; on a cluster: "
    "module load slurm), or use engines='local' or 'mpi'"
)
# The options of a Slurm engine job, as `start` and `slurm_script` take them (and `cluster start` passes them on)
SLURM_OPTIONS = tuple(
    "partition time_limit account gpus_per_node tasks_per_node qos constraint exclusive sbatch".split()
)


@dataclass
class Settings:
    """What a cluster was started with (kept in its record, so that another process can re-attach)."""

    kind: str
    n: int
    threads: int = 1
    timeout: float = 120.0
    controller_ip: str = "127.0.0.1"
    slurm: dict = field(default_factory=dict)


class LocalEngines:
    """Engines as processes on this machine, one per GPU or a few CPU threads each."""

    name = "local"
    default_timeout = 120.0  # seconds for all engines to connect
    controller_ip = "127.0.0.1"  # engines on this machine reach the controller on localhost
    controller_here = True  # the controller is a process of this host, which status() can check
    batch_options = False  # takes a batch system's options (partition, time limit, ...)
    launcher_ranks = False  # engines get their local rank from a launcher (mpiexec, srun), not their host position

    def check_tools(self) -> None:
        """Raise ClusterError naming what to install when engines of this kind cannot start here."""

    def host_gpus(self) -> list[str]:
        """The GPUs of this machine the engines would use (one engine each)."""
        return visible_gpus()

    def check_request(self, n: int, slurm_options: dict) -> None:
        """Refuse `n` engines this kind cannot run, before anything starts."""
        gpus = self.host_gpus()
        if gpus and n > len(gpus):
            raise ClusterError(
                f"more engines than GPUs: asked for {n} engines, this machine has {len(gpus)} GPU(s) "
                f"({', '.join(gpus)}); start at most {len(gpus)} (one per GPU)"
            )

    def engine_options(self, cluster_id: str, settings: Settings) -> dict[str, Any]:
        """Keyword arguments for ipyparallel's start_engines (the launcher's own settings)."""
        return {}

    def environment(self, settings: Settings) -> dict[str, str]:
        """The engines' environment: thread limits without GPUs (OpenMP and BLAS read them once, at start)."""
        return {} if self.host_gpus() else thread_env(settings.threads)

    def launch_problem(self, engine_set) -> str:
        """Why engines of this launcher cannot come any more, or '' while they still may."""
        for name, launcher in list(engine_set.launchers.items()):
            if not processes.running(launcher.process):
                how = ended(exit_code(launcher))
                return f"engine process {name} {how}; its last output: {engine_tail(launcher.get_output())}"
        # an engine whose end ipyparallel has already noticed is no longer among the launchers: its status and
        # output are kept on the engine set
        for name, stopped in dict(engine_set.stop_data.get("engines", {})).items():
            code = stopped.get("exit_code")
            how = ended(None if code is None else int(code))
            return f"engine process {name} {how}; its last output: {engine_tail(engine_set.outputs.get(name, ''))}"
        return ""

    def launchers(self, engine_set) -> list:
        """The launchers whose processes run on this host (stopped with the cluster)."""
        return list(engine_set.launchers.values())

    def launcher_pid(self, engine_set) -> int:
        """The one process that started all engines (recorded for stop --all), or -1."""
        return -1

    def job(self, engine_set) -> str:
        """The batch job the engines run in, or ''."""
        return ""

    def end_now(self, engines: list[dict]) -> bool:
        """End the engines of this host (and their nannies) at once, without a clean shutdown, as their work is done;
        False where this kind's engines end only with their launcher (mpiexec, the Slurm job)."""
        here = socket.gethostname()
        for engine in engines:
            if engine.get("host") != here:
                continue
            try:
                process = psutil.Process(engine["pid"])
                if engine.get("create_time") and abs(process.create_time() - engine["create_time"]) > 1:
                    continue  # the pid now belongs to another process
            except psutil.Error:
                continue
            processes.kill(processes.tree(process), timeout=0)
        return True

    def wait_ended(self, job: str, timeout: float = 60) -> None:
        """Wait until the batch job the engines ran in has ended (nothing to wait for without one)."""


class MpiEngines(LocalEngines):
    """Engines as the ranks of one mpiexec: engine id = MPI rank."""

    name = "mpi"
    launcher_ranks = True

    def check_tools(self) -> None:
        mpi.mpiexec()  # UserError naming what to install
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            raise ClusterError("mpi4py is not installed: pip install mpi4py (MPI engines need it)") from None

    def engine_options(self, cluster_id: str, settings: Settings) -> dict[str, Any]:
        command = mpi.command(settings.n)  # [mpiexec, -n, N, *flags]: the course's MPI flags, in one place
        return dict(mpi_cmd=[command[0]], mpi_args=command[3:])

    def environment(self, settings: Settings) -> dict[str, str]:
        changed = {k: v for k, v in mpi.env().items() if os.environ.get(k) != v}
        return {**changed, **super().environment(settings)}

    def launch_problem(self, engine_set) -> str:
        if processes.running(engine_set.process):
            return ""
        return f"mpiexec {ended(exit_code(engine_set))}: {tail(engine_set.get_output())}"

    def launchers(self, engine_set) -> list:
        return [engine_set]

    def launcher_pid(self, engine_set) -> int:
        return getattr(engine_set, "pid", -1)

    def end_now(self, engines: list[dict]) -> bool:
        return False  # mpiexec ends its ranks when the cluster stops


class SlurmEngines(LocalEngines):
    """Engines as the tasks of one Slurm job, maybe on other nodes."""

    name = "slurm"
    default_timeout = 300.0  # the job may wait in the queue
    controller_ip = "*"  # all interfaces: engines on other nodes connect to this host's name (controller_location)
    controller_here = False
    batch_options = True
    launcher_ranks = True

    def check_tools(self) -> None:
        missing = [tool for tool in ("sbatch", "squeue", "scancel") if shutil.which(tool) is None]
        if missing:
            raise ClusterError(f"Slurm not found ({', '.join(missing)} missing): {SLURM_HINT}")

    def host_gpus(self) -> list[str]:
        return []  # the job's nodes have their own

    def check_request(self, n: int, slurm_options: dict) -> None:
        per_node = slurm_options.get("tasks_per_node")
        nodes = -(-n // per_node) if per_node else 1
        try:
            slurm.check_fits(
                nodes,
                per_node or 1,
                gpus_per_node=slurm_options.get("gpus_per_node") or 0,
                partition=slurm_options.get("partition"),
                ntasks=n,
            )
        except UserError as refused:
            raise ClusterError(str(refused)) from None

    def engine_options(self, cluster_id: str, settings: Settings) -> dict[str, Any]:
        script = slurm_script(cluster_id, settings.n, srun_mpi=slurm.srun_mpi_plugin(), **settings.slurm)
        # an absolute name keeps the script out of the notebook's folder (ipyparallel joins it to work_dir)
        return dict(
            batch_template=script,
            batch_file_name=str(profile_dir() / "log" / f"slurm-engines-{cluster_id}.sbatch"),
        )

    def environment(self, settings: Settings) -> dict[str, str]:
        return {} if settings.slurm.get("gpus_per_node") else thread_env(settings.threads)

    def launch_problem(self, engine_set) -> str:
        state, _ = slurm.job_state(engine_set.job_id)
        if state is None or state in slurm.ENDED:
            output = tail(_read(engine_set.output_file))
            return f"Slurm job {engine_set.job_id} {'ended' if state is None else state}" + (
                f": {output}" if output else ""
            )
        return ""

    def launchers(self, engine_set) -> list:
        return [engine_set]

    def job(self, engine_set) -> str:
        return getattr(engine_set, "job_id", "") or ""

    def end_now(self, engines: list[dict]) -> bool:
        return False  # the Slurm job ends its tasks when the cluster stops

    def wait_ended(self, job: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while job and time.monotonic() < deadline:
            state, _ = slurm.job_state(job)
            # ended, or no controller to ask (its job_state is UNKNOWN until it answers again)
            if state is None or state in slurm.ENDED or slurm.controller_down():
                return
            time.sleep(0.3)


KIND = {kind.name: kind for kind in (LocalEngines(), MpiEngines(), SlurmEngines())}
KINDS = tuple(KIND)


def default_engines(kind: str = "local") -> int:
    """Engines to start when none are asked for: one per GPU on a GPU machine, else the cores (at least 2)."""
    gpus = KIND[kind].host_gpus()
    return len(gpus) if gpus else max(2, os.cpu_count() or 2)


def slurm_script(cluster_id: str, n: int, *, srun_mpi: str | None = None, **options: Any) -> str:
    """The batch template for ipyparallel's SlurmEngineSetLauncher ({program_and_args}, {output_file} are its own).

    options: those of SLURM_OPTIONS (see `start`); None leaves one out.
    srun_mpi: srun's --mpi plugin, so that mpi4py/Horovod in the engines see one MPI world (e.g. "pmix").
    """
    unknown = sorted(set(options) - set(SLURM_OPTIONS))
    if unknown:
        raise TypeError(f"slurm_script() got unexpected keyword arguments: {', '.join(unknown)}")
    renamed = ("time_limit", "exclusive", "sbatch")  # sbatch's --time, a flag, and extra #SBATCH lines
    header = slurm.Options(
        export_all=True,
        job_name=f"ipengine-{cluster_id}",
        ntasks=n,
        output="{output_file}",
        time=options.get("time_limit"),
        exclusive=bool(options.get("exclusive")),
        extra=list(options.get("sbatch") or []),
        **{name: value for name, value in options.items() if name not in renamed},
    )
    lines = ["#!/bin/sh", *slurm.sbatch_lines(header)]
    lines.append(f"srun{' --mpi=' + srun_mpi if srun_mpi else ''} {{program_and_args}}")
    return "\n".join(lines) + "\n"


def course_slurm_jobs() -> list[str]:
    """This user's Slurm jobs whose name marks them as course engines (ipengine-course-...)."""
    return slurm.my_jobs(name_prefix=f"ipengine-{PREFIX}")


def exit_code(launcher) -> int | None:
    """The exit status of the process an ipyparallel 9 LocalProcessLauncher started (negative: the signal that
    ended it), or None if it cannot be known. The launcher's own thread (`_wait_thread`) reaps the process with
    psutil, which then keeps the status on the Process object; asking before that thread is done would race it
    for the one status the system hands out, so it is waited for (a few ms: the process has already ended)."""
    process, thread = getattr(launcher, "process", None), getattr(launcher, "_wait_thread", None)
    if process is None:
        return None
    if thread is not None:
        thread.join(timeout=5)
        if thread.is_alive():
            return None
    try:
        return process.wait(timeout=0)
    except (psutil.TimeoutExpired, psutil.Error):
        return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""
