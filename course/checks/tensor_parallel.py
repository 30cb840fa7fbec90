"""Notebook 13 (part 2)'s checks of tensor and sequence parallelism with DTensor: a learner's `parallelize(block,
mesh)` applied to the check's MLP block (notebook 09's Megatron block, with a LayerNorm before it for sequence
parallelism) on every rank of a gloo group, then measured from outside: what each rank holds of each weight, the
collectives of forward and of backward (`course.torch_collectives`), and the output and every gradient against one
process's.

    runs, problem = deadline.gather(view, tensor_parallel.tp_run, parallelize)   # on the engines
    problem or tensor_parallel.tensor_parallel(runs)                            # ex-tp: -> what is wrong, or None
    runs, problem = deadline.gather(view, tensor_parallel.sp_run, parallelize_sp)
    problem or tensor_parallel.sequence_parallel(runs)                          # ex-sp
    runs = ddp.on_gloo_ranks(tensor_parallel.mesh_run, 4, mesh_2d, parallelize_2d, 2)
    tensor_parallel.two_d(runs, 2)                                              # ex-mesh: data x tensor on 4
"""

from __future__ import annotations

from course.checks import check, expect

D, HIDDEN, BATCH, SEQ = 8, 48, 4, 12  # HIDDEN and SEQ multiples of 2, 3 and 4 ranks: DTensor matmuls need even shards
TOLERANCE = 1e-9  # float64 throughout: the sharded block and one process's differ only by rounding (1e-15 seen)


def check_block(norm: bool = False):
    """Notebook 09's MLP block: `up` (D -> HIDDEN), tanh, `down` (HIDDEN -> D), after a LayerNorm `norm` if asked;
    float64, the same weights wherever it is made."""
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(D) if norm else torch.nn.Identity()
            self.up = torch.nn.Linear(D, HIDDEN)
            self.down = torch.nn.Linear(HIDDEN, D)

        def forward(self, x):
            return self.down(torch.tanh(self.up(self.norm(x))))

    torch.manual_seed(0)
    return Block().double()


def inputs():
    """The check's input: BATCH sequences of SEQ tokens of D features."""
    import torch

    return torch.randn(BATCH, SEQ, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _full(t):
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def _storage(t) -> int | None:
    """Where a tensor's (or a DTensor's local) data lives; None for a wrapper that has none of its own."""
    from torch.distributed.tensor import DTensor

    try:
        return (t.to_local() if isinstance(t, DTensor) else t).untyped_storage().data_ptr()
    except RuntimeError:
        return None


def _one_process(norm: bool) -> dict:
    block, x = check_block(norm), inputs().requires_grad_()
    out = block(x)
    out.square().sum().backward()
    return {"out": out.detach(), "input grad": x.grad, **{n: p.grad for n, p in block.named_parameters()}}


def _largest_error(got, want) -> float:
    if got is None or tuple(got.shape) != tuple(want.shape):
        return float("inf")
    return float((got - want).abs().max() / (1 + want.abs().max()))


def _run(parallelize, norm: bool, sequence_sharded: bool) -> dict:
    """On every rank: the block parallelized over a 1-D mesh "tp" of the group; one forward and backward of the
    check's input (this rank's slice of the sequence if `sequence_sharded`); what the rank holds and sent."""
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (size,), mesh_dim_names=("tp",))
    block, x = check_block(norm), inputs()
    part = SEQ // size
    local = (x[:, rank * part : (rank + 1) * part] if sequence_sharded else x).clone().requires_grad_()
    run = {"rank": rank, "error": None, "params": {}, "forward": [], "backward": []}
    try:
        returned = parallelize(block, mesh)
        block = returned if isinstance(returned, torch.nn.Module) else block
        params = {_storage(p) for p in block.parameters()}
        saved = 0

        def pack(t):  # what autograd keeps for backward: this rank's activations, parameters left out
            nonlocal saved
            if _storage(t) not in params:
                local = t.to_local() if isinstance(t, DTensor) else t
                saved += local.numel() * local.element_size()
            return t

        with Collectives() as forward, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = block(local)
        with Collectives() as backward:
            out.square().sum().backward()
    except Exception as failed:  # noqa: BLE001 - the learner's plan failing is what the check tells
        run["error"] = f"{type(failed).__name__}: {str(failed).splitlines()[0][:300]}"
        return run
    out = _full(out.detach())
    if sequence_sharded:  # each rank's slice of the output sequence, put back together
        pieces = [torch.empty_like(out) for _ in range(size)]
        dist.all_gather(pieces, out.contiguous())
        out = torch.cat(pieces, dim=1)
    grads = {n: _full(p.grad) if p.grad is not None else None for n, p in block.named_parameters()}
    if sequence_sharded:
        pieces = [torch.empty_like(local.grad) for _ in range(size)]
        dist.all_gather(pieces, local.grad.contiguous())
        grads["input grad"] = torch.cat(pieces, dim=1)
    else:
        grads["input grad"] = local.grad
    want = _one_process(norm)
    run["errors"] = {"out": _largest_error(out, want["out"])}
    run["errors"].update({n: _largest_error(g, want[n]) for n, g in grads.items()})
    run["params"] = {
        n: {"dtensor": isinstance(p, DTensor), "placements": str(getattr(p, "placements", "")),
            "local": (p.to_local() if isinstance(p, DTensor) else p).numel(), "whole": p.numel()}
        for n, p in block.named_parameters()
    }  # fmt: skip
    run["forward"], run["backward"] = forward.seen, backward.seen
    run["activations"] = saved
    return run


def tp_run(parallelize) -> dict:
    """On every rank: `parallelize(block, mesh)` on the plain block, the whole input on every rank."""
    return _run(parallelize, norm=False, sequence_sharded=False)


def sp_run(parallelize) -> dict:
    """On every rank: `parallelize(block, mesh)` on the block with its LayerNorm, this rank's slice of the
    sequence as input."""
    return _run(parallelize, norm=True, sequence_sharded=True)


def activation_bytes(parallelize, parallelize_sp) -> dict[str, int]:
    """On every rank: the bytes autograd saved for backward in one forward pass of the block with its LayerNorm,
    parallelized by `parallelize` (the whole sequence on every rank) and by `parallelize_sp` (this rank's slice)."""
    return {
        "tensor parallel": _run(parallelize, norm=True, sequence_sharded=False).get("activations", 0),
        "sequence parallel": _run(parallelize_sp, norm=True, sequence_sharded=True).get("activations", 0),
    }


def _kinds(calls: list) -> dict[str, int]:
    counted: dict[str, int] = {}
    for kind, _ in calls:
        counted[kind] = counted.get(kind, 0) + 1
    return counted


def _said(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k.replace('_', '-')}{'s' if n > 1 else ''}" for k, n in sorted(counts.items())) or "nothing"


def _ran_and_matches(runs: list[dict]) -> None:
    failed = next((r for r in runs if r["error"]), None)
    expect(failed is None, f"your plan does not run: on rank {failed and failed['rank']}, {failed and failed['error']}")
    for r in runs:
        wrong = [n for n, e in r["errors"].items() if not e <= TOLERANCE]
        expect(
            not wrong,
            f"on rank {r['rank']}, {', '.join(wrong)} differ(s) from one process's (the same block, the whole input)",
        )


def _sharded(runs: list[dict], name: str, placement: str) -> None:
    p = runs[0]["params"][name]
    expect(
        p["dtensor"] and placement in p["placements"],
        f"{name} is {'a DTensor placed ' + p['placements'] if p['dtensor'] else 'a whole tensor on every rank'}, "
        f"not cut {placement}",
    )


@check
def tensor_parallel(runs: list[dict]) -> None:
    """`runs`: tp_run on every rank. `up`'s weight cut by rows (its output columns) and `down`'s by columns, the
    output and every gradient one process's, one all-reduce in forward and one in backward, nothing else sent."""
    _ran_and_matches(runs)
    forward, backward = _kinds(runs[0]["forward"]), _kinds(runs[0]["backward"])
    expect(
        forward == {"all_reduce": 1},
        f"the forward pass sent {_said(forward)}: the block needs one all-reduce, of its output's partial sums",
    )
    expect(
        backward == {"all_reduce": 1},
        f"the backward pass sent {_said(backward)}: it needs one all-reduce, of the input's gradient",
    )
    _sharded(runs, "up.weight", "Shard(dim=0)")
    _sharded(runs, "down.weight", "Shard(dim=1)")


@check
def sequence_parallel(runs: list[dict]) -> None:
    """`runs`: sp_run on every rank. The LayerNorm run on this rank's slice of the sequence, `up` and `down` cut as
    in tensor parallelism; the output (this rank's slice) and every gradient one process's; an all-gather and a
    reduce-scatter in each pass, no all-reduce."""
    _ran_and_matches(runs)
    for phase in ("forward", "backward"):
        counts = _kinds(runs[0][phase])
        expect(
            counts == {"all_gather": 1, "reduce_scatter": 1},
            f"the {phase} pass sent {_said(counts)}: with the sequence cut outside the two linear layers it needs "
            "one all-gather (the whole sequence into `up`) and one reduce-scatter (each rank its slice of "
            "`down`'s sums)",
        )
    _sharded(runs, "up.weight", "Shard(dim=0)")
    _sharded(runs, "down.weight", "Shard(dim=1)")


# ---- a 2-D mesh: data parallelism (FSDP) across, tensor parallelism within

LR = 0.1


def _dp_batch(dp_rank: int, dp_size: int):
    x = inputs()
    part = BATCH // dp_size
    return x[dp_rank * part : (dp_rank + 1) * part]


def _one_step_weights(dp_size: int) -> dict:
    """One process: one SGD step of the block on the whole batch (the mean of the squares of its output)."""
    import torch

    block = check_block()
    torch.nn.functional.mse_loss(block(inputs()), torch.zeros(BATCH, SEQ, D, dtype=torch.float64)).backward()
    torch.optim.SGD(block.parameters(), lr=LR).step()
    return {n: p.detach() for n, p in block.named_parameters()}


def mesh_run(mesh_2d, parallelize_2d, tp: int) -> dict:
    """On every rank: `mesh_2d(world_size, tp)`, the block parallelized over it by `parallelize_2d(block, mesh)`,
    one SGD step on this rank's data-parallel part of the batch; the mesh's groups, each collective's group and
    kind, and how far each weight is from one process's step."""
    import torch
    import torch.distributed as dist

    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    run = {"rank": rank, "error": None}
    try:
        mesh = mesh_2d(size, tp)
        run["groups"] = {d: tuple(dist.get_process_group_ranks(mesh[d].get_group())) for d in ("dp", "tp")}
        returned = parallelize_2d(check_block(), mesh)
        block = returned if isinstance(returned, torch.nn.Module) else None
        x = _dp_batch(mesh.get_local_rank("dp"), mesh["dp"].size())
        with Collectives() as seen:
            out = block(x)
            torch.nn.functional.mse_loss(out, torch.zeros_like(out)).backward()
        torch.optim.SGD(block.parameters(), lr=LR).step()
    except Exception as failed:  # noqa: BLE001 - the learner's mesh or plan failing is what the check tells
        run["error"] = f"{type(failed).__name__}: {str(failed).splitlines()[0][:300]}"
        return run
    want = _one_step_weights(size // tp)
    run["errors"] = {n: _largest_error(_full(p.detach()), want[n]) for n, p in block.named_parameters()}
    run["collectives"] = [(kind, group) for (kind, _), group in zip(seen.seen, seen.groups)]
    return run


def mesh_runs(answers: list[tuple], tp: int) -> list[dict]:
    """On every rank: mesh_run for each (mesh_2d, parallelize_2d) pair in turn (one job for several answers)."""
    return [mesh_run(mesh_2d, parallelize_2d, tp) for mesh_2d, parallelize_2d in answers]


@check
def two_d(runs: list[dict], tp: int) -> None:
    """`runs`: mesh_run on every rank. Tensor-parallel groups of `tp` consecutive ranks (one node's), data-parallel
    groups across them; the block's all-reduces within a tensor-parallel group, FSDP's gathers and reduce-scatters
    within a data-parallel group; the weights after one step one process's."""
    failed = next((r for r in runs if r["error"]), None)
    expect(failed is None, f"on rank {failed and failed['rank']}: {failed and failed['error']}")
    size = len(runs)
    for r in runs:
        node = r["rank"] // tp
        want = {"tp": tuple(range(node * tp, (node + 1) * tp)), "dp": tuple(range(r["rank"] % tp, size, tp))}
        for dim in ("tp", "dp"):
            expect(
                r["groups"][dim] == want[dim],
                f"rank {r['rank']}'s {dim!r} group is ranks {list(r['groups'][dim])}, not {list(want[dim])}: "
                + ("tensor parallelism talks at every layer, so its groups must be ranks of one node (consecutive)"
                   if dim == "tp" else "each data-parallel group takes one rank of every node"),
            )  # fmt: skip
        for kind, group in r["collectives"]:
            dim = "tp" if kind == "all_reduce" else "dp"
            expect(
                group == r["groups"][dim],
                f"rank {r['rank']} ran {'an' if kind[0] == 'a' else 'a'} {kind.replace('_', '-')} over ranks {list(group or ())}, not its {dim!r} "
                f"group {list(r['groups'][dim])}: "
                + ("tensor parallelism's plan goes on mesh['tp']" if dim == "tp" else "fully_shard goes on mesh['dp']"),
            )
        kinds = {kind for kind, _ in r["collectives"]}
        needed = ({"all_reduce"} if tp > 1 else set()) | ({"all_gather", "reduce_scatter"} if size > tp else set())
        expect(
            needed <= kinds,
            f"rank {r['rank']} ran only {sorted(kinds)}: the block needs "
            + " and ".join(w for w, k in (("tensor parallelism's all-reduce", "all_reduce"),
                                         ("FSDP's all-gather and reduce-scatter", "all_gather")) if k in needed),
        )  # fmt: skip
        wrong = [n for n, e in r["errors"].items() if not e <= TOLERANCE]
        expect(not wrong, f"on rank {r['rank']}, {', '.join(wrong)} after one step differ(s) from one process's")
