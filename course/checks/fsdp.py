"""Notebook 13's checks of FSDP2: a learner's `shard(model, mesh)` applied to the check's model on every rank of a
gloo group, then measured from outside: the bytes of each parameter and of Adam's state each rank holds (the
DTensors' local shards), the whole parameters it holds between forward and backward, the all-gathers and
reduce-scatters of each step (`course.torch_collectives`), and the weights after a few steps against one process's.

    runs, problem = deadline.gather(view, fsdp.shard_run, shard)   # on the engines, a group of course.torch_group
    problem or fsdp.sharded(runs)                                  # ex-fsdp: -> what is wrong, or None
    fsdp.shard_check(shard, ranks=3)                               # the same on a new gloo job of 3 ranks
"""

from __future__ import annotations

import math

from course.checks import check, expect

LAYERS, WIDTH, BATCH, STEPS, LR = 4, 33, 8, 3, 0.05  # WIDTH odd: dim-0 shards are uneven, as FSDP2 pads them
TOLERANCE = 1e-9  # float64 throughout: sharded Adam and one process's differ only by rounding (1e-15 seen)


def check_model():
    """LAYERS blocks (Linear + Tanh) and a one-output head, float64, the same weights wherever it is made."""
    import torch

    torch.manual_seed(0)
    blocks = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()) for _ in range(LAYERS)]
    return torch.nn.Sequential(*blocks, torch.nn.Linear(WIDTH, 1)).double()


def model_bytes() -> int:
    """The check model's parameter bytes, whole."""
    return sum(p.numel() * p.element_size() for p in check_model().parameters())


def batch(step: int, rank: int, size: int):
    """Rank `rank`'s BATCH samples of step `step`'s global batch of BATCH * size."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(BATCH * size, WIDTH, generator=g, dtype=torch.float64)
    y = torch.randn(BATCH * size, 1, generator=g, dtype=torch.float64)
    return x[rank * BATCH : (rank + 1) * BATCH], y[rank * BATCH : (rank + 1) * BATCH]


def _local_bytes(t) -> int:
    from torch.distributed.tensor import DTensor

    local = t.to_local() if isinstance(t, DTensor) else t
    return local.numel() * local.element_size()


def _full(t):
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().reshape(-1)


def _holdings(model) -> dict:
    from torch.distributed.tensor import DTensor

    return {
        name: {"dtensor": isinstance(p, DTensor), "local": _local_bytes(p), "rows": p.shape[0],
               "row_bytes": math.prod(p.shape[1:]) * p.element_size()}
        for name, p in model.named_parameters()
    }  # fmt: skip


def shard_run(shard, reshard: bool | None = None) -> dict:
    """On every rank of a group: shard(check_model(), a 1-D CPU mesh of the group), then STEPS of Adam on this
    rank's part of each global batch; what the rank holds, each phase's collectives, the full weights.
    `reshard` True or False sets `reshard_after_forward` on every FSDP module after `shard` (None leaves it)."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    model = check_model()
    returned = shard(model, init_device_mesh("cpu", (size,)))
    model = returned if isinstance(returned, torch.nn.Module) else model  # fully_shard works in place, too
    if reshard is not None and isinstance(model, FSDPModule):
        model.set_reshard_after_forward(reshard)
    params = _holdings(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    steps = []
    for step in range(STEPS):
        x, y = batch(step, rank, size)
        with Collectives() as forward:
            loss = torch.nn.functional.mse_loss(model(x), y)
        # whole parameters held between forward and backward: the registered ones that are not DTensors now
        held = sum(p.numel() * p.element_size() for p in model.parameters() if not isinstance(p, DTensor))
        with Collectives() as backward:
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        steps.append({"forward": forward.seen, "backward": backward.seen, "held": held})
    names = {id(p): n for n, p in model.named_parameters()}
    state = {
        names[id(p)]: sum(_local_bytes(v) for v in s.values() if isinstance(v, torch.Tensor) and v.dim() > 0)
        for p, s in optimizer.state.items()
    }
    weights = torch.cat([_full(p) for p in model.parameters()]).tolist()
    return {"rank": rank, "params": params, "state": state, "steps": steps, "weights": weights}


def shard_runs(shards: list) -> list[dict]:
    """On every rank of a group: shard_run for each answer, in order (one job for several answers)."""
    return [shard_run(s) for s in shards]


def one_process(size: int) -> list[float]:
    """One process: Adam from check_model()'s weights on each global batch of BATCH * size samples."""
    import torch

    model = check_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    for step in range(STEPS):
        xs, ys = zip(*(batch(step, r, size) for r in range(size)))
        torch.nn.functional.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def _close(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and max((abs(x - y) for x, y in zip(a, b)), default=0.0) <= TOLERANCE * (
        1 + max(map(abs, b), default=0.0)
    )


def _count(calls: list, kind: str) -> int:
    return sum(k == kind for k, _ in calls)


def _shards(runs: list[dict]) -> None:
    size, first = len(runs), runs[0]
    whole = [name for name, p in first["params"].items() if not p["dtensor"]]
    expect(
        not whole,
        f"parameter {whole[0] if whole else ''} is a whole tensor on every rank, not a DTensor sharded over the "
        "mesh: fully_shard never reached the module that holds it",
    )
    for name, p in first["params"].items():
        share = math.ceil(p["rows"] / size) * p["row_bytes"]
        held = [r["params"][name]["local"] for r in runs]
        big = next((r for r, b in enumerate(held) if b > share), 0)
        expect(
            held[big] <= share,
            f"rank {big} holds {held[big]} bytes of {name}, more than its share ({share} bytes: {p['rows']} rows "
            f"over {size} ranks)",
        )
        expect(
            sum(held) == p["rows"] * p["row_bytes"],
            f"the ranks' shards of {name} add up to {sum(held)} bytes, not its {p['rows'] * p['row_bytes']}",
        )
        for r in runs:
            expect(
                r["state"].get(name, 0) <= 2 * share,
                f"rank {r['rank']} holds {r['state'].get(name, 0)} bytes of Adam's state for {name}, more than two "
                f"shards' worth ({2 * share})",
            )


def _traffic(runs: list[dict], own_bytes: int) -> None:
    groups = LAYERS + 1  # each block, and the head
    for s, step in enumerate(runs[0]["steps"]):
        gathers = [b for k, b in step["forward"] if k == "all_gather"]
        expect(
            len(gathers) != 1,
            f"step {s}'s forward all-gathered once, {gathers[0] if gathers else 0} bytes: the whole model at once, "
            "so every rank held all of it while it ran. Each block should be gathered just before it runs",
        )
        expect(
            len(gathers) >= groups,
            f"step {s}'s forward all-gathered {len(gathers)} times, fewer than once per block and once for the "
            f"head ({groups})",
        )
        scatters = _count(step["backward"], "reduce_scatter")
        expect(
            scatters >= groups,
            f"step {s}'s backward reduce-scattered gradients {scatters} times, not once per block and for the head",
        )
        reduced = _count(step["forward"] + step["backward"], "all_reduce")
        expect(reduced == 0, f"step {s} all-reduced {reduced} time(s): FSDP reduce-scatters, nothing is all-reduced")
    for r in runs:
        held = max(step["held"] for step in r["steps"])
        expect(
            held <= own_bytes,
            f"between forward and backward rank {r['rank']} held {held} bytes of whole parameters, more than the "
            f"model's own head ({own_bytes} bytes): the blocks' weights stayed gathered after they ran (keep "
            "fully_shard's default resharding)",
        )


@check
def sharded(runs: list[dict]) -> None:
    """`runs`: shard_run on every rank. Every parameter a DTensor of which each rank holds at most its share (dim-0
    shards, padding allowed), Adam's state as sharded; per step one all-gather per block (and the head) in forward,
    one reduce-scatter each in backward, no all-reduce, no block held whole after it ran; one process's weights."""
    _shards(runs)
    head = check_model()[-1]
    _traffic(runs, sum(p.numel() * p.element_size() for p in head.parameters()))
    reference = one_process(len(runs))
    for r in runs:
        expect(
            _close(r["weights"], reference),
            f"rank {r['rank']}'s weights after {STEPS} Adam steps differ from one process's on the same global "
            f"batches of {BATCH * len(runs)}",
        )


def shard_check(shard, ranks: int = 2) -> str | None:
    """shard_run on a new gloo job of `ranks` processes, judged by `sharded`; an answer that fails on a rank is
    told in words too."""
    from course.checks.ddp import on_gloo_ranks

    try:
        runs = on_gloo_ranks(shard_run, ranks, shard)
    except AssertionError as failed:
        return f"your shard failed: {failed}"
    return sharded(runs)


def traffic(run: dict) -> dict:
    """One rank's run in a step's terms: all-gathers forward and backward, bytes all-gathered and reduce-scattered
    (the whole tensors), and the whole parameter bytes held between forward and backward; the last step's."""
    step = run["steps"][-1]
    return {
        "gathers forward": _count(step["forward"], "all_gather"),
        "gathers backward": _count(step["backward"], "all_gather"),
        "bytes gathered": sum(b for k, b in step["forward"] + step["backward"] if k == "all_gather"),
        "bytes reduce-scattered": sum(b for k, b in step["backward"] if k == "reduce_scatter"),
        "held after forward": step["held"],
    }


def reshard_runs(shard) -> dict[bool, dict]:
    """On every rank: shard_run with reshard_after_forward True, then False; each as `traffic` says."""
    return {flag: traffic(shard_run(shard, reshard=flag)) for flag in (True, False)}
