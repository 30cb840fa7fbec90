"""Benchmark: FSDP2 against DDP on 2 gloo ranks, step time and memory per rank, beside the machine's ceiling.

The same MLP (BLOCKS blocks of Linear + ReLU and a head, float32, Adam) trained on 2 ranks of one thread each at
the same batch per rank, A = DistributedDataParallel, B = FSDP2 (`fully_shard` on each block, then the root,
default resharding after forward), each pair's runs in new `mpiexec` jobs. Per pair:

- step time: the median ms per step after warm-up (each step's slowest rank), and the ratio FSDP2 / DDP;
- memory per rank (the larger rank's): the bytes of parameters, gradients and Adam's state it holds after a step
  (the DTensors' local shards under FSDP2), their ratio beside ZeRO-3's accounting (each rank 1/N of all three,
  dim-0 shards padded to equal rows); the peak of whole (unsharded) parameters registered at once during a step,
  seen at every Linear's forward and backward; the peak of tensors during a step as
  `torch.distributed._tools.mem_tracker.MemTracker` sees them; and the process's RSS (coarse: torch itself is
  most of it);
- the ceiling: the speed-up of 2 single-thread processes over 1 (benchmarks/machine.py's `pair`), in the same pair.

No goal for the time ratio. Each step DDP all-reduces the gradients (over 2 ranks each rank sends 1 x the model's
bytes); FSDP2 all-gathers the parameters in forward and again in backward (resharded after forward) and
reduce-scatters the gradients: 1.5 x DDP's bytes (ring accounting), in a collective per block with a copy in and
out of each. Forward and backward do the same arithmetic on both; Adam's update is halved (each rank updates its own
shard), and Adam is about half of this model's one-process step. So the ratio lands on either side of 1: below it
where compute dominates, 1.5 x and more where communication or FSDP2's per-block overhead does (--width 256
--batch 16: 4 to 5 x). Both sides run 2 ranks on the same cores, so the ceiling is common to both and bounds
neither end of the ratio; it says how contended the cores were in that pair (near 2: a core each; lower: the ranks
share cores with each other, their gloo threads and other work). On 2 cores shared with other work (load 3 to 9)
the per-pair ratios spread from 0.6 to 2.0 x and three runs' medians were 0.69, 1.70 and 1.63: a fixed goal would
grade the host's load and the width, not FSDP2. The memory ratio has an expected value: hold it to that.

Left out of the held bytes: DDP's gradient buckets (a second copy of the gradients, allocated when the model is
wrapped; MemTracker does not see them either) and FSDP2's all-gather buffers (freed after each block: they are
in the peaks). Runs A B A B ... and reports medians of the per-pair figures.

    .venv/bin/python benchmarks/fsdp.py [--pairs 3] [--steps 30] [--batch 64] [--width 1024]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import devices, mpi  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)
RANKS = 2
BLOCKS, CLASSES = 4, 10  # Linear(width, width) + ReLU blocks, then Linear(width, CLASSES)
WARM_UP = 5  # steps not timed: DDP rebuilds its buckets after the first, FSDP2 sets up its buffers
MB = 2**20


def shapes(width: int) -> list[tuple[int, int]]:
    """(rows, inputs) of each Linear of the model: a weight of rows x inputs and a bias of rows."""
    return [(width, width)] * BLOCKS + [(CLASSES, width)]


def zero_share(width: int, ranks: int) -> float:
    """ZeRO-3's accounting: the fraction of the parameters (so of the gradients and Adam's state) one rank holds,
    each tensor cut into `ranks` equal dim-0 shards of whole rows, the last padded (as FSDP2 pads)."""
    share = sum(math.ceil(rows / ranks) * (inputs + 1) for rows, inputs in shapes(width))
    return share / sum(rows * (inputs + 1) for rows, inputs in shapes(width))


def build(kind: str, width: int):
    """The model, the same weights on every rank, wrapped by DDP or sharded by FSDP2."""
    import torch
    import torch.distributed as dist

    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(i, r), torch.nn.ReLU()) for r, i in shapes(width)[:-1]]
    model = torch.nn.Sequential(*blocks, torch.nn.Linear(width, CLASSES))
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        # DDP: whole replicas; backward all-reduces the gradients in buckets
        return DistributedDataParallel(model, bucket_cap_mb=25)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    # FSDP2: one group per block (gathered just before it runs), the root holds the head
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for block in blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def local_bytes(t) -> int:
    """Bytes of `t` this rank holds: a DTensor's local shard, or the whole of a plain tensor."""
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def held(model, optimizer) -> dict[str, int]:
    """Bytes of parameters, gradients and Adam's state this rank holds now."""
    import torch

    params = list(model.parameters())
    state = [v for s in optimizer.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {
        "params": sum(local_bytes(p) for p in params),
        "grads": sum(local_bytes(p.grad) for p in params if p.grad is not None),
        "optimizer": sum(local_bytes(v) for v in state),
    }


def whole_peak(model, step) -> int:
    """Run `step()`; the most bytes of whole (not DTensor) parameters registered in `model` at once, looked at
    before and after each Linear's forward and when its output's gradient arrives (its backward)."""
    import torch
    from torch.distributed.tensor import DTensor

    peak = 0

    def look(*_):
        nonlocal peak
        peak = max(peak, sum(local_bytes(p) for p in model.parameters() if not isinstance(p, DTensor)))

    def after_forward(_module, _inputs, output):
        look()
        output.register_hook(look)

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    handles = [m.register_forward_pre_hook(look) for m in linears]
    handles += [m.register_forward_hook(after_forward) for m in linears]
    step()
    for handle in handles:
        handle.remove()
    return peak


def tracked_peak(model, optimizer, step) -> int:
    """Run `step()` under MemTracker (private API; one step per tracker); the most bytes of tensors it saw."""
    from torch.distributed._tools.mem_tracker import MemTracker

    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    with tracker:
        step()
    return sum(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())


def train(kind: str, steps: int, batch: int, width: int) -> None:
    """On every rank of a gloo group: Adam steps on random data; rank 0 prints the step times and memory."""
    import time

    import psutil
    import torch
    import torch.distributed as dist

    model = build(kind, width)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(batch, width), torch.randint(0, CLASSES, (batch,))

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    times = []
    for n in range(WARM_UP + steps):
        if n == WARM_UP:
            dist.barrier()  # every rank starts timing together
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    mine = {
        "times": times[WARM_UP:],
        **held(model, optimizer),
        "whole_peak": whole_peak(model, step),
        "tracked_peak": tracked_peak(model, optimizer, step),
        "rss": psutil.Process().memory_info().rss,
    }
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)  # rank 0 reports for all: each step is as slow as its slowest rank
    if dist.get_rank() == 0:
        summary = {key: max(r[key] for r in every) for key in mine if key != "times"}
        summary["step_ms"] = 1000 * statistics.median(map(max, zip(*(r["times"] for r in every))))
        print("SUMMARY " + json.dumps(summary), flush=True)


def run(kind: str, steps: int, batch: int, width: int) -> dict:
    """The SUMMARY of `mpiexec -n RANKS` ranks of one thread each training with `kind` in one gloo group."""
    env = dict(mpi.env(), **devices.thread_env(1))
    args = ["--rank", kind, str(steps), str(batch), str(width)]
    done = subprocess.run(mpi.command(RANKS, sys.executable, __file__, *args), capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    found = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"{kind} on {RANKS} ranks failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return json.loads(found[-1].removeprefix("SUMMARY "))


def state_bytes(r: dict) -> int:
    return r["params"] + r["grads"] + r["optimizer"]


def report(ddp: dict, fsdp: dict, ceiling: float, expected: float) -> None:
    """One pair's lines: time, held memory against ZeRO's accounting, peaks and RSS."""
    ratio = fsdp["step_ms"] / ddp["step_ms"]
    print(f"  step   DDP {ddp['step_ms']:7.1f} ms, FSDP2 {fsdp['step_ms']:7.1f} ms: FSDP2 / DDP {ratio:.2f} "
          f"(ceiling, 2 processes' speed-up over 1: {ceiling:.2f})")  # fmt: skip
    for name, r in (("DDP", ddp), ("FSDP2", fsdp)):
        print(f"  {name:5} held {state_bytes(r) / MB:6.1f} MB (params {r['params'] / MB:.1f}, grads "
              f"{r['grads'] / MB:.1f}, Adam {r['optimizer'] / MB:.1f}); peak whole params "
              f"{r['whole_peak'] / MB:.1f} MB; peak tensors (MemTracker) {r['tracked_peak'] / MB:.1f} MB; "
              f"RSS {r['rss'] / MB:.0f} MB")  # fmt: skip
    print(f"  held FSDP2 / DDP {state_bytes(fsdp) / state_bytes(ddp):.3f} (ZeRO-3 expects {expected:.3f})", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=64, help="samples per rank per step")
    parser.add_argument("--width", type=int, default=1024, help="the MLP's hidden width (4 MB per layer at 1024)")
    args = parser.parse_args()
    expected = zero_share(args.width, RANKS)
    times, memories, ceilings = [], [], []
    for pair in range(args.pairs):
        ddp = run("ddp", args.steps, args.batch, args.width)
        fsdp = run("fsdp", args.steps, args.batch, args.width)
        ceilings.append(machine.pair())
        times.append(fsdp["step_ms"] / ddp["step_ms"])
        memories.append(state_bytes(fsdp) / state_bytes(ddp))
        print(f"pair {pair + 1}:")
        report(ddp, fsdp, ceilings[-1], expected)
    step, ceiling, memory = (statistics.median(v) for v in (times, ceilings, memories))
    print(
        f"FSDP2 / DDP on {RANKS} ranks, medians of {args.pairs} pair(s): step time {step:.2f} x, beside the "
        f"ceiling {ceiling:.2f}, which slows both sides alike and so allows any ratio: no goal (see the docstring)"
    )
    print(f"FSDP2 / DDP held memory per rank (params + grads + Adam): {memory:.3f} x; ZeRO-3 expects {expected:.3f}")


if __name__ == "__main__":
    if "--rank" in sys.argv:
        from course.checks.ddp import in_gloo_group

        kind, *sizes = sys.argv[sys.argv.index("--rank") + 1 :][:4]
        in_gloo_group(train, (kind, *(int(s) for s in sizes)))
    else:
        main()
