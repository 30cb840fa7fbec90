"""Devices of one process: which GPUs it may use, how many CPU threads it runs, and TensorFlow pinned to them.

Asked in many places (engines, Horovod ranks, MirroredStrategy, task workers, grading kernels); answered here once.
One process per GPU with memory growth, or a few CPU threads per process so that N processes on N cores do not
oversubscribe them: the pinning of the University of Queensland workshop's Horovod script.
"""

from __future__ import annotations

import os
from pathlib import Path

from course import UserError, settings

NVIDIA_DRIVER_GPUS = "/proc/driver/nvidia/gpus"
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")


class DeviceError(UserError):
    """A device plan asks for more than a machine has (more processes than GPUs, fewer than one thread)."""


def visible_gpus(environ: dict[str, str] | None = None, proc: str = NVIDIA_DRIVER_GPUS) -> list[str]:
    """GPU indices a process may use: CUDA_VISIBLE_DEVICES when a scheduler set it, else all the driver lists."""
    environ = os.environ if environ is None else environ
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None and given.strip() not in ("", "-1", "NoDevFiles"):
        return [g.strip() for g in given.split(",") if g.strip() and g.strip() != "-1"]
    if given is not None:
        return []
    path = Path(proc)
    return [str(i) for i in range(len(list(path.iterdir())))] if path.is_dir() else []


def cores() -> int:
    """The CPU cores this process may run on (its affinity where the system has one): what TensorFlow sizes its
    thread pools by, so how many ops, or `tf.data` map calls, can run at once."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def thread_env(threads: int) -> dict[str, str]:
    """Environment that limits TensorFlow, oneDNN/OpenMP and BLAS in one process to `threads` threads."""
    return {**{name: str(threads) for name in THREAD_VARIABLES}, "TF_NUM_INTEROP_THREADS": "1"}


def default_threads(environ: dict[str, str], threads: int) -> dict[str, str]:
    """`environ` with `threads` threads per process where it does not already say how many (a site's choice wins)."""
    for name, value in thread_env(threads).items():
        environ.setdefault(name, value)
    return environ


def limit_threads(threads: int) -> None:
    """This process: `threads` threads where the environment does not already say how many (for libraries loaded
    from now on), and for the BLAS and OpenMP pools already loaded (threadpoolctl, where installed)."""
    default_threads(os.environ, threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(threads)


def grow_gpu_memory() -> None:
    """Memory growth on every GPU TensorFlow sees, else each process reserves all the memory of all of them."""
    import tensorflow as tf

    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError:
            pass  # TensorFlow already initialised this GPU: its set-up stays


def set_tensorflow_threads(intra: int, inter: int = 1) -> None:
    """TensorFlow's thread pools, if it has not started them yet (else the limit applies to new processes only)."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
    except RuntimeError:
        pass


def pin_tensorflow(local_rank: int, threads: int = 1) -> None:
    """One device per process: the GPU at `local_rank` (with memory growth), or `threads` CPU threads."""
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        set_tensorflow_threads(threads)
        return
    grow_gpu_memory()
    try:
        tf.config.set_visible_devices(gpus[local_rank % len(gpus)], "GPU")
    except RuntimeError:
        pass  # TensorFlow already started in this process (an engine that trained before): keep its set-up


def configure_tensorflow() -> str:
    """Call in an engine after importing TensorFlow: memory growth on its GPU; returns the device it uses."""
    grow_gpu_memory()
    return settings.get("COURSE_DEVICE")


def local_ranks(engines: list[dict]) -> dict[int, int]:
    """Local rank of each engine id: the launcher's (MPI/Slurm) where known, else its place among its host's engines."""
    ranks: dict[int, int] = {}
    by_host: dict[str, list[dict]] = {}
    for engine in engines:
        by_host.setdefault(engine["host"], []).append(engine)
    for host_engines in by_host.values():
        for position, engine in enumerate(sorted(host_engines, key=lambda e: e["id"])):
            given = engine.get("local_rank")
            ranks[engine["id"]] = position if given is None else int(given)
    return ranks


def plan_devices(engines: list[dict], threads: int = 1) -> dict[int, dict[str, str]]:
    """The environment each engine needs, from what it reported: {"id", "host", "gpus": [...], "local_rank"}.

    With GPUs on its host, an engine sees exactly the GPU at its local rank and TensorFlow grows GPU memory
    as needed; without GPUs it uses `threads` intra-op threads. More engines on a host than it has GPUs is an error.
    """
    if threads < 1:
        raise DeviceError(f"threads must be at least 1, not {threads}")
    ranks = local_ranks(engines)
    per_host: dict[str, int] = {}
    for engine in engines:
        per_host[engine["host"]] = per_host.get(engine["host"], 0) + 1
    return {
        engine["id"]: _engine_env(engine, ranks[engine["id"]], per_host[engine["host"]], threads) for engine in engines
    }


def _engine_env(engine: dict, rank: int, on_host: int, threads: int) -> dict[str, str]:
    """One engine's device environment: the GPU at its local rank, else `threads` CPU threads."""
    gpus, host = list(engine.get("gpus") or []), engine["host"]
    env = {"COURSE_LOCAL_RANK": str(rank)}
    if not gpus:
        return {**env, **thread_env(threads), "COURSE_DEVICE": f"CPU ({threads} thread{'s' if threads > 1 else ''})"}
    if on_host > len(gpus) or rank >= len(gpus):
        raise DeviceError(
            f"more engines than GPUs: {on_host} engine(s) on {host}, which has {len(gpus)} GPU(s) "
            f"({', '.join(gpus)}); start at most {len(gpus)} engine(s) per node (one per GPU)"
        )
    return {
        **env,
        "CUDA_VISIBLE_DEVICES": gpus[rank],
        "TF_FORCE_GPU_ALLOW_GROWTH": "true",
        "COURSE_DEVICE": f"GPU {gpus[rank]}",
    }
