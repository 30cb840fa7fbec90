"""Engine clusters for the notebooks: local, MPI and Slurm engines behind one small API, on ipyparallel's launchers.

    cluster = course.cluster.start(2)                  # local engines (default), %px works afterwards
    cluster = course.cluster.start(4, engines="mpi")   # engine id = MPI rank; mpi4py/Horovod see one world
    cluster = course.cluster.start(8, engines="slurm", partition="gpu", gpus_per_node=4, tasks_per_node=4)
    cluster.view.apply_sync(f); cluster.status(); cluster.stop()

The controller is the master, the engines are the workers. Each engine is pinned to one GPU by its local
rank (with TensorFlow memory growth on); on a machine without GPUs each engine is limited to `threads`
intra-op threads (default 1) so that N engines do not oversubscribe N cores. A cluster has a stable id per
notebook (or COURSE_CLUSTER_ID), so a restarted notebook re-attaches to its running cluster instead of
starting a second one; `stop_all()` (`python -m course cluster stop --all`) ends every course cluster of
this user whose owner process has ended (a notebook that died), and spares those still in use unless forced.

Clusters live beside each other: looking at one (`inspect`, `cluster status`) never stops it, and its files
are removed only once every process it recorded (starter, users, controller, engines) has ended. A cluster
stopped from outside makes the next call on it fail at once with `ClusterDown`, never hang.

The package, one concern a module: errors (the errors and their wording), kinds (local, MPI and Slurm engines, each
owning how it starts and stops), records (record files and their lock), client (the ipyparallel Client overrides,
pinned to the ipyparallel they were written for), engine_setup (what runs on an engine to report and pin its
device), status, handle (the `Cluster` handle), from_files (re-attach, inspect, clean up), warden (the process
that ends a cluster nobody can use any more), lifecycle (start, attach, stop, stop_all). This module re-exports the
public API; patch a name where it is defined (e.g. `course.cluster.lifecycle._new_ipp_cluster`), not here.
"""

from __future__ import annotations

from course.cluster.engine_setup import plan_devices
from course.cluster.errors import ClusterDown, ClusterError, ControllerBroken, EngineLost, explain_engine_error
from course.cluster.from_files import inspect
from course.cluster.handle import ALIVE_FOR, FIRST_CALL_TIMEOUT, Cluster
from course.cluster.kinds import (
    KIND,
    KINDS,
    SLURM_HINT,
    SLURM_OPTIONS,
    LocalEngines,
    MpiEngines,
    SlurmEngines,
    default_engines,
    slurm_script,
)
from course.cluster.lifecycle import HEARTBEAT, attach, current, ensure, start, stop, stop_all
from course.cluster.records import PREFIX, default_cluster_id, normalise_id, profile_dir, running_ids
from course.cluster.status import EngineState, Status
from course.devices import configure_tensorflow, local_ranks, thread_env, visible_gpus

__all__ = [
    "ALIVE_FOR",
    "Cluster",
    "ClusterDown",
    "ClusterError",
    "ControllerBroken",
    "EngineLost",
    "EngineState",
    "FIRST_CALL_TIMEOUT",
    "HEARTBEAT",
    "KIND",
    "KINDS",
    "LocalEngines",
    "MpiEngines",
    "PREFIX",
    "SLURM_HINT",
    "SLURM_OPTIONS",
    "SlurmEngines",
    "Status",
    "attach",
    "configure_tensorflow",
    "current",
    "default_cluster_id",
    "default_engines",
    "ensure",
    "explain_engine_error",
    "inspect",
    "local_ranks",
    "normalise_id",
    "plan_devices",
    "profile_dir",
    "running_ids",
    "slurm_script",
    "start",
    "stop",
    "stop_all",
    "thread_env",
    "visible_gpus",
]
