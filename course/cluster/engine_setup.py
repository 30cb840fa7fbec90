"""Setting engines up: what each engine reports (run on it), the device plan, and the plan applied on the engine."""

from __future__ import annotations

from course import devices
from course.cluster.errors import ClusterError


def plan_devices(engines: list[dict], threads: int = 1) -> dict[int, dict[str, str]]:
    """`course.devices.plan_devices` for a cluster's engines, its refusals as ClusterError (what start() raises)."""
    try:
        return devices.plan_devices(engines, threads)
    except devices.DeviceError as exc:
        raise ClusterError(str(exc)) from None


def engine_facts(launcher_ranks: bool = True) -> dict:
    """Runs on an engine: where it runs and what it may use. `launcher_ranks`: the engine was started by a launcher
    (mpiexec, srun) whose local rank it should report; a local engine only inherited whatever its parent had (a
    JupyterLab running as a Slurm job has SLURM_LOCALID=0, which every engine it starts would otherwise claim)."""
    import os
    import socket

    import psutil

    from course.devices import visible_gpus

    env = os.environ
    local_rank = next(
        (
            int(env[v])
            for v in ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
            if launcher_ranks and env.get(v, "").isdigit()
        ),
        None,
    )
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "create_time": psutil.Process().create_time(),
        "local_rank": local_rank,
        "gpus": visible_gpus(),
    }


def engine_configure(env: dict) -> str:
    """Runs on an engine: apply its device plan before TensorFlow starts (and to TensorFlow if already imported)."""
    import os
    import sys

    from course import devices

    os.environ.update(env)
    if "tensorflow" in sys.modules and "TF_NUM_INTRAOP_THREADS" in env:
        devices.set_tensorflow_threads(int(env["TF_NUM_INTRAOP_THREADS"]), int(env["TF_NUM_INTEROP_THREADS"]))
    return env.get("COURSE_DEVICE", "")
