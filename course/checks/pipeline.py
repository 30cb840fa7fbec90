"""Notebook 13 (part 2)'s checks of pipeline schedules with `torch.distributed.pipelining`: a learner's schedule
built and stepped on every rank of a gloo group (one stage per rank), measured from outside: the forward and
backward of each micro-batch each stage ran, in order and with their times (the stage's `forward_one_chunk` and
`backward_one_chunk` wrapped by the check: the schedule's own `pipeline_order` is not a record of what ran), the
micro-batches in flight, the idle share of the step, and the losses and gradients against one process's.

    runs, problem = deadline.gather(view, pipeline.pipeline_run, make_schedule, step, "Schedule1F1B", 4)
    problem or pipeline.schedule(runs, 4)                    # ex-schedule: -> what is wrong, or None
    pipeline.in_flight_predicted(in_flight, measured)        # ex-in-flight
"""

from __future__ import annotations

import time

from course.checks import check, expect

WIDTH, LAYERS, BATCH = 16, 4, 16
FORWARD_S = 0.02  # each stage sleeps this long per micro-batch forward, twice backward: compute, not 2 cores, rules
TOLERANCE = 1e-5  # float32: the micro-batches' gradients add up in another order (3e-8 seen)
GROUP_TIMEOUT = 20  # s a stage waits for its peer: a wrong answer fails within the engines' deadline


def check_model():
    """LAYERS blocks (Linear + Tanh) and a one-output head, float32, the same weights wherever it is made."""
    import torch

    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(LAYERS)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 1))


def data():
    """The step's batch: BATCH inputs and targets."""
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, 1, generator=g)


def stage_modules(size: int) -> list:
    """check_model() cut into `size` consecutive parts, each ending in a module that sleeps (compute time)."""
    import torch

    layers = list(check_model())
    cuts = [round(i * len(layers) / size) for i in range(size + 1)]
    return [torch.nn.Sequential(*layers[a:b], _slow()) for a, b in zip(cuts, cuts[1:])]


def _slow():
    """A module standing in for a stage's compute: it passes its input through, sleeping FORWARD_S forward and
    twice that backward."""
    import torch

    class Sleep(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            time.sleep(FORWARD_S)
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            time.sleep(2 * FORWARD_S)
            return g

    class Slow(torch.nn.Module):
        def forward(self, x):
            return Sleep.apply(x)

    return Slow()


def _recording(ran: list, started: list):
    """Wrap the stage class's forward_one_chunk and backward_one_chunk: each call's (F or B, micro-batch, start,
    end) goes into `ran`, seconds since started[0]. Returns a function that puts them back."""
    from torch.distributed.pipelining import stage as stages

    base = stages._PipelineStageBase
    originals = base.forward_one_chunk, base.backward_one_chunk

    def wrap(kind, original):
        def recorded(self, chunk, *args, **kwargs):
            begin = time.perf_counter() - started[0]
            out = original(self, chunk, *args, **kwargs)
            ran.append((kind, chunk, begin, time.perf_counter() - started[0]))
            return out

        return recorded

    base.forward_one_chunk, base.backward_one_chunk = wrap("F", originals[0]), wrap("B", originals[1])

    def restore():
        base.forward_one_chunk, base.backward_one_chunk = originals

    return restore


def _stages_talk_over(group):
    """Make every PipelineStage built until the returned function is called send over `group`, a group of its own:
    a wrong answer that leaves a stage waiting breaks that group, not the engines' own."""
    from torch.distributed.pipelining import stage as stages

    original = stages.PipelineStage.__init__

    def init(self, *args, **kwargs):
        if len(args) < 7:  # the learner did not give a group
            kwargs.setdefault("group", group)
        original(self, *args, **kwargs)

    stages.PipelineStage.__init__ = init
    return lambda: setattr(stages.PipelineStage, "__init__", original)


def pipeline_run(make_schedule, step, schedule_name: str, microbatches: int) -> dict:
    """On every rank: `make_schedule(stage_module, rank, size, schedule_class, microbatches)` for this rank's part of
    the check's model, then `step(schedule, rank, size, x, y)` twice (the first also sends shapes between stages);
    what ran on the second, when, the losses `step` returned and this stage's gradients."""
    import torch.distributed as dist
    from torch.distributed import pipelining

    import datetime

    rank, size = dist.get_rank(), dist.get_world_size()
    part = stage_modules(size)[rank]
    ran: list = []
    started = [time.perf_counter()]  # CLOCK_MONOTONIC: one clock for every rank of this host
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    restores = [_recording(ran, started), _stages_talk_over(group)]
    run = {"rank": rank, "error": None}
    try:
        schedule = make_schedule(part, rank, size, getattr(pipelining, schedule_name), microbatches)
        x, y = data()
        for _ in range(2):
            part.zero_grad()
            ran.clear()
            dist.barrier(group)
            begin = time.perf_counter() - started[0]
            losses = step(schedule, rank, size, x, y)  # each stage's sends and receives go over `group`
            run["step"] = (begin, time.perf_counter() - started[0])
    except Exception as failed:  # noqa: BLE001 - the learner's schedule failing is what the check tells
        run["error"] = f"{type(failed).__name__}: {str(failed).splitlines()[0][:300]}"
        return run
    finally:
        for restore in restores:
            restore()
        dist.destroy_process_group(group)
    run["ran"] = list(ran)
    run["losses"] = [float(v) for v in losses] if isinstance(losses, (list, tuple)) else None
    run["grads"] = [p.grad.reshape(-1).tolist() if p.grad is not None else None for p in part.parameters()]
    return run


def pipeline_runs(make_schedule, step, cases: list[tuple[str, int]]) -> list[dict]:
    """On every rank: pipeline_run for each (schedule name, micro-batches) in turn (one job for several)."""
    return [pipeline_run(make_schedule, step, name, micro) for name, micro in cases]


def one_process(size: int, microbatches: int) -> tuple[list[float], list[list]]:
    """One process: each micro-batch's loss, and the gradients of the mean of them, cut by stage as the runs are."""
    import torch

    model = check_model()
    x, y = data()
    losses = [torch.nn.functional.mse_loss(model(a), b) for a, b in zip(x.chunk(microbatches), y.chunk(microbatches))]
    (sum(losses) / microbatches).backward()
    layers = list(model)
    cuts = [round(i * len(layers) / size) for i in range(size + 1)]
    grads = [[p.grad.reshape(-1).tolist() for m in layers[a:b] for p in m.parameters()] for a, b in zip(cuts, cuts[1:])]
    return [float(v.detach()) for v in losses], grads


def most_in_flight(ran: list) -> int:
    """The most micro-batches a stage had run forward and not yet backward, at any point."""
    live, most = 0, 0
    for kind, *_ in ran:
        live += 1 if kind == "F" else -1
        most = max(most, live)
    return most


def idle_share(runs: list[dict], rank: int) -> float:
    """1 - the time rank `rank` spent in forward and backward over the pipeline's step (first start to last end)."""
    span = max(r["step"][1] for r in runs) - min(r["step"][0] for r in runs)
    return 1 - sum(end - begin for _, _, begin, end in runs[rank]["ran"]) / span


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= TOLERANCE * (1 + abs(y)) for x, y in zip(a, b))


@check
def schedule(runs: list[dict], microbatches: int) -> None:
    """`runs`: pipeline_run on every rank. Every stage ran each micro-batch forward and backward once; the last
    stage's losses and every stage's gradients one process's."""
    failed = sorted((r for r in runs if r["error"]), key=lambda r: "Connection closed" in r["error"])
    expect(not failed, f"on rank {failed and failed[0]['rank']}: {failed and failed[0]['error']}")
    size = len(runs)
    for r in runs:
        for kind, word in (("F", "forward"), ("B", "backward")):
            done = sorted(c for k, c, *_ in r["ran"] if k == kind)
            expect(
                done == list(range(microbatches)),
                f"stage {r['rank']} ran {word} on micro-batches {done}, not each of the {microbatches} once",
            )
    want_losses, want_grads = one_process(size, microbatches)
    last = runs[-1]["losses"]
    expect(
        last is not None and _close(last, want_losses),
        f"the last stage's losses are {last}, not one per micro-batch as one process computes them "
        "(the last stage is given the targets, and a list to put the losses in)",
    )
    for r in runs:
        got = r["grads"]
        ok = all(g is not None and _close(g, w) for g, w in zip(got, want_grads[r["rank"]]))
        expect(ok, f"stage {r['rank']}'s gradients differ from one process's on the same micro-batches")


@check
def in_flight_predicted(in_flight, measured: dict[tuple[str, int, int, int], int]) -> None:
    """`measured`: (schedule, stage, stages, micro-batches) -> the most micro-batches in flight, as run."""
    for (name, stage, stages, micro), most in sorted(measured.items()):
        said = in_flight(name, stage, stages, micro)
        expect(
            said == most,
            f"{name} with {stages} stages and {micro} micro-batches: stage {stage} had {most} micro-batches in "
            f"flight at most, not {said}",
        )
