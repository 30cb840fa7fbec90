"""Benchmark: how long a 2-engine cluster takes to be ready, course.cluster.start vs bare ipyparallel.Cluster.

For each kind (local, MPI, and Slurm where `sinfo` answers) it starts and stops clusters alternately,
course then bare (A B A B ...), so both see the same machine load, and reports the median start-to-ready
time of each, the median of the per-pair ratios (goal: at most 1.1), and the round-trip time of a no-op
`apply_sync` on all engines. "Ready" means every engine answers a no-op on a DirectView of all engines.
It also times stopping: `Cluster.stop()` (which returns when every process is gone) against ipyparallel's
`stop_cluster_sync` followed by waiting for the processes this one started to end.

    .venv/bin/python benchmarks/cluster_start.py [--pairs 3] [--kinds local,mpi,slurm]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import cluster, mpi  # noqa: E402


def noop():
    return None


def course_start(kind: str, i: int) -> tuple[float, object]:
    started = time.perf_counter()
    c = cluster.start(2, engines=kind, cluster_id=f"bench-{kind}-{i}", quiet=True)
    c.view.apply_sync(noop)
    return time.perf_counter() - started, c


def bare_start(kind: str, i: int) -> tuple[float, object]:
    """ipyparallel alone, configured as course.cluster needs it to work here (MPI flags, a batch template), with
    its own defaults otherwise (a heartbeat every 3 s, where course.cluster beats every second)."""
    import ipyparallel as ipp

    started = time.perf_counter()
    bare = ipp.Cluster(
        engines=kind,
        n=2,
        cluster_id=f"bare-{kind}-{i}",
        profile_dir=str(cluster.profile_dir()),
        log_level=40,
        shutdown_atexit=True,
    )
    bare.start_controller_sync()
    kwargs: dict = {}
    if kind == "mpi":
        command = mpi.command(2)
        kwargs = {
            "mpi_cmd": [command[0]],
            "mpi_args": command[3:],
            "environment": {k: v for k, v in mpi.env().items() if os.environ.get(k) != v},
        }
    elif kind == "slurm":
        kwargs = {"batch_file_name": str(cluster.profile_dir() / "log" / f"bare-{i}.sbatch")}
    bare.start_engines_sync(2, **kwargs)
    client = bare.connect_client_sync()
    client.wait_for_engines(2, timeout=300, interactive=False)
    client[:].apply_sync(noop)
    return time.perf_counter() - started, (bare, client)


def stop_course(c) -> float:
    started = time.perf_counter()
    c.stop()
    return time.perf_counter() - started


def stop_bare(handle) -> float:
    """Seconds until ipyparallel has stopped the cluster and every process it started here has ended."""
    import psutil

    bare, client = handle
    started = time.perf_counter()
    processes = psutil.Process().children(recursive=True)  # controller, engines, their nannies (local and MPI)
    client.close()
    bare.stop_cluster_sync()
    psutil.wait_procs(processes, timeout=60)
    return time.perf_counter() - started


def round_trip(c, repeats: int = 200) -> float:
    """Median seconds of a no-op apply_sync on all engines."""
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        c.view.apply_sync(noop)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def slurm_available() -> bool:
    if not shutil.which("sinfo"):
        return False
    out = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True)
    return out.returncode == 0 and "up" in out.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3, help="course/bare pairs per kind (default 3)")
    parser.add_argument("--kinds", default="local,mpi,slurm")
    args = parser.parse_args()
    os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="bench-ipython-")  # apart from anyone's clusters
    kinds = [k for k in args.kinds.split(",") if k != "slurm" or slurm_available()]
    if "slurm" in args.kinds and "slurm" not in kinds:
        print("slurm: skipped (no Slurm answers here; start one with scripts/single-node-slurm.sh start)")
    print(
        f"{'kind':<6} {'course start':>13} {'bare start':>11} {'ratio':>6} {'no-op apply (2 engines)':>24} "
        f"{'course stop':>12} {'bare stop':>10}"
    )
    for kind in kinds:
        ours, bares, ratios, rtts, stops = [], [], [], [], []
        for i in range(args.pairs):
            t_ours, c = course_start(kind, i)
            rtts.append(round_trip(c))
            ours_stop = stop_course(c)
            t_bare, handle = bare_start(kind, i)
            stops.append((ours_stop, stop_bare(handle)))
            ours.append(t_ours)
            bares.append(t_bare)
            ratios.append(t_ours / t_bare)
        bare_stop = "" if kind == "slurm" else f"{statistics.median(s[1] for s in stops):>8.2f} s"  # not our children
        print(
            f"{kind:<6} {statistics.median(ours):>11.2f} s {statistics.median(bares):>9.2f} s "
            f"{statistics.median(ratios):>6.2f} {statistics.median(rtts) * 1000:>21.2f} ms "
            f"{statistics.median(s[0] for s in stops):>10.2f} s {bare_stop}",
            flush=True,
        )
    print(
        f"(median of {args.pairs} interleaved pairs each; ratio = median of course/bare per pair; goal <= 1.1; "
        f"stop: until every process has ended)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
