"""Benchmark: GPipe against 1F1B (`torch.distributed.pipelining`) on 2 gloo ranks, one stage each: step time, idle
share, micro-batches in flight and activation memory per stage, for several micro-batch counts m.

Each stage is 4 blocks of Linear(width, width) + ReLU (float32, 4 MB of weights per Linear at width 1024; the last
stage adds Linear(width, 10) and cross-entropy), the batch (256 x 1024 by default) cut into m micro-batches, no
optimizer. A = ScheduleGPipe, B = Schedule1F1B, every m in one `mpiexec` job of one-thread ranks, timed from the
second step on (the first also exchanges shapes). Measured from outside, by wrapping the stage's forward_one_chunk
and backward_one_chunk and with `saved_tensors_hooks` around each step:

- step time: the span from the first rank's start to the last rank's end (`perf_counter`: one clock on one host);
- idle share per stage: 1 - its time in forwards and backwards / that span, beside notebook 04's bubble
  (p - 1) / (m + p - 1), which assumes equal stages, free communication and a free host (none holds here: each
  micro-batch's send and receive, and other work on the 2 cores, add idle time that does not shrink with m);
- micro-batches in flight per stage (forwards done - backwards done, at most): m for GPipe, p - stage for 1F1B;
- peak activation memory per stage: bytes saved for backward and still live (parameters left out, a tensor saved
  twice counted once, from each step's start: stage 0 keeps the first step's shape pass on micro-batch 0 alive),
  and the 1F1B / GPipe ratio of the peaks beside the ratio of micro-batches in flight.

Goal: each stage's peak-memory ratio within 10% of its in-flight ratio (every micro-batch saves the same bytes, so
memory follows what is in flight; 0.0% off here). No goal for the step-time ratio: the bubble is the same, so about
1 is expected, but two ranks on 2 shared cores move it more than the schedule does (per-pair ratios 0.36 to 1.57,
medians 0.68 to 1.11, beside ceilings of 0.87 to 1.82). Runs A B A B ... and reports medians over pairs.

    .venv/bin/python benchmarks/pipeline.py [--pairs 3] [--steps 8] [--micro 2,4,8] [--width 1024] [--batch 256]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parents[1])  # not benchmarks/: its scripts would shadow packages

from course import devices, mpi  # noqa: E402

_spec = importlib.util.spec_from_file_location("machine", Path(__file__).resolve().parent / "machine.py")
machine = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(machine)
RANKS = 2  # = stages, p
LAYERS, CLASSES = 4, 10  # per stage: Linear(width, width) + ReLU blocks; the last stage ends in Linear(width, CLASSES)
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B"}
NAMES = {"gpipe": "GPipe", "1f1b": "1F1B"}
GOAL = 0.10  # peak-memory ratio within this fraction of the in-flight ratio
MB = 2**20


def stage_module(rank: int, size: int, width: int):
    """This rank's stage: LAYERS Linear + ReLU blocks, and the head on the last stage; float32, seeded."""
    import torch

    torch.manual_seed(rank)
    layers = [m for _ in range(LAYERS) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]
    if rank == size - 1:
        layers.append(torch.nn.Linear(width, CLASSES))
    return torch.nn.Sequential(*layers)


class Saved:
    """Bytes saved for backward and still live, and their peak: pack hands autograd a Packed, which adds its
    tensor's bytes and takes them off when autograd drops it. Parameters (by storage) are left out."""

    def __init__(self, parameters):
        self.skip = {p.untyped_storage().data_ptr() for p in parameters}
        self.refs: dict[tuple, int] = {}  # (address, elements, dtype) -> live saves: a tensor saved twice counts once
        self.live = self.peak = 0

    def pack(self, t):
        if t.is_meta or t.untyped_storage().data_ptr() in self.skip:
            return t  # no bytes (the stages' shape pass runs on meta tensors), or a parameter's
        return Packed(self, t)

    @staticmethod
    def unpack(packed):
        return packed.tensor if isinstance(packed, Packed) else packed

    def add(self, key, size: int) -> None:
        self.refs[key] = self.refs.get(key, 0) + 1
        if self.refs[key] == 1:
            self.live += size
            self.peak = max(self.peak, self.live)

    def drop(self, key, size: int) -> None:
        self.refs[key] -= 1
        if not self.refs[key]:
            del self.refs[key]
            self.live -= size


class Packed:
    """One tensor saved for backward, counted in `saved` while autograd holds this."""

    def __init__(self, saved: Saved, tensor):
        self.saved, self.tensor = saved, tensor
        self.key, self.size = (tensor.data_ptr(), tensor.numel(), tensor.dtype), tensor.numel() * tensor.element_size()
        saved.add(self.key, self.size)

    def __del__(self):
        self.saved.drop(self.key, self.size)


def record(stage, ran: list) -> None:
    """Wrap this stage's forward_one_chunk and backward_one_chunk (what the schedule calls): each call's
    (F or B, start, end) goes into `ran`."""

    def wrap(kind, original):
        def recorded(*args, **kwargs):
            begin = time.perf_counter()
            out = original(*args, **kwargs)
            ran.append((kind, begin, time.perf_counter()))
            return out

        return recorded

    stage.forward_one_chunk = wrap("F", stage.forward_one_chunk)
    stage.backward_one_chunk = wrap("B", stage.backward_one_chunk)


def most_in_flight(ran: list) -> int:
    """The most micro-batches run forward and not yet backward, at any point."""
    live = most = 0
    for kind, *_ in ran:
        live += 1 if kind == "F" else -1
        most = max(most, live)
    return most


def run_schedule(kind: str, micro: int, steps: int, batch: int, width: int) -> list[dict]:
    """On every rank: 1 + `steps` steps of `kind` with `micro` micro-batches; per timed step this stage's start,
    end, busy seconds, most in flight and peak saved bytes."""
    import torch
    import torch.distributed as dist
    from torch.distributed import pipelining

    rank, size = dist.get_rank(), dist.get_world_size()
    part = stage_module(rank, size, width)
    stage = pipelining.PipelineStage(part, rank, size, torch.device("cpu"))  # sends to rank + 1, receives from - 1
    loss = torch.nn.functional.cross_entropy
    schedule = getattr(pipelining, SCHEDULES[kind])(stage, micro, loss_fn=loss)
    ran: list = []
    record(stage, ran)
    saved = Saved(part.parameters())
    g = torch.Generator().manual_seed(0)
    steps_seen = []
    for n in range(1 + steps):
        # a new batch each step: no saved tensor shares an address with the shape pass's, which stage 0 keeps
        x, y = torch.randn(batch, width, generator=g), torch.randint(0, CLASSES, (batch,), generator=g)
        part.zero_grad()
        ran.clear()
        start = saved.peak = saved.live  # 0 unless something outlived the last step
        dist.barrier()  # the stages start each step together
        begin = time.perf_counter()
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
            if rank == 0:
                schedule.step(x)  # the first stage is given the batch, sends activations on
            else:
                schedule.step(target=y, losses=[])  # the last gets the targets, sends gradients back
        end = time.perf_counter()
        if n:  # the first step also exchanges shapes between stages
            busy = sum(b - a for _, a, b in ran)
            steps_seen.append({"begin": begin, "end": end, "busy": busy, "in_flight": most_in_flight(ran),
                               "peak": saved.peak - start})  # fmt: skip
    return steps_seen


def train(kind: str, steps: int, batch: int, width: int, micro: list[int]) -> None:
    """On every rank of a gloo group: each m in turn; rank 0 prints per m the step ms and per stage the idle
    share, most in flight and peak saved bytes (medians and maxima over the timed steps)."""
    import torch.distributed as dist

    summary = {}
    for m in micro:
        mine = run_schedule(kind, m, steps, batch, width)
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)  # rank 0 sees every stage's steps
        spans = [max(r[i]["end"] for r in every) - min(r[i]["begin"] for r in every) for i in range(steps)]
        summary[m] = {
            "step_ms": 1000 * statistics.median(spans),
            "idle": [statistics.median(1 - s["busy"] / span for s, span in zip(r, spans)) for r in every],
            "in_flight": [max(s["in_flight"] for s in r) for r in every],
            "peak": [max(s["peak"] for s in r) for r in every],
        }
    if dist.get_rank() == 0:
        print("SUMMARY " + json.dumps(summary), flush=True)


def run(kind: str, steps: int, batch: int, width: int, micro: list[int]) -> dict[int, dict]:
    """The SUMMARY of `mpiexec -n RANKS` one-thread ranks running `kind` for each m, keyed by m."""
    env = dict(mpi.env(), **devices.thread_env(1))
    args = ["--rank", kind, str(steps), str(batch), str(width), ",".join(map(str, micro))]
    done = subprocess.run(mpi.command(RANKS, sys.executable, __file__, *args), capture_output=True, text=True,
                          env=env, timeout=600)  # fmt: skip
    found = [line for line in done.stdout.splitlines() if line.startswith("SUMMARY ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"{kind} on {RANKS} ranks failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return {int(m): r for m, r in json.loads(found[-1].removeprefix("SUMMARY ")).items()}


def bubble(m: int, p: int = RANKS) -> float:
    """Notebook 04's idle share of a pipeline of p equal stages with m micro-batches."""
    return (p - 1) / (m + p - 1)


def expected_in_flight(kind: str, m: int, stage: int, p: int = RANKS) -> int:
    return m if kind == "gpipe" else p - stage


def median_of(runs: list[dict], key: str, stage: int | None = None) -> float:
    return statistics.median(r[key] if stage is None else r[key][stage] for r in runs)


def table(m: int, batch: int, by_kind: dict[str, list[dict]]) -> None:
    """Per m: GPipe and 1F1B side by side, medians over pairs."""
    print(f"m = {m} (micro-batches of {batch // m} rows); bubble formula (p - 1) / (m + p - 1) = {bubble(m):.2f}")
    head = "".join(f" | stage {s}: idle  in flight (exp.)  peak saved" for s in range(RANKS))
    print(f"  schedule  step ms{head}")
    for kind, runs in by_kind.items():
        cells = "".join(
            f" | {median_of(runs, 'idle', s):13.2f}  {median_of(runs, 'in_flight', s):9.0f} "
            f"({expected_in_flight(kind, m, s)})  {median_of(runs, 'peak', s) / MB:7.2f} MB"
            for s in range(RANKS)
        )
        print(f"  {NAMES[kind]:8}  {median_of(runs, 'step_ms'):7.1f}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per m, after one untimed")
    parser.add_argument("--micro", default="2,4,8", help="micro-batch counts m, each >= the 2 stages (1F1B)")
    parser.add_argument("--width", type=int, default=1024, help="Linear width (4 MB per layer at 1024)")
    parser.add_argument("--batch", type=int, default=256, help="samples per step, cut into m micro-batches")
    args = parser.parse_args()
    micro = [int(m) for m in args.micro.split(",")]
    print(f"{RANKS} stages of {LAYERS} x Linear({args.width}, {args.width}) + ReLU (float32), the last with a "
          f"Linear({args.width}, {CLASSES}) head; batch {args.batch}; {args.steps} timed steps per m", flush=True)  # fmt: skip
    results = {kind: {m: [] for m in micro} for kind in SCHEDULES}
    ceilings = []
    for pair in range(args.pairs):
        for kind in SCHEDULES:  # A B, A B, ...
            for m, r in run(kind, args.steps, args.batch, args.width, micro).items():
                results[kind][m].append(r)
        ceilings.append(machine.pair())
        ratios = ", ".join(f"m={m} {results['1f1b'][m][-1]['step_ms'] / results['gpipe'][m][-1]['step_ms']:.2f}"
                           for m in micro)  # fmt: skip
        print(f"pair {pair + 1}: 1F1B / GPipe step time {ratios}; ceiling {ceilings[-1]:.2f}", flush=True)
    for m in micro:
        table(m, args.batch, {kind: results[kind][m] for kind in SCHEDULES})
    summarize(results, micro, statistics.median(ceilings), args.pairs)


def summarize(results: dict, micro: list[int], ceiling: float, pairs: int) -> None:
    """The ratios 1F1B / GPipe: step time beside the ceiling, peak memory beside in flight, and the goal."""
    step = {m: statistics.median(b["step_ms"] / a["step_ms"] for a, b in zip(*(results[k][m] for k in SCHEDULES)))
            for m in micro}  # fmt: skip
    times = ", ".join(f"m={m} {step[m]:.2f}" for m in micro)
    print(f"1F1B / GPipe on {RANKS} stages, medians of {pairs} pair(s): step time {times}; expected about 1 (same "
          f"bubble), beside the ceiling {ceiling:.2f} (2 processes' speed-up over 1): no goal (see the docstring)",
          flush=True)  # fmt: skip
    worst = 0.0
    for m in micro:
        cells = []
        for s in range(RANKS):
            gpipe, onefb = (results[kind][m] for kind in SCHEDULES)
            memory = median_of(onefb, "peak", s) / median_of(gpipe, "peak", s)
            flight = median_of(onefb, "in_flight", s) / median_of(gpipe, "in_flight", s)
            worst = max(worst, abs(memory / flight - 1))
            cells.append(f"stage {s} {memory:.3f} (in flight {flight:.3f}, (p - s) / m {(RANKS - s) / m:.3f})")
        print(f"1F1B / GPipe peak saved bytes, m={m}: " + "; ".join(cells))
    verdict = "met" if worst <= GOAL else "NOT met"
    print(f"goal: every peak-memory ratio within {GOAL:.0%} of its in-flight ratio: worst {worst:.1%}: {verdict}")


if __name__ == "__main__":
    if "--rank" in sys.argv:
        from course.checks.ddp import in_gloo_group

        kind, steps, batch, width, micro = sys.argv[sys.argv.index("--rank") + 1 :][:5]
        in_gloo_group(train, (kind, int(steps), int(batch), int(width), [int(m) for m in micro.split(",")]))
    else:
        main()
