"""Notebook 09's checks, both parts: sharded data parallelism (ZeRO, part one: 09_sharded_data_parallelism) and
tensor parallelism (part two: 09_tensor_parallelism). Part one: the bytes per device against the ZeRO paper's
figures, a ZeRO stage-2 training against plain data parallelism's (parameters; optimizer state and the memory each
rank holds, measured by tracemalloc; bytes on the wire, measured by course.comm.CountingComm), a stage-3 forward pass
(its output, its collectives and its peak memory, measured by tracemalloc). Part two: a Megatron MLP block against
the unsplit block, the groups `comm.Split` makes on 8 ranks, and the layout quiz. What is compared is measured from
outside the answer, never taken from it.

    zero = deadline.apply(view, sharded.trained, train, zero_state, zero_step, SIZES, STEPS)   # with the memory held
    sharded.zero_stage2(zero, dp, n_params, STEPS)      # None, or what is wrong
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from course import sharding
from course.checks import Wrong, check, deadline, expect, quiz
from course.memory import arrays_kept

# GB per device for 7.5 billion parameters on 64 devices with K = 12, by ZeRO stage (the ZeRO paper's figure 1)
FIGURE_1 = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}


@check
def memory(zero_bytes: Callable, fewest_devices: Callable) -> None:
    """Exercise `ex-memory`: zero_bytes against the paper's figures, its k, one device and a stage that does not
    exist; fewest_devices against zero_bytes itself (fits on n, not on n - 1, None when nothing fits)."""
    for stage, gb in FIGURE_1.items():
        got = zero_bytes(7.5e9, 64, stage) / 1e9
        expect(
            abs(got - gb) < 0.05,
            f"stage {stage}: {got:.2f} GB per device for 7.5 billion parameters on 64 devices; the paper gives "
            f"{gb} GB: which parts of the state does stage {stage} divide by N_d?",
        )
    expect(
        abs(zero_bytes(1e9, 8, 1, k=4) - zero_bytes(1e9, 8, 1) + 8e9 / 8) < 1,
        "zero_bytes(psi, n_d, stage, k): use the k it is given (4 bytes of optimizer state here, not 12)",
    )
    expect(
        all(abs(zero_bytes(1e9, 1, s) - 16e9) < 1 for s in range(4)), "on one device every stage holds (2 + 2 + K) psi"
    )
    try:
        zero_bytes(1e9, 8, 4)
    except ValueError:
        pass
    else:
        raise Wrong("zero_bytes(1e9, 8, 4) should raise ValueError: ZeRO has no stage 4")
    for psi, device_bytes, k in [(7.5e9, 32e9, 12), (1.5e9, 16e9, 12), (7.5e9, 80e9, 16), (1e9, 16e9, 12)]:
        for stage in range(4):
            n = fewest_devices(psi, device_bytes, stage, k=k)
            where = f"{psi / 1e9:g} billion parameters, {device_bytes / 1e9:g} GB devices, stage {stage}, k={k}"
            if n is None:
                expect(
                    zero_bytes(psi, 4096, stage, k) > device_bytes,
                    f"{where}: it fits on 4096 devices, but you returned None",
                )
                continue
            expect(isinstance(n, int) and 1 <= n <= 4096, f"{where}: return a number of devices (an int), or None")
            expect(zero_bytes(psi, n, stage, k) <= device_bytes, f"{where}: it does not fit on {n} devices")
            expect(
                n == 1 or zero_bytes(psi, n - 1, stage, k) > device_bytes,
                f"{where}: it already fits on {n - 1} devices",
            )
    expect(
        fewest_devices(7.5e9, 32e9, 1, max_devices=44) is None,
        "fewest_devices(7.5e9, 32e9, 1, max_devices=44): it fits on no number of devices from 1 to 44: return None",
    )


def trained(train: Callable, make_state: Callable, step: Callable, sizes: tuple[int, ...], steps: int) -> dict:
    """On a rank: the notebook's `train(make_state, step, sizes, steps)`, its result with `held_bytes`: the NumPy
    memory the training leaves allocated on the rank besides that result (`course.memory.arrays_kept`), the state
    `make_state` returned kept alive: what the rank really holds for its optimizer, whatever the state's arrays say
    of their own size (a slice keeps its whole array), and anything else the steps keep."""
    states: list = []

    def kept_state(comm: Any, n_params: int) -> Any:
        states.append(make_state(comm, n_params))
        return states[-1]

    result, kept = arrays_kept(train, kept_state, step, sizes, steps)
    states.clear()
    return {**result, "held_bytes": kept - sharding.nbytes(result)}


@check
def zero_stage2(results: list[dict], reference: list[dict], n_params: int, steps: int) -> None:
    """Exercise `ex-zero`: ZeRO training (`trained`: the notebook's `train` and the memory each rank holds, one
    result per rank) against plain data parallelism's: the same parameters after `steps` steps, Adam's moments for
    the rank's own shard only, in its state and in the memory it holds, and no more bytes on the wire than the
    all-reduce (a reduce-scatter and an all-gather)."""
    size = len(results)
    counts = sharding.shard_counts(n_params, size)
    owner = np.repeat(np.arange(size), counts)  # which rank's shard each parameter is in
    for rank, (got, want) in enumerate(zip(results, reference)):
        params = np.asarray(got["params"], dtype=float)
        expect(
            params.shape == want["params"].shape,
            f"rank {rank}: zero_step returned {params.size} values; it should return all {n_params} "
            "parameters (every rank's updated shard, gathered)",
        )
        far = ~np.isclose(params, want["params"], rtol=1e-9, atol=1e-12)
        expect(
            not far.any(),
            f"rank {rank}: after {steps} steps the parameters differ from plain data parallelism's, in the "
            f"shard(s) of rank(s) {sorted(set(owner[far].tolist()))} of {size}: is each shard updated with "
            "the mean gradient over all ranks, and is every rank's shard gathered?",
        )
        expect(
            got["state_bytes"] <= 16 * counts[rank],
            f"rank {rank} keeps {got['state_bytes']:,d} bytes of optimizer state, plain data parallelism "
            f"{want['state_bytes']:,d}: on {size} ranks each should keep Adam's two moments for the "
            f"{counts[rank]} parameters of its own shard only",
        )
        expect(
            got["held_bytes"] <= 16 * counts[rank],
            f"rank {rank}'s optimizer state says it is {got['state_bytes']:,d} bytes, but after training the rank "
            f"still holds {got['held_bytes']:,d} bytes of arrays besides its parameters (plain data parallelism "
            f"{want['state_bytes']:,d}): an array cut out of a larger one keeps the whole of it; allocate only the "
            f"{counts[rank]} parameters of the rank's own shard",
        )
        allreduce = want["wire_bytes"]
        used = (
            " An all-reduce sends twice what a reduce-scatter or an all-gather sends."
            if "Allreduce" in got["collectives"] or "allreduce" in got["collectives"]
            else ""
        )
        expect(
            got["wire_bytes"] <= allreduce + 8 * (size - 1),
            f"rank {rank} sends {got['wire_bytes']:,.0f} bytes per step, {got['wire_bytes'] / allreduce:.2f} "
            f"times plain data parallelism's all-reduce ({', '.join(got['collectives'])}).{used} Each rank "
            "needs the summed gradient of its own shard only (a reduce-scatter), and every rank needs the "
            "updated shards of all the others (an all-gather)",
        )


@dataclass(frozen=True)
class ZeroCase:
    """A ZeRO training tried beside plain data parallelism's on the engines: the network's widths, its steps, and a
    name the message cites."""

    name: str
    sizes: tuple[int, ...]
    steps: int


# Parameter counts the engines' ranks do not divide evenly, and a network of one hidden unit
ZERO_CASES = (
    ZeroCase("17 parameters (widths 2, 3, 2): shards of unequal size", (2, 3, 2), 3),
    ZeroCase("7 parameters (widths 2, 1, 2): one hidden unit", (2, 1, 2), 2),
)


def _last_line(error: Exception) -> str:
    """The last non-empty line of an error's words (a CompositeError's: one engine's exception)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


@check
def zero_cases(train: Callable, zero: tuple[Callable, Callable], dp: tuple[Callable, Callable], view: Any) -> None:
    """Exercise `ex-zero` on ZERO_CASES: `train(*zero, sizes, steps)` on the engines of `view` (`trained`: with the
    memory each rank holds) against `train(*dp, ...)`, as zero_stage2 compares them; the message names the case."""
    for case in ZERO_CASES:
        reference = deadline.apply(view, train, *dp, case.sizes, case.steps)
        try:
            results = deadline.apply(view, trained, train, *zero, case.sizes, case.steps)
        except Exception as error:  # the learner's code failing on this case: say which case
            raise Wrong(f"with {case.name} on {len(view)} ranks, training failed: {_last_line(error)}") from None
        problem = zero_stage2(results, reference, sharding.mlp_size(case.sizes), case.steps)
        expect(problem is None, f"with {case.name} on {len(view)} ranks: {problem}")


def stage3_run(forward: Callable, width: int, layers: int, batch: int = 4, seed: int = 0) -> dict[str, Any]:
    """On every rank: `forward` on this rank's shards of a random network; its output against the unsharded one's,
    the peak memory it allocated (tracemalloc) and what it asked of MPI."""
    import tracemalloc

    from mpi4py import MPI

    from course.comm import CountingComm

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng(seed)
    shapes = [(width, width // 2) if layer % 2 == 0 else (width // 2, width) for layer in range(layers)]
    weights = [rng.standard_normal(shape) / np.sqrt(shape[0]) for shape in shapes]
    x = rng.standard_normal((batch, width))
    want = x
    for w in weights:
        want = np.tanh(want @ w)
    shards = [w.ravel()[slice(*sharding.shard_bounds(w.size, size, rank))].copy() for w in weights]
    del weights, w  # from here on the rank holds only its shards
    comm = CountingComm(world)
    tracemalloc.start()
    try:
        got = forward(comm, shards, shapes, x)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    got = np.asarray(got)
    return {
        "right": got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-9, atol=1e-12)),
        "peak": peak,
        "layer_bytes": 8 * width * (width // 2),
        "collectives": comm.collectives,
        "wire_bytes": comm.ring_bytes(),
        "shard_bytes": sum(s.nbytes for s in shards),
    }


@check
def stage3(results: list[dict], layers: int) -> None:
    """Exercise `ex-stage3`: a stage-3 forward pass (stage3_run's result on every rank): the unsharded network's
    output, one all-gather per layer sending the rank's shard once, and never much more than a layer held at once."""
    size = len(results)
    for rank, r in enumerate(results):
        expect(
            r["right"],
            f"rank {rank}: the output differs from the unsharded network's: tanh(x @ W) after every layer, in order",
        )
        gathers = [c for c in r["collectives"] if c.lower().lstrip("i").startswith("allgather")]
        expect(
            len(gathers) == layers and len(r["collectives"]) == layers,
            f"rank {rank} asked for {len(r['collectives'])} collective(s) "
            f"({', '.join(sorted(set(r['collectives'])))}) for {layers} layers: one all-gather per layer, of its "
            "weights",
        )
        expect(
            abs(r["wire_bytes"] - (size - 1) * r["shard_bytes"]) <= 1,
            f"rank {rank} sent {r['wire_bytes']:,.0f} bytes; gathering each layer once sends its "
            f"{r['shard_bytes']:,d} bytes of shards to the {size - 1} other rank(s): send your shard, once per layer",
        )
        expect(
            r["peak"] <= 3 * r["layer_bytes"],
            f"rank {rank} held up to {r['peak'] / r['layer_bytes']:.1f} layers' worth of weights at once "
            f"(peak {r['peak']:,d} bytes; one layer is {r['layer_bytes']:,d}): gather each layer just before "
            "it runs and free it right after, never the whole network",
        )


TENSOR_HINTS = {
    "z": "Z is the sum over ranks of each rank's hidden units times its rows of B",
    "dx": "each rank's hidden units give a part of X's gradient: add the parts of all ranks",
    "da_part": "your columns of A's gradient: x.T @ (the gradient before tanh, for your hidden units)",
    "db_part": "your rows of B's gradient: (your hidden units).T @ dz",
}


@check
def tensor_parallel_rank(block: Callable, d: int, h: int, batch: int, seed: int = 0) -> None:
    """On every rank: `block` on this rank's columns of A and rows of B against the unsplit block (its four
    results), and what it asked of MPI (one all-reduce of Z forward, one of X's gradient backward)."""
    from mpi4py import MPI

    from course.comm import CountingComm

    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    rng = np.random.default_rng(seed)
    x, dz = rng.standard_normal((batch, d)), rng.standard_normal((batch, d))
    a, b = rng.standard_normal((d, h)) / np.sqrt(d), rng.standard_normal((h, d)) / np.sqrt(h)
    mine = slice(*sharding.shard_bounds(h, size, rank))
    y = np.tanh(x @ a)  # the unsplit block, forward and backward
    dpre = (dz @ b.T) * (1 - y**2)
    want = {"z": y @ b, "dx": dpre @ a.T, "da_part": (x.T @ dpre)[:, mine], "db_part": (y.T @ dz)[mine]}
    comm = CountingComm(world)
    got = block(comm, x, a[:, mine].copy(), b[mine].copy(), dz)
    expect(isinstance(got, (tuple, list)) and len(got) == 4, "return four arrays: (z, dx, da_part, db_part)")
    returned = dict(zip(("z", "dx", "da_part", "db_part"), got))
    for name in ("z", "da_part", "db_part", "dx"):  # the rank's own parts first, then the summed gradient
        value, wanted = np.asarray(returned[name]), want[name]
        expect(
            value.shape == wanted.shape, f"rank {rank}: {name} has shape {value.shape}, it should have {wanted.shape}"
        )
        expect(
            np.allclose(value, wanted, rtol=1e-9, atol=1e-12),
            f"rank {rank}: {name} differs from the unsplit block's: {TENSOR_HINTS[name]}",
        )
    expect(
        [c.lower() for c in comm.collectives] == ["allreduce", "allreduce"],
        f"rank {rank} asked for {comm.collectives or 'no collective'}: Megatron's block needs exactly one "
        "all-reduce forward (the partial sums of Z) and one backward (X's gradient), and no rank needs "
        "another rank's weights",
    )
    expect(
        comm.collective_bytes == want["z"].nbytes + want["dx"].nbytes,
        f"rank {rank} all-reduced {comm.collective_bytes:,d} bytes; Z and X's gradient are "
        f"{want['z'].nbytes + want['dx'].nbytes:,d}: all-reduce those two, nothing more",
    )


@check
def tensor_parallel(block: Callable, view: Any, d: int = 16, h: int = 32, batch: int = 4, seed: int = 0) -> None:
    """Exercise `ex-tensor`: tensor_parallel_rank on every engine of `view` at once; the first rank's problem."""
    for problem in deadline.apply(view, tensor_parallel_rank, block, d, h, batch, seed):
        expect(not problem, problem)


@dataclass(frozen=True)
class GridCase:
    """A layout tried: T x P on a job of `ranks` ranks, a name the message cites, hidden or shown."""

    name: str
    ranks: int
    tensor: int
    pipeline: int
    hidden: bool = False


# The layouts ex-grid (part two's exercise 2) is checked on: grids that fit (odd factors, a factor of 1, D = 1) and
# grids whose factors each divide the ranks while their product does not
GRID_CASES = (
    GridCase("2 x 2 x 2", 8, 2, 2),
    GridCase("tensor groups of 4, no pipeline", 8, 4, 1),
    GridCase("a pipeline of 2, no tensor parallelism", 8, 1, 2),
    GridCase("3 does not divide 8", 8, 3, 1),
    GridCase("4 and 4 each divide 8, their product 16 does not", 8, 4, 4),
    GridCase("an odd pipeline on 6 ranks, D = 1", 6, 2, 3),
    GridCase("2 and 2 each divide 6, their product 4 does not", 6, 2, 2),
    GridCase("tensor 2, pipeline 4, D = 1", 8, 2, 4, hidden=True),
    GridCase("everything data-parallel", 8, 1, 1, hidden=True),
    GridCase("tensor groups of 3 on 6 ranks", 6, 3, 2, hidden=True),
    GridCase("8 divides 8 and 2 divides 8, 16 does not", 8, 8, 2, hidden=True),
)


def grid_groups(grid: Callable, layouts: Iterable[tuple[int, int]]) -> dict:
    """On every rank: for each (T, P), the world ranks of its three groups in their own order, or 'refused'."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    found = {}
    for tensor_size, pipeline_size in layouts:
        try:
            groups = grid(world, tensor_size, pipeline_size)
        except ValueError:
            found[(tensor_size, pipeline_size)] = "refused"
            continue
        found[(tensor_size, pipeline_size)] = [g.allgather(world.Get_rank()) for g in groups]
    return found


def grid_found(grid: Callable, cases: Iterable[GridCase] = GRID_CASES, timeout: float = 120) -> dict[int, list]:
    """`grid_groups` for every layout of `cases`, on one new `mpiexec` job per number of ranks: {ranks: by rank}."""
    from course.comm import on_ranks

    layouts: dict[int, list[tuple[int, int]]] = {}
    for case in cases:
        layouts.setdefault(case.ranks, []).append((case.tensor, case.pipeline))
    return {ranks: on_ranks(grid_groups, ranks, grid, wanted, timeout=timeout) for ranks, wanted in layouts.items()}


def _grid_layout(found: list[dict], tensor_size: int, pipeline_size: int, ranks: int, name: str = "") -> None:
    layout = f"T={tensor_size}, P={pipeline_size} on {ranks} ranks" + (f" ({name})" if name else "")
    if ranks % (tensor_size * pipeline_size):
        bad = [r for r in range(ranks) if found[r][(tensor_size, pipeline_size)] != "refused"]
        expect(not bad, f"{layout}: no grid fits, but rank(s) {bad} did not raise ValueError")
        return

    def coordinates(r: int) -> tuple[int, int, int]:
        return r % tensor_size, (r // tensor_size) % pipeline_size, r // (tensor_size * pipeline_size)

    shares = {"tensor_comm": "d and p", "pipeline_comm": "d and t", "data_comm": "p and t"}
    for rank in range(ranks):
        got = found[rank][(tensor_size, pipeline_size)]
        expect(got != "refused", f"{layout}: rank {rank} raised ValueError, but a grid fits")
        t, p, d = coordinates(rank)
        wanted = {
            "tensor_comm": [r for r in range(ranks) if coordinates(r)[1:] == (p, d)],
            "pipeline_comm": [r for r in range(ranks) if coordinates(r)[0::2] == (t, d)],
            "data_comm": [r for r in range(ranks) if coordinates(r)[:2] == (t, p)],
        }
        for (name, want), members in zip(wanted.items(), got):
            expect(
                sorted(members) == want,
                f"{layout}: world rank {rank}'s {name} holds world ranks {sorted(members)}; it should hold the "
                f"{len(want)} rank(s) that share its {shares[name]}",
            )
            expect(
                members == want,
                f"{layout}: world rank {rank}'s {name} numbers its ranks {members}: number them in world order",
            )


@check
def grid_layouts(found: list[dict], layouts: Iterable[tuple[int, int]], ranks: int = 8) -> None:
    """The groups every rank of a `ranks`-rank job reported (grid_groups, one dict per rank) for each (T, P) of
    `layouts`: the ranks that share the other two coordinates, in world order, or ValueError where no grid fits."""
    for tensor_size, pipeline_size in layouts:
        _grid_layout(found, tensor_size, pipeline_size, ranks)


@check
def grid_cases(found: dict[int, list], cases: Iterable[GridCase]) -> None:
    """Exercise `ex-grid`: grid_layouts for each case of `cases`, from what grid_found reported; the message names
    the case that fails."""
    for case in cases:
        _grid_layout(found[case.ranks], case.tensor, case.pipeline, case.ranks, case.name)


# Digests of the right answers (course.checks.quiz): right or not, without showing them
CHOICE_KEY = {
    "layout": "80d1d8d899a814be2fed6cc5c738091496d27985f80e737a0cc47c17117d6c0e",
    "stage3": "e9a67a0b1b852398bd11e6db10d19943936d3c225b9175098ed2bdbe41449d04",
    "reason-1": "7724fcbcb3f0deea4377b424340005e507c183a5a599eb48c8b32d0a6ed2832b",
    "reason-2": "180b1f648cfb0f0797503ccf5376a2e0edaca4d30170d867510b5ea29d26f9be",
    "reason-3": "5bb588a5ecf3e74ebf9c7235a9b16fe50f41cc70cca66bc3daa2a6bcea1343cc",
    "reason-4": "4a304dddc376533fcc1566f89e1d5177b701384d1cc7d79275e1bcdb2022a68e",
    "reason-5": "b024f67d0e30401bcb92dbc10d5c2933c14dd1a20a0f51b6853e92fac426f363",
}
CHOICE_WHY = {
    "layout": "640 GB over T x P = 16 GPUs is 40 GB each, plus 15 GB of activations; 8 GPUs of tensor "
    "parallelism fill a node, and 2 stages keep the bubble small.",
    "reason-1": "two all-reduces of activations per block, forward and backward, that the next layer waits for.",
    "reason-2": "(p - 1) / (m + p - 1): 1/9 for 2 stages, 7/15 for 8.",
    "reason-3": "stages pass activations (and their gradients) point to point at their borders; gradients are "
    "all-reduced among data-parallel replicas of the same stage.",
    "reason-4": "one all-reduce per step, started as soon as each layer's gradients are ready.",
    "reason-5": "640 GB of state and 15 GB of activations fit no GPU of 80 GB: each copy must be cut at least 10 ways "
    "(640 / 65).",
    "stage3": "stage 3 trades bytes and latency for memory: worth it when the memory is needed and the links are fast.",
}


@check
def choice(layout: object, reasons: object, stage3: object) -> None:
    """Exercise `ex-choice`: the layout, the reasons and the stage-3 answer, each of the right kind, then against
    the key's digests (course.checks.quiz prints right / not yet for each, and why once right)."""
    expect(isinstance(layout, str) and layout.strip().upper() in set("ABCD"), "layout should be one letter, A to D")
    expect(isinstance(reasons, set) and reasons <= {1, 2, 3, 4, 5}, "reasons should be a set of numbers among 1-5")
    expect(isinstance(stage3, str) and stage3.strip().upper() in set("ABCD"), "stage3 should be one letter, A to D")
    answers = {"layout": layout, "stage3": stage3, **{f"reason-{i}": i in reasons for i in range(1, 6)}}
    try:
        quiz.check(answers, CHOICE_KEY, CHOICE_WHY)
    except AssertionError as wrong:
        raise Wrong(str(wrong)) from None
