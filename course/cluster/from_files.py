"""A cluster seen from its files, by any process: re-attach to it, look at it (read only), or end what is left of it.

Never stops a cluster in use: only one whose every recorded process has ended, or one asked to stop.
"""

from __future__ import annotations

import socket
from pathlib import Path

import psutil

from course import processes, slurm
from course.cluster import records, warden
from course.cluster.client import client_class
from course.cluster.errors import ClusterError
from course.cluster.handle import Cluster
from course.cluster.kinds import Settings
from course.cluster.records import profile_dir
from course.cluster.status import EngineState, Status


def attach(cluster_id: str) -> Cluster | None:
    """The running cluster `cluster_id` from its files, or None if there is none (or only what is left of a
    cluster whose every process has ended, which is then cleaned up). Never stops a cluster in use: one that
    is starting, or has lost its controller while a process still holds it, is a ClusterError saying so."""
    record = records.read_record(cluster_id)
    cluster_file = records.cluster_file(cluster_id)
    if record is None and not cluster_file.exists():
        return None
    if not records.recorded_alive(cluster_id, record):
        stop_from_files(cluster_id)  # every process it had has ended: only its files are left
        return None
    holders = records.holders(record or {})
    state = record.get("state", "running") if record else "starting"
    if state == "stopping":
        raise ClusterError(
            f"cluster {cluster_id} is being stopped; start it again when that has finished, or pass another cluster_id"
        )
    if state != "running":
        if holders or record is None:
            raise ClusterError(
                f"cluster {cluster_id} is still starting (process "
                f"{records.pids(holders) or 'unknown'}); wait for it, or pass another cluster_id"
            )
        stop_from_files(cluster_id)  # half-started by a process that has ended: no one can be using it
        return None
    cluster = connect(cluster_id, record)
    if cluster is None:
        if holders:
            raise ClusterError(
                f"cluster {cluster_id} has lost its controller, and process {records.pids(holders)} still "
                f"uses it; stop it with: python -m course cluster stop --id {cluster_id}"
            )
        stop_from_files(cluster_id)  # no controller and no one using it: nothing to re-attach to
    return cluster


def connect(cluster_id: str, record: dict) -> Cluster | None:
    """A handle on a running cluster from its files (a Client connected to its controller), or None if its
    controller is not running. Connecting changes nothing in the cluster."""
    from ipyparallel.error import NoEnginesRegistered

    try:
        ipp_cluster = load(cluster_id)
        cluster = Cluster(ipp_cluster, Settings(**record["settings"]), record.get("persist", True))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    cluster.engines = record.get("engines", [])
    cluster._owner = record.get("owner") or [record.get("started_by_pid", -1), None]
    if ipp_cluster.controller is None or not processes.running(getattr(ipp_cluster.controller, "process", None)):
        return None
    connection = Path(ipp_cluster.profile_dir) / "security" / f"ipcontroller-{cluster_id}-client.json"
    if not connection.exists():  # removed as its controller stops: a Client would wait 30 s for it, in vain
        raise ClusterError(
            f"cluster {cluster_id} is being stopped (its controller's connection file is gone); start it again "
            f"when that has finished, or pass another cluster_id"
        )
    try:
        cluster.client = client_class()(
            profile_dir=ipp_cluster.profile_dir, cluster_id=cluster_id, cluster=ipp_cluster, timeout=30
        )
    except Exception as exc:  # the controller runs but did not answer (a busy machine): leave it alone
        raise ClusterError(
            f"cluster {cluster_id}'s controller is running but did not answer within 30 s "
            f"({type(exc).__name__}); try again in a moment"
        ) from None
    cluster.client.course_cluster = cluster
    cluster._watch()
    try:
        cluster.view = cluster.client.direct_view(cluster.ids)
    except NoEnginesRegistered:  # its owner is stopping it (the record said running a moment ago), or they died
        cluster.client.close()
        raise ClusterError(
            f"cluster {cluster_id} has no engines connected (it is being stopped, or its engines died); "
            f"stop it with: python -m course cluster stop --id {cluster_id}"
        ) from None
    cluster.view.block = True
    return cluster


def load(cluster_id: str):
    """ipyparallel's Cluster as its file describes it (its controller and engine launchers, on their processes), for
    looking at, re-attaching to or stopping it. It never writes that file (ipyparallel's `cluster_file` is ''):
    ipyparallel's own `Cluster.from_file` rewrites the file whenever what it finds differs from what the file says
    (engines that have just exited are dropped: a file of a running controller and no engines), and its launchers
    rewrite it again as they see their processes end. In a process other than the one stopping the cluster, such a
    write can land after that stop removed the file, which then stays for good: a cluster left on record by
    `cluster status`. Only a handle that starts processes itself writes the file (Cluster._launch).

    Raises OSError or ValueError if the file cannot be read."""
    import json

    import ipyparallel as ipp

    data = json.loads(records.cluster_file(cluster_id).read_text())
    ipp_cluster = ipp.Cluster.from_dict(data, cluster_file="", log_level=50)
    _drop_strangers(ipp_cluster, cluster_id)
    return ipp_cluster


def _drop_strangers(ipp_cluster, cluster_id: str) -> None:
    """Forget the launchers whose process is no longer the one they launched. ipyparallel 9's LocalProcessLauncher
    takes up whatever process now has the pid its file names (`_reconstruct_process`: psutil.Process(pid), no start
    time), and stopping the cluster would then send SIGTERM, and SIGKILL 5 s later, to that process."""

    def stranger(launcher) -> bool:
        process = getattr(launcher, "process", None)
        return process is not None and not records.launched_for(process.pid, cluster_id)

    if ipp_cluster.controller is not None and stranger(ipp_cluster.controller):
        ipp_cluster.controller = None
    for set_id, engine_set in list(ipp_cluster.engines.items()):
        launchers = getattr(engine_set, "launchers", None)  # local engines: one launcher per engine process
        if launchers is not None:
            for name, launcher in list(launchers.items()):
                if stranger(launcher):
                    launchers.pop(name)
        if stranger(engine_set) or launchers == {}:
            ipp_cluster.engines.pop(set_id)


def inspect(cluster_id: str) -> Status:
    """The status of cluster `cluster_id` as another process sees it: read only, it never stops anything."""
    record = records.read_record(cluster_id)
    settings = (record or {}).get("settings", {})
    kind, n = settings.get("kind", "?"), settings.get("n", 0)
    if not records.recorded_alive(cluster_id, record):
        return Status(cluster_id, kind, False, [], n, state="ended")
    state = record.get("state", "running") if record else "starting"
    if state != "running":
        return Status(cluster_id, kind, False, [], n, state=state, holders=records.pids(records.holders(record or {})))
    try:
        cluster = connect(cluster_id, record)
    except ClusterError as exc:
        return Status(cluster_id, kind, True, [], n, state=f"not answering: {exc}")
    if cluster is None:  # controller gone, something else still running: say so, touch nothing
        here = socket.gethostname()
        engines = [
            EngineState(
                e["id"],
                e["host"],
                e["pid"],
                e["host"] == here and processes.still(e["pid"], e.get("create_time")),
                e.get("device", ""),
            )
            for e in record.get("engines", [])
        ]
        return Status(cluster_id, kind, False, engines, n, holders=records.pids(records.holders(record)))
    try:
        return cluster.status()
    finally:
        cluster.client.close()


def stop_from_files(cluster_id: str) -> bool:
    """End everything on record for one cluster: ipyparallel's launchers, then recorded processes and Slurm job."""
    cluster_file, record_file = records.cluster_file(cluster_id), records.record_file(cluster_id)
    found = cluster_file.exists() or record_file.exists()
    if record_file.exists():
        records.update_record(
            cluster_id, state="stopping"
        )  # its users' calls then say it was stopped, not that it died
    record = records.read_record(cluster_id) or {}
    procs, jobs = _recorded(cluster_id, record)
    if cluster_file.exists():
        jobs |= _stop_launchers(cluster_id)
    processes.end(procs, timeout=10)
    for job in jobs:
        slurm.cancel_quietly(job)
    cluster_file.unlink(missing_ok=True)
    records.remove_record(cluster_id)
    security = profile_dir() / "security"
    for leftover in [
        *security.glob(f"ipcontroller-{cluster_id}-*.json"),
        profile_dir() / "log" / f"engines{cluster_id}.json",
    ]:
        leftover.unlink(missing_ok=True)
    warden.end(record.get("warden"))
    return found


def _recorded(cluster_id: str, record: dict) -> tuple[list[psutil.Process], set[str]]:
    """The processes a record names that still run (with their children), and its Slurm job. The controller's and
    launcher's pids are recorded without a start time: each is taken only if ipyparallel launched it for this
    cluster (a reused number would otherwise have its process, and everything it started, terminated)."""
    pids: list[tuple[int, float | None]] = []
    jobs: set[str] = set()
    try:
        if record.get("host", socket.gethostname()) == socket.gethostname():
            pids += [(e["pid"], e.get("create_time")) for e in record.get("engines", [])]
            bare = [record.get(k, -1) for k in ("controller_pid", "launcher_pid")]
            pids += [(pid, None) for pid in bare if records.launched_for(pid, cluster_id)]
        if record.get("slurm_job"):
            jobs.add(str(record["slurm_job"]))
    except KeyError:
        pass
    procs = []
    for pid, created in pids:
        if processes.still(pid, created):
            try:
                process = psutil.Process(pid)
                procs += [process, *process.children(recursive=True)]
            except psutil.Error:
                pass
    return procs, jobs


def _stop_launchers(cluster_id: str) -> set[str]:
    """Stop what ipyparallel's cluster file says it launched; the Slurm jobs it names."""
    jobs = set()
    try:
        ipp_cluster = load(cluster_id)
        for set_id, engine_set in list(ipp_cluster.engines.items()):
            if getattr(engine_set, "job_id", ""):
                jobs.add(engine_set.job_id)
                if slurm.controller_down():  # its scancel would wait ~10 s for a controller that does not answer
                    del ipp_cluster.engines[set_id]
        ipp_cluster.stop_cluster_sync()
    except Exception:
        pass  # launchers whose processes are gone; the pid and job clean-up below covers the rest
    return jobs
