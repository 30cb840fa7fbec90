"""Notebook 12's checks: what torch.distributed's collectives leave on each rank, a DDP training loop, and gradient
accumulation with `no_sync`. Each runs the answer on real ranks of a gloo group (the notebook's engines, or a new
`mpiexec` job that forms one: `on_gloo_ranks`) and measures it from outside: the samples the check's own dataset
handed out, the all-reduces a communication hook the check installs saw, the weights against one process's.

    seen, problem = deadline.gather(view, ddp.collectives_seen)   # on the engines, a group formed by course.torch_group
    problem or ddp.collectives(after, seen)                         # -> what is wrong, or None
"""

from __future__ import annotations

import math

from course import comm
from course.torch_data import regression, small_model
from course.checks import check, expect

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
TOLERANCE = 1e-9  # float64 throughout: DDP's average and one process's differ only by rounding
GLOO_TIMEOUT = 60  # s a rank of on_gloo_ranks waits for its peers in a collective before it raises
# s a gloo job may run once its ranks started: importing torch and forming the group take seconds, 20-40 on a
# loaded machine (comm.on_ranks' 20 s were seen too short in CI); a hung answer still fails within it
GLOO_RUN_TIMEOUT = 120


def on_gloo_ranks(function, ranks: int, *args, timeout: float = GLOO_RUN_TIMEOUT) -> list:
    """`function(*args)` on every rank of a new gloo group of `ranks` processes (an `mpiexec` job: what
    `course.comm.on_ranks` says of failures and time limits holds); the results, by rank."""
    return comm.on_ranks(in_gloo_group, ranks, function, args, timeout=timeout)


def in_gloo_group(function, args: tuple = ()):
    """On every rank of an MPI job: `function(*args)` in a gloo group of the job's ranks, destroyed after. Rank 0
    opens the rendezvous store on a port the system picks (no race with other jobs) and tells the others by MPI."""
    import datetime

    import torch
    import torch.distributed as dist
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    timeout = datetime.timedelta(seconds=GLOO_TIMEOUT)
    store = None
    if world.rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world.size, is_master=True, timeout=timeout, wait_for_workers=False)
    port = world.bcast(store.port if store else None)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, world.size, is_master=False, timeout=timeout)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=store, rank=world.rank, world_size=world.size, timeout=timeout)
    try:
        return function(*args)
    finally:
        dist.destroy_process_group()


# ---- exercise: what each collective leaves on each rank


def start_values(rank: int, size: int) -> list[float]:
    """What rank `rank` of `size` holds before each collective: size values, 10 * rank + 0, 1, ..."""
    return [10.0 * rank + i for i in range(size)]


def collectives_seen() -> dict[str, list[float]]:
    """On every rank of a group: what each collective of OPS left on this rank, each starting from start_values."""
    import torch
    import torch.distributed as dist

    rank, size = dist.get_rank(), dist.get_world_size()

    def start():
        return torch.tensor(start_values(rank, size), dtype=torch.float64)

    summed = start()
    dist.all_reduce(summed)
    mine = torch.empty(1, dtype=torch.float64)
    dist.reduce_scatter_single(mine, start())
    gathered = torch.empty(size * size, dtype=torch.float64)
    dist.all_gather_single(gathered, start())
    sent = start()
    dist.broadcast(sent, src=0)
    return {"all_reduce": summed.tolist(), "reduce_scatter": mine.tolist(), "all_gather": gathered.tolist(),
            "broadcast": sent.tolist()}  # fmt: skip


@check
def collectives(after, seen: list[dict]) -> None:
    """`after(op, rank, size)`: the values the learner predicts rank `rank` holds after `op`, against `seen`, what
    the collectives really left on each rank of a group of len(seen)."""
    size = len(seen)
    for op in OPS:
        for rank, held in enumerate(seen):
            really = held[op]
            try:
                predicted = [float(v) for v in after(op, rank, size)]
            except NotImplementedError:
                raise
            except (TypeError, ValueError):
                expect(False, f"after({op!r}, {rank}, {size}) should return a list of numbers")
            expect(
                len(predicted) == len(really),
                f"after {op} on {size} ranks, rank {rank} holds {len(really)} value(s), not {len(predicted)}",
            )
            differ = [i for i, (p, r) in enumerate(zip(predicted, really)) if p != r]
            expect(
                not differ,
                f"after {op} on {size} ranks, rank {rank} does not hold what you predict: its value at position "
                f"{differ[0] if differ else 0} differs",
            )


# ---- exercises: DDP's training loop, and accumulation with no_sync


class Recorded:
    """A dataset that writes down which samples this process drew, in order (`draws`): the check's own record."""

    def __init__(self, dataset):
        self.dataset, self.draws = dataset, []

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index):
        self.draws.append(int(index))
        return self.dataset[index]


def _counting_hook(state: dict, bucket):
    """DDP's all-reduce of one bucket (as its default hook does), counted: the check's own view of what was sent."""
    import torch.distributed.distributed_c10d as c10d

    state["buckets"] += 1
    state["steps"] += int(bucket.is_last())
    state["bytes"] += bucket.buffer().numel() * bucket.buffer().element_size()
    tensor = bucket.buffer().div_(c10d.get_world_size())
    return c10d.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])


def _watched(run):
    """run() with torch.distributed.all_reduce counted (the answer's own, not DDP's); (its result, the count)."""
    import torch.distributed as dist

    original, own = dist.all_reduce, []

    def counted(*args, **kwargs):
        own.append(1)
        return original(*args, **kwargs)

    dist.all_reduce = counted
    try:
        return run(), len(own)
    finally:
        dist.all_reduce = original


def _flat(model):
    import torch

    module = getattr(model, "module", model)
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()]).tolist()


def ddp_run(wrap, train, n: int, epochs: int, batch: int, lr: float) -> dict:
    """On every rank of a group: wrap() the check's model, install the counting hook, train() on the check's
    recorded dataset; what the rank drew, what DDP all-reduced, the weights."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dataset = Recorded(regression(n))
    model = wrap(small_model())
    if not isinstance(model, DistributedDataParallel):
        return {"wrapped": type(model).__name__}
    state = {"buckets": 0, "steps": 0, "bytes": 0}
    model.register_comm_hook(state, _counting_hook)
    _, own = _watched(lambda: train(model, dataset, epochs, batch, lr))
    return {"wrapped": "", "rank": dist.get_rank(), "draws": dataset.draws, "hook": state, "own_all_reduces": own,
            "weights": _flat(model)}  # fmt: skip


def one_process(batches: list[list[int]], n: int, lr: float, momentum: float = 0.0) -> list[float]:
    """One process: SGD (plain, or with `momentum`) from small_model()'s weights on the samples of each global
    batch, averaged over the batch."""
    import torch

    data, model = regression(n), small_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for batch in batches:
        x = torch.stack([data[i][0] for i in batch])
        y = torch.stack([data[i][1] for i in batch])
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return _flat(model)


def _batches(per_rank: list[list[int]], local: int) -> list[list[int]]:
    """The global batches: step s takes the s-th run of `local` draws of every rank."""
    steps = max(math.ceil(len(d) / local) for d in per_rank)
    return [[i for d in per_rank for i in d[s * local : (s + 1) * local]] for s in range(steps)]


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and max((abs(x - y) for x, y in zip(a, b)), default=0.0) <= TOLERANCE * (
        1 + max(map(abs, b), default=0.0)
    )


@check
def ddp_training(runs: list[dict], n: int, epochs: int, batch: int, lr: float) -> None:
    """`runs`: ddp_run on every rank. The ranks drew disjoint shards, another order each epoch; DDP's hook all-reduced
    once per bucket per step and the answer nothing itself; the weights are one process's on the global batches."""
    size = len(runs)
    expect(not runs[0]["wrapped"], f"wrap() returned a {runs[0]['wrapped']}, not a DistributedDataParallel model")
    share, local = math.ceil(n / size), batch // size
    for r in runs:
        expect(
            len(r["draws"]) == epochs * share,
            f"on {size} ranks, {epochs} epoch(s) of {n} samples, rank {r['rank']} drew {len(r['draws'])} samples, "
            f"not {epochs * share}: each rank should train on its own 1/{size} of the data each epoch",
        )
    epochs_of = [[r["draws"][e * share : (e + 1) * share] for r in runs] for e in range(epochs)]
    for e, drawn in enumerate(epochs_of):
        expect(
            len({i for d in drawn for i in d}) == n,
            f"in epoch {e} the ranks together drew {len({i for d in drawn for i in d})} of the {n} samples: "
            "their shards overlap",
        )
    if epochs > 1:
        expect(
            epochs_of[0][0] != epochs_of[1][0],
            "rank 0 drew its samples in the same order in epochs 0 and 1: the shuffle does not change per epoch",
        )
    steps = epochs * math.ceil(share / local)
    for r in runs:
        expect(r["own_all_reduces"] == 0, f"rank {r['rank']} called all_reduce itself: DDP averages the gradients")
        hook = r["hook"]
        expect(
            hook["steps"] == steps,
            f"rank {r['rank']}: DDP all-reduced gradients in {hook['steps']} backward passes, not {steps} "
            f"({epochs} epoch(s) of {math.ceil(share / local)} steps, {local} samples per rank per step)",
        )
    batches = [b for drawn in epochs_of for b in _batches(drawn, local)]
    _as_one_process(
        runs,
        batches,
        n,
        lr,
        f"after training differ from one process's trained on the same global batches of {batch} "
        "(the gradient of the mean loss over each global batch)",
    )


def _as_one_process(runs: list[dict], batches: list[list[int]], n: int, lr: float, differ: str) -> None:
    """Every rank's weights are one process's on `batches`; else "rank r's weights " + `differ`."""
    reference = one_process(batches, n, lr)
    for r in runs:
        expect(_close(r["weights"], reference), f"rank {r['rank']}'s weights {differ}")


def accumulation_run(accumulate, n: int, micro: int, k: int, lr: float) -> dict:
    """On every rank of a group: one epoch of accumulate() on a DDP model of the check's, its DataLoader of
    `micro` samples per rank over a DistributedSampler, and plain SGD; as ddp_run, what happened."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler

    dataset = Recorded(regression(n))
    model = DistributedDataParallel(small_model())
    state = {"buckets": 0, "steps": 0, "bytes": 0}
    model.register_comm_hook(state, _counting_hook)
    loader = DataLoader(dataset, batch_size=micro, sampler=DistributedSampler(dataset, shuffle=True, seed=0))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    _, own = _watched(lambda: accumulate(model, loader, optimizer, k))
    return {"rank": dist.get_rank(), "draws": dataset.draws, "hook": state, "own_all_reduces": own,
            "weights": _flat(model)}  # fmt: skip


@check
def accumulation(runs: list[dict], n: int, micro: int, k: int, lr: float) -> None:
    """`runs`: accumulation_run on every rank (micro-batches a multiple of k). One all-reduce per optimizer step;
    the weights of one process stepping once per k micro-batches of every rank."""
    size = len(runs)
    share = math.ceil(n / size)
    micro_batches = math.ceil(share / micro)
    steps = micro_batches // k
    for r in runs:
        expect(r["own_all_reduces"] == 0, f"rank {r['rank']} called all_reduce itself: DDP averages the gradients")
        expect(
            r["hook"]["steps"] == steps,
            f"rank {r['rank']}: DDP all-reduced gradients in {r['hook']['steps']} of the {micro_batches} backward "
            f"passes; with {k} micro-batches per step, once per optimizer step ({steps}) is enough",
        )
    batches = _batches([r["draws"] for r in runs], micro * k)
    _as_one_process(
        runs,
        batches,
        n,
        lr,
        f"differ from one process's stepping once on each batch of {k} x {micro} x {size} "
        "samples (the gradient of the mean loss over them)",
    )


# ---- exercise: Horovod's steps and DDP's, side by side

SIDE_BY_SIDE_KEY = {  # Horovod's steps (notebook 07) -> the letter of DDP's; python -m course.checks.quiz Q A
    "start": "a6a25acf8067cb9c13a63a30f84c33b9336a6eba200b85265a7b12fdccf9133e",
    "gpu": "3c2dad119f69207e681025be58071841137f37a8adf227689cb9a17e216d287e",
    "shard": "c8292224fb4c81b774501fe0ec33aed2810a3452010eff19a018d2bff4e24bd9",
    "average": "6bba3f872ba8fe4c3c9c63a3cd1f749534e13404d97f22a9e043ad6f03c922a3",
    "same start": "902bfcdc0cefb6176a7dc25dcc2bf3ac1466e6c26e6aa21377ac9adf69c0dae6",
    "outputs": "d2756bd6aaed0b6fa58a280d20d87f71012ec141b663bb015c9da48fe219461f",
    "launcher": "aba6b301ee327d8bc15c1d9f67fefb21431c54763130e7bdb1112887919693fa",
}
SIDE_BY_SIDE_WHY = {  # shown for a row once its answer is right
    "start": "init_process_group forms the group as hvd.init() does: every rank meets at the rendezvous.",
    "gpu": "One GPU per process, chosen by the rank on this node: LOCAL_RANK, which torchrun sets.",
    "shard": "DistributedSampler gives each rank its 1/N of the samples; set_epoch reshuffles as shard + shuffle do.",
    "average": "DDP all-reduces and averages the gradients during backward(), as Horovod's optimizer wrapper does.",
    "same start": "DDP's constructor broadcasts rank 0's parameters and buffers: no callback is needed.",
    "outputs": "One rank writes, as in Horovod: files, logs and checkpoints on rank 0.",
    "launcher": "torchrun starts the processes of a node and sets RANK, LOCAL_RANK and WORLD_SIZE, as horovodrun does.",
}


# ---- exercise: which gradients DDP all-reduces together


def bucket_run(widths: tuple[int, ...], cap_mb: float, bias: bool = True) -> dict:
    """On every rank of a group: a chain of Linear layers (float32) of `widths` in DDP with `bucket_cap_mb=cap_mb`,
    two steps. Of the second (DDP rebuilds its buckets after the first): the order the gradients became ready, each
    bucket's parameters as DDP all-reduced them, and when (s after the backward pass began) each event happened."""
    import time

    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    layers = [torch.nn.Linear(a, b, bias=bias) for a, b in zip(widths, widths[1:])]
    model = DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=cap_mb)
    names = {id(p): n for n, p in model.module.named_parameters()}
    seen: dict = {"ready": [], "buckets": [], "began": 0.0}

    def on_ready(param):
        seen["ready"].append((names[id(param)], param.numel() * param.element_size(), time.perf_counter()))

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(on_ready)

    def timed_all_reduce(state, bucket):
        seen["buckets"].append(([names[id(p)] for p in bucket.parameters()], time.perf_counter()))
        return _counting_hook(state, bucket)

    model.register_comm_hook({"buckets": 0, "steps": 0, "bytes": 0}, timed_all_reduce)
    x = torch.randn(8, widths[0])
    for _ in range(2):
        seen["ready"].clear(), seen["buckets"].clear()
        model.zero_grad()
        loss = model(x).square().mean()
        seen["began"] = time.perf_counter()
        loss.backward()
        seen["ended"] = time.perf_counter()
    t0 = seen["began"]
    return {
        "ready": [(n, size) for n, size, _ in seen["ready"]],
        "ready_at": [t - t0 for _, _, t in seen["ready"]],
        "buckets": [b for b, _ in seen["buckets"]],
        "launched_at": [t - t0 for _, t in seen["buckets"]],
        "backward_s": seen["ended"] - t0,
    }


# (widths, bucket_cap_mb, bias, hidden): chains of 256 KiB layers cut by caps around them, a weight exactly the cap
# (a bucket closes when it reaches it) and a byte short of it, a cap below one parameter, one bucket for all, layers of unequal sizes.
BUCKET_CASES = [
    ((256,) * 7, 0.5, True, False),
    ((256,) * 7, 0.25, False, False),
    ((256,) * 5, 262145 / 2**20, False, False),  # a byte above a weight: the next weight joins its bucket, twice
    ((256,) * 7, 0.1, True, False),
    ((256,) * 7, 25.0, True, False),
    ((64, 512, 512, 10), 1.0, True, False),
    ((48, 300, 200, 300, 48), 0.3, True, True),
    ((128,) * 5, 0.125, False, True),
]


def bucket_runs(cases: list[tuple]) -> list[dict]:
    """On every rank of a group: bucket_run for each case, in order."""
    return [bucket_run(widths, cap, bias) for widths, cap, bias, _ in cases]


@check
def buckets(predict, cases: list[tuple], runs: list[dict]) -> None:
    """`predict(ready, cap_bytes)`: the buckets (lists of parameter names) DDP builds for gradients ready in the
    order `ready` ((name, bytes) pairs), against what it built (rank 0's `bucket_runs` of `cases`)."""
    for (widths, cap, bias, _), run in zip(cases, runs):
        cap_bytes = int(cap * 2**20)
        model = f"Linear layers of widths {widths}{'' if bias else ' without biases'}, bucket_cap_mb={cap}"
        try:
            predicted = [list(b) for b in predict(list(run["ready"]), cap_bytes)]
        except TypeError:
            expect(False, f"{model}: predict(ready, {cap_bytes}) should return a list of lists of names")
        really = run["buckets"]
        expect(
            len(predicted) == len(really),
            f"{model}: DDP built {len(really)} bucket(s), you predict {len(predicted)}",
        )
        wrong = next((i for i, (p, r) in enumerate(zip(predicted, really)) if p != r), None)
        expect(wrong is None, f"{model}: bucket {wrong} does not hold the parameters you predict, in that order")
