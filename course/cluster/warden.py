"""A cluster's warden: a small process beside every cluster that ends it once nobody can use it any more.

A cluster's own stop (at exit, `cluster.stop()`) never runs when its starter is killed (SIGKILL, a crash, the
SIGTERM that a Python script does not catch); the warden then ends its controller, `mpiexec` and engines from the
cluster's record within seconds. It ends the cluster when its record says that

- the cluster does not persist and no process holds it (its starter and those that re-attached have all ended);
- it was started in a notebook's kernel and the process that ran that kernel (the Jupyter server, or a grader
  such as `course validate`) has ended; or no kernel holds it while its engines are busy (work nobody waits for,
  such as ranks spinning inside a collective whose peer is gone).

A cluster started in a kernel otherwise outlives the kernel on purpose (lifecycle.start: a restarted notebook
re-attaches); one started to persist from a terminal (`course cluster start`) lives until it is stopped.

    python -c "...; from course.cluster.warden import watch; watch(CLUSTER_ID)"   # what lifecycle starts
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from course.cluster import records

POLL = 0.5  # seconds between looks at the record
BUSY = 20.0  # % of a core: an engine above this over BUSY_WINDOW is working (an idle one uses about 1%)
BUSY_WINDOW = 1.0  # seconds over which an engine's use is measured

_PROGRAM = (
    "import os, sys; sys.path.insert(0, sys.argv[1])\n"
    "if os.fork(): os._exit(0)\n"  # the starter reaps this parent at once; the warden itself is never its zombie
    "from course.cluster.warden import watch; watch(sys.argv[2])"
)


def start(cluster_id: str) -> None:
    """Start the warden of cluster `cluster_id` (its record must exist) and put it on the record."""
    root = str(Path(__file__).resolve().parents[2])
    launcher = subprocess.Popen(
        [sys.executable, "-c", _PROGRAM, root, cluster_id],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a Ctrl-C or a kill of the starter's process group leaves it to do its work
    )
    launcher.wait()


def watching(record: dict) -> bool:
    """Whether the warden a record names still runs."""
    return records.alive(record.get("warden"))


def end(entry: list | None) -> None:
    """End the warden a record named (its cluster is stopped), unless it is this process."""
    if records.alive(entry) and entry[0] != os.getpid():
        with contextlib.suppress(psutil.Error):
            psutil.Process(entry[0]).kill()


def watch(cluster_id: str) -> None:
    """Wait until cluster `cluster_id` is stopped (its record gone), or end it once `why_end` gives a reason."""
    from course.cluster import from_files

    record = records.update_record(cluster_id, warden=records.me())
    if "cluster_id" not in record:  # stopped before this warden came up: its record is gone, leave none
        records.remove_record(cluster_id)
        return
    while True:
        record = records.read_record(cluster_id)
        if record is None or record.get("warden", [None])[0] != os.getpid():
            return  # stopped, or another warden took over
        if why_end(record):
            from_files.stop_from_files(cluster_id)
            return
        time.sleep(POLL)


def why_end(record: dict) -> str:
    """Why a cluster should be ended now, from its record, or '' while someone may still use it."""
    if record.get("host", socket.gethostname()) != socket.gethostname():
        return ""  # its processes are not on this host: nothing here can tell
    guard = record.get("guard")
    if guard and not records.alive(guard):
        return "the process that ran its notebook's kernel ended"
    if records.holders(record):
        return ""
    if not record.get("persist"):
        return "its starter ended"
    if guard and _busy(record):
        return "its engines were busy with no kernel to wait for them"
    return ""


def _busy(record: dict) -> bool:
    """Whether any of the cluster's engines (with what it started, such as MPI's progress threads) is working."""
    engines = []
    for engine in record.get("engines", []):
        if records.alive([engine["pid"], engine.get("create_time")]):
            try:
                process = psutil.Process(engine["pid"])
                engines.append([process, *process.children(recursive=True)])
            except psutil.Error:
                continue
    if not engines:
        return False
    before = [[_cpu(p) for p in tree] for tree in engines]
    time.sleep(BUSY_WINDOW)
    for tree, seconds in zip(engines, before):
        used = sum(_cpu(p) - s for p, s in zip(tree, seconds))
        if used / BUSY_WINDOW * 100 > BUSY:
            return True
    return False


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
        return times.user + times.system
    except psutil.Error:
        return 0.0
