"""Record files of the course's clusters, and the lock that guards them: what each cluster is, who started and uses
it and which processes it has, so that another process can re-attach to it, inspect it or stop it (`stop --all`)."""

from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from pathlib import Path
from typing import Callable

import psutil

from course import processes, settings

PREFIX = "course-"  # every course cluster id (and Slurm job name ipengine-<id>) starts with this


def default_cluster_id() -> str:
    """COURSE_CLUSTER_ID, else one per notebook (Jupyter's JPY_SESSION_NAME), else 'course-default'."""
    name = settings.get("COURSE_CLUSTER_ID") or Path(os.environ.get("JPY_SESSION_NAME", "")).stem or "default"
    return normalise_id(name)


def normalise_id(name: str) -> str:
    """A cluster id safe in file and job names, starting with 'course-' (how stop --all recognises ours)."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "default"
    return slug if slug.startswith(PREFIX) else PREFIX + slug


def profile_dir() -> Path:
    """ipyparallel profile directory of the course's clusters: $IPYTHONDIR/profile_course."""
    from IPython.paths import get_ipython_dir

    path = Path(get_ipython_dir()) / "profile_course"
    (path / "security").mkdir(parents=True, exist_ok=True)
    return path


def record_file(cluster_id: str) -> Path:
    """The course's record of one cluster (beside ipyparallel's own cluster file)."""
    return profile_dir() / "security" / f"course-record-{cluster_id}.json"


def cluster_file(cluster_id: str) -> Path:
    """ipyparallel's file of one cluster (its controller's and launchers' state)."""
    return profile_dir() / "security" / f"cluster-{cluster_id}.json"


def me() -> list:
    """This process as a record holds it: [pid, create time] (a pid alone may be reused)."""
    return [os.getpid(), psutil.Process().create_time()]


def read_record(cluster_id: str) -> dict | None:
    """The course's record of a cluster (written whole, atomically), or None if there is none."""
    try:
        return json.loads(record_file(cluster_id).read_text())
    except (OSError, ValueError):
        return None


def update_record(cluster_id: str, /, edit: Callable[[dict], None] | None = None, **changes) -> dict:
    """Change a cluster's record under a lock (several processes may use one cluster) and write it atomically;
    `edit(record)`, if given, changes it in place under the same lock."""
    path = record_file(cluster_id)
    with open(path.with_suffix(".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = read_record(cluster_id) or {}
        record.update(changes)
        if edit is not None:
            edit(record)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(path)
    return record


def remove_record(cluster_id: str) -> None:
    """Remove a cluster's record and its lock file (the cluster has ended)."""
    record_file(cluster_id).unlink(missing_ok=True)
    record_file(cluster_id).with_suffix(".lock").unlink(missing_ok=True)


def recorded_job(cluster_id: str) -> str:
    """The Slurm job on record for a cluster, or ''."""
    return (read_record(cluster_id) or {}).get("slurm_job", "")


def alive(entry) -> bool:
    """Whether a recorded [pid, create time] (or a bare pid) is still that process."""
    if isinstance(entry, (list, tuple)):
        return bool(entry) and entry[0] > 0 and processes.still(int(entry[0]), entry[1])
    return bool(entry) and int(entry) > 0 and processes.still(int(entry), None)


def holders(record: dict) -> list:
    """The processes that started or use a cluster, other than this one, that are still running."""
    here = os.getpid()
    if record.get("host", socket.gethostname()) != socket.gethostname():
        return []
    entries = [record.get("owner") or record.get("started_by_pid", -1), *record.get("users", [])]
    return [e for e in entries if alive(e) and (e[0] if isinstance(e, (list, tuple)) else e) != here]


def pids(entries: list) -> str:
    """Recorded processes as a list of pids for a message."""
    return ", ".join(str(e[0] if isinstance(e, (list, tuple)) else e) for e in entries)


def launched_for(pid: int, cluster_id: str) -> bool:
    """Whether process `pid` is one that ipyparallel launched for cluster `cluster_id` of this profile: its launchers
    put IPP_CLUSTER_ID and IPP_PROFILE_DIR in the environment of every process they start (controller, engines,
    mpiexec). How a pid that a file holds without its start time (the controller's and mpiexec's in a record,
    every pid in ipyparallel's cluster file) is told from another process that has been given the number since:
    nothing is sent to such a pid, nor is it taken for the cluster still running, before this says yes."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        environ = psutil.Process(pid).environ()
    except psutil.Error:  # ended, a zombie, or another user's
        return False
    launched_in = environ.get("IPP_PROFILE_DIR")
    return (
        environ.get("IPP_CLUSTER_ID") == cluster_id
        and launched_in is not None
        and os.path.realpath(launched_in) == os.path.realpath(profile_dir())
    )


def recorded_alive(cluster_id: str, record: dict | None) -> bool:
    """True while any process the cluster recorded (owner, users, controller, launcher, engines) runs."""
    if record and record.get("host", socket.gethostname()) != socket.gethostname():
        return True  # started on another host: nothing here can tell, so never clean it up from here
    entries: list = []  # [pid, create time]: still that process
    bare = _launcher_pids(cluster_id)  # pids alone: checked by what ipyparallel launched them for
    if record:
        entries += [record.get("owner") or record.get("started_by_pid", -1), *record.get("users", [])]
        entries += [[e["pid"], e.get("create_time")] for e in record.get("engines", [])]
        bare += [record.get(k, -1) for k in ("controller_pid", "launcher_pid")]
    return any(alive(e) for e in entries if e not in (None, -1)) or any(launched_for(p, cluster_id) for p in bare)


def _launcher_pids(cluster_id: str) -> list:
    """The pids in ipyparallel's cluster file: its controller's and its engine launchers' state."""
    found = []
    try:
        data = json.loads(cluster_file(cluster_id).read_text())
        found.append(data.get("controller", {}).get("state", {}).get("pid", -1))
        for engine_set in data.get("engines", {}).get("sets", {}).values():
            found.append(engine_set.get("pid", -1))
            found += [
                launcher.get("pid", -1)
                for launcher in engine_set.get("engines", {}).values()
                if isinstance(launcher, dict)
            ]
    except (OSError, ValueError, AttributeError):
        pass
    return found


def running_ids() -> list[str]:
    """Ids of the course clusters this user has on record (running, or left by a process that died)."""
    security = profile_dir() / "security"
    ids = {p.name[len("course-record-") : -len(".json")] for p in security.glob("course-record-*.json")}
    ids |= {p.name[len("cluster-") : -len(".json")] for p in security.glob(f"cluster-{PREFIX}*.json")}
    return sorted(ids)
