"""Benchmark: `course.comm.on_ranks` on a fresh `mpiexec` job per call against ranks kept up between calls
(`course.rank_pool`, what a process that runs many checks in a row uses), and what kept ranks cost while they wait.

Calls alternate (fresh, kept, fresh, kept, ...) so that both see the same machine; the median seconds per call
and their ratio are reported per rank count, beside the machine's own 2-process ceiling (machine.py), which
says how busy the machine was during the run. Then the CPU that the waiting ranks use, as a share of one core.

    .venv/bin/python benchmarks/rank_pool.py [--calls 10] [--ranks 2 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[0] = str(ROOT)  # the package first: benchmarks/ would shadow it ...
sys.path.append(str(ROOT / "benchmarks"))  # ... then this folder, for machine.py

import machine  # noqa: E402


def allreduce_of_ranks() -> int:
    """A call that does what a check's case does: a collective over every rank."""
    from mpi4py import MPI

    return MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.Get_rank())


def timed_call(ranks: int, keep: bool) -> float:
    from course import comm, rank_pool

    rank_pool.KEEP = keep
    started = time.perf_counter()
    results = comm.on_ranks(allreduce_of_ranks, ranks)
    elapsed = time.perf_counter() - started
    assert results == [ranks * (ranks - 1) // 2] * ranks, results
    return elapsed


def waiting_share(ranks: int, seconds: float = 5.0) -> float:
    """CPU used by a kept pool of `ranks` ranks while no job comes, as a share of one core."""
    import psutil

    from course import comm, rank_pool

    rank_pool.KEEP = True
    pids = comm.on_ranks(lambda: __import__("os").getpid(), ranks)
    processes = [psutil.Process(pid) for pid in pids]
    time.sleep(rank_pool.IDLE_POLL * 20)  # until the ranks look for a job only every IDLE_POLL s
    before, started = sum(sum(p.cpu_times()[:2]) for p in processes), time.monotonic()
    time.sleep(seconds)
    return (sum(sum(p.cpu_times()[:2]) for p in processes) - before) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="calls of each kind per rank count")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    args = parser.parse_args()
    from course import rank_pool

    print(f"machine: 2 processes are {machine.pair():.2f}x one (ceiling for 2 workers; 2.00 on 2 free cores)")
    for ranks in args.ranks:
        timed_call(ranks, keep=True)  # the pool's start is paid once per process, not per call: not counted
        fresh, kept = [], []
        for _ in range(args.calls):
            fresh.append(timed_call(ranks, keep=False))
            kept.append(timed_call(ranks, keep=True))
        f, k = statistics.median(fresh), statistics.median(kept)
        print(f"{ranks} ranks: fresh job {f:.3f} s per call, kept ranks {k:.3f} s per call: {f / k:.0f}x faster")
        print(f"{ranks} kept ranks waiting for a job use {waiting_share(ranks):.1%} of one core")
    rank_pool.close_all()
    print(f"machine: 2 processes are {machine.pair():.2f}x one at the end")


if __name__ == "__main__":
    main()
