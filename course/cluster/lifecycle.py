"""Starting, re-attaching to and stopping clusters: `start`, `attach`, `current`, `ensure`, `stop`, `stop_all`.

A cluster has a stable id per notebook (or COURSE_CLUSTER_ID), so a restarted notebook re-attaches to its running
cluster instead of starting a second one. This process's own cluster is `current()`.
"""

from __future__ import annotations

import atexit
import socket

import psutil

from course import settings as course_settings
from course import slurm
from course.cluster import from_files, records, warden
from course.cluster.errors import ClusterError, ControllerBroken
from course.cluster.handle import Cluster
from course.cluster.kinds import KIND, KINDS, SLURM_OPTIONS, Settings, course_slurm_jobs, default_engines
from course.cluster.records import profile_dir

_current: Cluster | None = None  # the cluster this process started or re-attached (see current())


def _check_n(n: int | None, kind: str = "local") -> int:
    if n is None:
        return default_engines(kind)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ClusterError(f"the number of engines must be a positive whole number, not {n!r}")
    return n


def _in_kernel() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def start(
    n: int | None = None,
    engines: str = "local",
    *,
    cluster_id: str | None = None,
    threads: int = 1,
    timeout: float | None = None,
    controller_ip: str | None = None,
    persist: bool | None = None,
    partition: str | None = None,
    time_limit: str | None = None,
    account: str | None = None,
    gpus_per_node: int | None = None,
    tasks_per_node: int | None = None,
    qos: str | None = None,
    constraint: str | None = None,
    exclusive: bool | None = None,
    sbatch: list[str] | None = None,
    quiet: bool = False,
) -> Cluster:
    """Start (or re-attach to) a cluster of `n` engines and return its handle.

    n: default one engine per GPU on a GPU machine, otherwise the cores (at least 2).

    engines: "local" (processes on this machine), "mpi" (one `mpiexec`: engine id = MPI rank) or "slurm"
    (one Slurm job; options partition, time_limit, account, gpus_per_node, tasks_per_node and a site's qos,
    constraint, exclusive and any other `#SBATCH` lines in sbatch; a request no node could run is refused).
    threads: intra-op threads per engine on machines without GPUs (default 1: N engines on N cores).
    controller_ip: where the controller listens; default 127.0.0.1 for local/MPI and all interfaces ("*",
    reached through this host's name) for Slurm, whose engines may run on other nodes.
    persist: keep running when this process exits (default: yes inside Jupyter, so a restarted notebook
    re-attaches, until the Jupyter server or grader that ran the kernel ends; no in scripts). Either way the
    cluster's warden (warden.py) ends it once nobody can use it. cluster_id: default one per notebook.
    """
    global _current
    batch = (partition, time_limit, account, gpus_per_node, tasks_per_node, qos, constraint, exclusive or None, sbatch)
    settings = _checked_settings(n, engines, threads, timeout, controller_ip, dict(zip(SLURM_OPTIONS, batch)))
    cid = records.normalise_id(cluster_id) if cluster_id else records.default_cluster_id()
    guard = _kernel_runner() if persist is None and _in_kernel() else None
    persist = _in_kernel() if persist is None else bool(persist)
    existing = _running(cid, settings)
    if existing is not None:
        if not quiet:
            print(
                f"Re-attached to running cluster {cid}: {existing.status().alive} of {existing.n} "
                f"{existing.kind} engines."
            )
        _current = existing
        return existing

    cluster = _launch_new(cid, settings, persist, guard)
    if not persist:
        atexit.register(cluster.stop)
    _current = cluster
    if not quiet:
        print(
            f"Started cluster {cid}: {settings.n} {settings.kind} engine(s), ids {cluster.ids}; "
            f"devices: {', '.join(sorted({e['device'] for e in cluster.engines}))}."
        )
    return cluster


def _checked_settings(
    n: int | None, engines: str, threads: int, timeout: float | None, controller_ip: str | None, batch: dict
) -> Settings:
    """What `start` was asked for, checked (kind, engine count, threads, the batch options' kind and values) before
    anything starts: a wrong argument is one ClusterError line."""
    kind = str(engines).strip().lower()
    if kind not in KINDS:
        raise ClusterError(f"unknown engines {engines!r}; use one of: {', '.join(KINDS)}")
    n = _check_n(n, kind)
    if threads is None or isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ClusterError(f"threads must be a positive whole number, not {threads!r}")
    engines_kind = KIND[kind]
    if batch.get("sbatch"):
        batch["sbatch"] = [slurm.check_extra(line) for line in batch["sbatch"]]
    batch = {k: v for k, v in batch.items() if v is not None}
    if batch and not engines_kind.batch_options:
        raise ClusterError(f"{', '.join(batch)} only apply to engines='slurm'")
    engines_kind.check_tools()
    engines_kind.check_request(n, batch)
    gpus, tasks = batch.get("gpus_per_node"), batch.get("tasks_per_node")
    if gpus and tasks and tasks > gpus:
        raise ClusterError(
            f"more engines than GPUs: tasks_per_node={tasks} but gpus_per_node={gpus}; use one engine per GPU"
        )
    timeout = engines_kind.default_timeout if timeout is None else float(timeout)
    return Settings(kind, n, threads, timeout, controller_ip or engines_kind.controller_ip, batch)


def _running(cid: str, settings: Settings) -> "Cluster | None":
    """The running cluster `cid` (this process's own, or one to re-attach to), or None; refused if it runs another
    kind or number of engines than asked for."""
    if _current is not None and not _current.stopped and _current.cluster_id == cid:
        existing = _current
    else:
        existing = from_files.attach(cid)
    if existing is None:
        return None
    if (existing.kind, existing.n) != (settings.kind, settings.n):
        raise ClusterError(
            f"cluster {cid} is already running with {existing.n} {existing.kind} engine(s); stop it "
            f"first (cluster.stop() or python -m course cluster stop --id {cid}) or pass another cluster_id"
        )
    if existing is not _current:
        existing._join()
    return existing


def _kernel_runner() -> list | None:
    """The process that runs this kernel (a Jupyter server, a grader) as a record holds it: the kernel's cluster
    lives no longer than it."""
    try:
        parent = psutil.Process().parent()
        return None if parent is None else [parent.pid, parent.create_time()]
    except psutil.Error:
        return None


# A controller that lost a port is replaced (new ports) twice: the ports a replacement picks can be lost too, to
# another cluster starting or to a connection made beside it (ipyparallel frees them before its processes bind them).
CONTROLLER_ATTEMPTS = 3


def _launch_new(
    cid: str, settings: Settings, persist: bool, guard: list | None, attempts: int = CONTROLLER_ATTEMPTS
) -> "Cluster":
    """A new cluster with its engines up and its warden watching; a controller that came up broken is replaced."""
    for attempt in range(1, attempts + 1):
        cluster = Cluster(_new_ipp_cluster(cid, settings), settings, persist)
        try:
            cluster._save_record("starting")  # before any process starts: others see it starting, and who starts it
            records.update_record(cid, guard=guard)
            warden.start(cid)
            cluster._launch()
            return cluster
        except BaseException as exc:
            cluster.stop()
            if not isinstance(exc, ControllerBroken):
                raise
            if attempt == attempts:
                raise ControllerBroken(f"{exc} (it ended the same way {attempts} times; start it again)") from exc
    raise ValueError(f"attempts must be at least 1, not {attempts}")


# The controller completes an engine's registration at its next heartbeat: beating every second instead of
# ipyparallel's 3 s makes a cluster ready in about 3 s instead of 7 (benchmarks/cluster_start.py). 30 missed beats
# in a row, as before 30 s, still mark an engine dead, so a busy machine is not taken for a dead engine sooner.
HEARTBEAT = ["--HeartMonitor.period=1000", "--HeartMonitor.max_heartmonitor_misses=30"]


def _new_ipp_cluster(cluster_id: str, settings: Settings):
    import ipyparallel as ipp

    # engines on other nodes reach the controller at this host's name, or where COURSE_CONTROLLER_HOST says
    # (e.g. the bridge address of scripts/virtual-cluster.sh, where the host's name resolves to 127.0.0.1)
    host = course_settings.get("COURSE_CONTROLLER_HOST") or socket.gethostname()
    location = {"controller_location": host} if settings.controller_ip in ("*", "0.0.0.0") else {}
    return ipp.Cluster(
        engines=settings.kind,
        n=settings.n,
        cluster_id=cluster_id,
        profile_dir=str(profile_dir()),
        controller_ip=settings.controller_ip,
        shutdown_atexit=False,
        log_level=40,
        engine_timeout=int(settings.timeout),
        delay=0,  # start_engines already waits for the controller's connection info: no fixed pause needed
        controller_args=HEARTBEAT,
        **location,
    )


def attach(cluster_id: str | None = None) -> Cluster:
    """Re-attach to a running cluster (default: this notebook's), e.g. after a kernel restart."""
    global _current
    cid = records.normalise_id(cluster_id) if cluster_id else records.default_cluster_id()
    cluster = from_files.attach(cid)
    if cluster is None:
        raise ClusterError(
            f"no running cluster {cid}; start one with course.cluster.start() "
            f"(running: {', '.join(records.running_ids()) or 'none'})"
        )
    cluster._join()
    _current = cluster
    return cluster


def current() -> Cluster | None:
    """The cluster this process started or re-attached, if not stopped."""
    return _current if _current is not None and not _current.stopped else None


def ensure(n: int | None = None) -> Cluster:
    """`current()`, or a new local cluster of `n` engines (saying so)."""
    cluster = current()
    if cluster is not None:
        return cluster
    print(f"No cluster running in this session: starting {_check_n(n)} local engines.")
    return start(n)


def stop(cluster_id: str | None = None) -> bool:
    """Stop cluster `cluster_id` (default: this process's, else this notebook's); False if none was running."""
    global _current
    if cluster_id is None and current() is not None:
        current().stop()
        return True
    cid = records.normalise_id(cluster_id) if cluster_id else records.default_cluster_id()
    if _current is not None and _current.cluster_id == cid and not _current.stopped:
        _current.stop()
        return True
    return from_files.stop_from_files(cid)


def stop_all(force: bool = False) -> tuple[list[str], list[str]]:
    """End the course clusters of this user: engines, controllers, mpiexec and Slurm jobs. A cluster whose
    owner (or a process that re-attached to it) still runs is spared unless `force`. Returns (ended, spared),
    the spared ones with the processes that hold them."""
    global _current
    ended, spared, spared_jobs = [], [], set()
    if current() is not None:
        ended.append(current().cluster_id)
        current().stop()
    for cid in records.running_ids():
        record = records.read_record(cid) or {}
        holders = records.holders(record)
        if holders and not force:
            spared.append(f"{cid} (in use by process {records.pids(holders)})")
            spared_jobs.add(str(record.get("slurm_job") or ""))
            continue
        if from_files.stop_from_files(cid):
            ended.append(cid)
    for job in course_slurm_jobs():
        if job not in spared_jobs:
            slurm.cancel_quietly(job)
            ended.append(f"Slurm job {job}")
    _current = None
    return ended, spared
