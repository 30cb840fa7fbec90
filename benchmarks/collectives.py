"""Benchmark: the course's ring all-reduce (course.answers, instructor-only) and torch.distributed's gloo all-reduce
against MPI.Allreduce, on 2 and 4 ranks, 1 KB to 64 MB.

Run: .venv/bin/python benchmarks/collectives.py   (it launches itself under mpiexec for each rank count)
All three are timed side by side in one run (A B C A B C ...), and the median ratios are reported, because
this machine is shared and absolute times wander. Goal: ring / MPI <= 1.5 for messages >= 1 MB; MPI's own
all-reduce is the ceiling (ratio 1.00); gloo's is shown beside it (no goal: what notebook 12's DDP sends with). The machine's 2-process ceiling (benchmarks/machine.py) is printed
beside it, measured in the same run, since both collectives share the same 2 cores.
"""

import subprocess
import sys

import numpy as np

GOAL = 1.5  # ring / MPI.Allreduce from 1 MB up
SIZES = [2**10, 2**14, 2**17, 2**20, 2**22, 2**24, 2**26]  # bytes: 1 KB ... 64 MB
PAIRS = 7


def gloo_allreduce(comm, array: np.ndarray) -> np.ndarray:
    """torch.distributed's all-reduce over the job's gloo group, on a copy (as the others leave `array` alone)."""
    import torch
    import torch.distributed as dist

    result = torch.from_numpy(array.copy())
    dist.all_reduce(result)
    return result.numpy()


def measure() -> None:
    """Runs on every rank: interleaved timings, rank 0 prints one row per size."""
    from mpi4py import MPI

    from course import answers, comm

    world = MPI.COMM_WORLD
    for nbytes in SIZES:
        data = np.random.default_rng(world.rank).standard_normal(nbytes // 8)
        times = {"ring": [], "gloo": [], "mpi": []}
        for _ in range(PAIRS):
            for name, function in (("ring", answers.ring_allreduce), ("gloo", gloo_allreduce),
                                   ("mpi", comm.mpi_allreduce)):  # fmt: skip
                times[name].append(comm.time_collective(world, function, data, repeats=1))
        ring, gloo = ([a / b for a, b in zip(times[k], times["mpi"])] for k in ("ring", "gloo"))
        if world.rank == 0:
            print(
                f"{world.size:>5} {nbytes / 2**20:>10.3f} {np.median(times['ring']) * 1e3:>10.3f} "
                f"{np.median(times['gloo']) * 1e3:>10.3f} {np.median(times['mpi']) * 1e3:>10.3f} "
                f"{np.median(ring):>7.2f} {np.median(gloo):>7.2f}   "
                f"{'' if nbytes < 2**20 else 'met' if np.median(ring) <= GOAL else 'NOT met'}",
                flush=True,
            )


def main() -> None:
    import argparse

    from course import mpi

    import statistics

    import machine

    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # --help; no options
    ceilings = [machine.pair()]
    print(
        f"{'ranks':>5} {'MB':>10} {'ring ms':>10} {'gloo ms':>10} {'MPI ms':>10} {'ring/MPI':>7} {'gloo/MPI':>7}   "
        f"goal ring <= {GOAL} from 1 MB (ceiling: MPI = 1.00; medians of {PAIRS} interleaved triples)",
        flush=True,
    )
    for ranks in (2, 4):
        subprocess.run(mpi.command(ranks, sys.executable, __file__, "--rank"), env=mpi.env(), check=True)
        ceilings.append(machine.pair())
    print(
        f"machine ceiling (2 single-thread BLAS processes against 1, benchmarks/machine.py), measured between "
        f"the runs: median {statistics.median(ceilings):.2f} of {[round(c, 2) for c in ceilings]}"
    )


if __name__ == "__main__":
    if "--rank" in sys.argv:
        from course.checks.ddp import in_gloo_group

        in_gloo_group(measure)  # every rank in MPI's world and in one gloo group of the same ranks
    else:
        main()
