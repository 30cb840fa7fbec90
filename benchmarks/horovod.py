"""Benchmark: Horovod weak scaling and MirroredStrategy on logical CPU devices, measured interleaved.

1. Throughput (images/s, first epoch excluded) of the MNIST CNN under Horovod with 2 ranks of 1 thread each
   over 1 rank of 1 thread, at the same batch per rank: the weak-scaling efficiency throughput(2) / (2 x
   throughput(1)), beside the machine's ceiling for it measured in the same pairs (half the speed-up of two
   single-thread BLAS processes over one, benchmarks/machine.py). Goal: at least 0.9 x that ceiling.
2. Epoch time of the same CNN with MirroredStrategy on 1 logical CPU device over 2, at the same global batch
   (each run in a fresh process: logical devices are fixed when TensorFlow starts).

Runs A B A B ... (`--pairs` pairs per comparison), so both sides see the same machine load, and reports the
median of the per-pair ratios (the machine is shared and noisy: never one absolute time).

    .venv/bin/python benchmarks/horovod.py [--pairs 3] [--epochs 5] [--batch 100] [--no-yield] [--skip mirrored]
        [--env HOROVOD_CYCLE_TIME=1 ...]   (extra environment for the Horovod runs, to try a setting)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import devices, mpi, perf, training  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)
GOAL = 0.9  # x the ceiling


# Open MPI busy-polls while a rank waits in a collective; on cores shared with other work that steals the
# other rank's CPU. course.mpi makes waiting ranks yield (OMPI_MCA_mpi_yield_when_idle=1); --no-yield measures
# without it.
EXTRA_ENV: dict[str, str] = {}


def horovod_throughput(ranks: int, epochs: int, batch: int) -> float:
    """images/s of `mpiexec -n ranks python -m course.programs.horovod_mnist`, each rank 1 thread (first epoch excluded)."""
    env = dict(mpi.env(), **devices.thread_env(1), TF_CPP_MIN_LOG_LEVEL="2", **EXTRA_ENV)
    command = mpi.command(
        ranks,
        sys.executable,
        "-m",
        "course.programs.horovod_mnist",
        "--epochs",
        str(epochs),
        "--batch",
        str(batch),
        "--threads",
        "1",
    )
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800, cwd=sys.path[0])
    found = re.findall(r"SUMMARY (\{.*\})", done.stdout)
    if done.returncode != 0 or not found:
        raise SystemExit(f"horovod run with {ranks} rank(s) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(found[-1])["images_per_second"]


def mirrored_epoch_time(replicas: int, global_batch: int, epochs: int, steps: int) -> float:
    """Median epoch time (first excluded) of the MNIST CNN with MirroredStrategy on `replicas` logical CPUs."""
    result = training.in_fresh_process(
        training.mirrored_run,
        replicas,
        model="mnist_cnn",
        dataset="mnist",
        per_replica_batch=global_batch // replicas,
        input_size=28,
        epochs=epochs,
        steps=steps,
        base_lr=0.05 / replicas,
    )  # the same learning rate for both
    return result.epoch_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100, help="Horovod batch per rank; MirroredStrategy global batch")
    parser.add_argument("--steps", type=int, default=20, help="MirroredStrategy steps per epoch")
    parser.add_argument("--skip", choices=("horovod", "mirrored"), default=None)
    parser.add_argument(
        "--no-yield",
        dest="no_yield",
        action="store_true",
        help="waiting MPI ranks busy-poll (OMPI_MCA_mpi_yield_when_idle=0; course.mpi's default is 1)",
    )
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the Horovod runs (e.g. HOROVOD_FUSION_THRESHOLD=0)",
    )
    args = parser.parse_args()
    EXTRA_ENV.update(item.split("=", 1) for item in args.env)
    if args.no_yield:
        EXTRA_ENV[mpi.YIELD] = "0"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at start", flush=True)

    if args.skip != "horovod":
        pairs, ceilings = [], []
        for i in range(args.pairs):
            one = horovod_throughput(1, args.epochs, args.batch)
            two = horovod_throughput(2, args.epochs, args.batch)
            ceilings.append(machine.pair() / 2)
            pairs.append((two, one))
            print(
                f"horovod pair {i + 1}: 1 rank {one:.0f} images/s, 2 ranks {two:.0f} images/s, "
                f"efficiency {perf.weak_scaling_efficiency(two, one, 2):.2f}; ceiling {ceilings[-1]:.2f}",
                flush=True,
            )
        efficiency, ceiling = perf.median_ratio(pairs) / 2, statistics.median(ceilings)
        print(
            f"HOROVOD weak-scaling efficiency, 2 ranks x 1 thread over 1 rank x 1 thread (median of {args.pairs}"
            f"{', with ' + ' '.join(args.env) if args.env else ''}): {efficiency:.2f}, {efficiency / ceiling:.2f} of the "
            f"machine's ceiling {ceiling:.2f} (goal >= {GOAL} x ceiling = {GOAL * ceiling:.2f}: "
            f"{'met' if efficiency >= GOAL * ceiling else 'NOT met'}); throughput medians 1 rank "
            f"{statistics.median(p[1] for p in pairs):.0f}, 2 ranks {statistics.median(p[0] for p in pairs):.0f} images/s",
            flush=True,
        )

    if args.skip != "mirrored":
        pairs = []
        for i in range(args.pairs):
            one = mirrored_epoch_time(1, args.batch, args.epochs, args.steps)
            two = mirrored_epoch_time(2, args.batch, args.epochs, args.steps)
            pairs.append((one, two))
            print(
                f"mirrored pair {i + 1}: 1 device {one:.3f} s/epoch, 2 logical devices {two:.3f} s/epoch, "
                f"speedup {one / two:.2f}",
                flush=True,
            )
        print(
            f"MIRRORED epoch time 1 device / 2 logical CPU devices at global batch {args.batch} (median of "
            f"{args.pairs}): speedup {perf.median_ratio(pairs):.2f}",
            flush=True,
        )
    print(f"load average {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
