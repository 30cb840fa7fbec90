"""Benchmark: PyTorch DDP weak scaling over gloo, 2 ranks against 1, beside the machine's ceiling.

Throughput (samples/s, the first steps excluded) of an MLP trained with DistributedDataParallel, each rank one
thread, at the same batch per rank: the weak-scaling efficiency throughput(2) / (2 x throughput(1)), beside the
ceiling for it measured in the same pairs (half the speed-up of two single-thread BLAS processes over one,
benchmarks/machine.py). Goal: at least 0.8 x that ceiling. Runs A B A B ... and reports the median per-pair ratio.

    .venv/bin/python benchmarks/ddp.py [--pairs 3] [--steps 60] [--batch 64] [--width 1024]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import devices, mpi  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)
GOAL = 0.8  # x the ceiling
WARM_UP = 5  # steps not timed: DDP rebuilds its buckets after the first


def train(steps: int, batch: int, width: int) -> None:
    """On every rank of a gloo group: DDP steps on random data; rank 0 prints the samples/s of all ranks."""
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    model = DistributedDataParallel(
        torch.nn.Sequential(
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, width),
            torch.nn.ReLU(),
            torch.nn.Linear(width, 10),
        )  # fmt: skip
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
    for step in range(WARM_UP + steps):
        if step == WARM_UP:
            dist.barrier()
            started = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    dist.barrier()
    if dist.get_rank() == 0:
        rate = steps * batch * dist.get_world_size() / (time.perf_counter() - started)
        print("SUMMARY " + json.dumps({"samples_per_second": rate}), flush=True)


def throughput(ranks: int, steps: int, batch: int, width: int) -> float:
    """samples/s of `mpiexec -n ranks` DDP ranks of one thread each, in one gloo group."""
    env = dict(mpi.env(), **devices.thread_env(1))
    args = ["--rank", str(steps), str(batch), str(width)]
    done = subprocess.run(mpi.command(ranks, sys.executable, __file__, *args), capture_output=True, text=True,
                          env=env, timeout=1800)  # fmt: skip
    found = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"DDP on {ranks} rank(s) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(found[-1].removeprefix("SUMMARY "))["samples_per_second"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--width", type=int, default=1024, help="the MLP's hidden width (4 MB per layer at 1024)")
    args = parser.parse_args()
    efficiencies, ceilings = [], []
    for _ in range(args.pairs):
        one = throughput(1, args.steps, args.batch, args.width)
        two = throughput(2, args.steps, args.batch, args.width)
        ceilings.append(machine.pair() / 2)
        efficiencies.append(two / (2 * one))
        print(f"1 rank {one:9.0f} samples/s, 2 ranks {two:9.0f}: efficiency {efficiencies[-1]:.2f} "
              f"(ceiling {ceilings[-1]:.2f})", flush=True)  # fmt: skip
    efficiency, ceiling = statistics.median(efficiencies), statistics.median(ceilings)
    verdict = "met" if efficiency >= GOAL * ceiling else "NOT met"
    print(f"DDP weak-scaling efficiency, 2 ranks over 1: median {efficiency:.2f}; the machine's ceiling "
          f"{ceiling:.2f}; goal >= {GOAL} x ceiling = {GOAL * ceiling:.2f}: {verdict}")  # fmt: skip


if __name__ == "__main__":
    if "--rank" in sys.argv:
        from course.checks.ddp import in_gloo_group

        steps, batch, width = (int(a) for a in sys.argv[sys.argv.index("--rank") + 1 :][:3])
        in_gloo_group(train, (steps, batch, width))
    else:
        main()
