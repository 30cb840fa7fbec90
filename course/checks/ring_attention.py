"""Notebook 14 (part 4)'s checks of context parallelism: a learner's online-softmax `update` tried in one process on
key blocks the check folds in itself, their ring attention run on every rank of a gloo group the check makes and
passes it (with a short timeout) and measured from outside: the output against one process's whole attention, what
each rank sent to whom and on which group (`course.torch_collectives.Collectives`), the largest tensor and the
matrix-product flops of every op it ran (`course.context_parallel.Ops`); the zig-zag split's work per rank, and the
bytes of the ring and of Ulysses.

    online_softmax(update)                        # ex-online: o / l of the blocks folded in -> wrong, or None
    ring(runs)                                    # ex-ring: runs = ring_run(ring_attention, causal, None, update)
                                                  # (ring_run passes ring_attention a group of the check's own)
    zigzag_balance(runs)                          # ex-zigzag: runs = ring_run(ring_attention, True, zigzag, update)
    bytes_predicted(bytes_sent, measured)         # ex-bytes: ring_bytes_run's and ulysses_run's bytes
"""

from __future__ import annotations

from course.checks import check, expect, lent

D = 8  # head dim of the ring's check: one block's K, V and positions, n (2 D + 1), is half the whole K on 4 ranks
CHUNK = 4  # rows of a chunk: each rank holds two chunks, n = 2 CHUNK rows
TOLERANCE = 1e-10  # float64: the blockwise softmax and the whole one differ by rounding only (1e-16 seen)
GROUP_TIMEOUT = 10  # s a rank waits for its peer in the group the check passes: a stuck ring fails within the deadline

# online_softmax's cases: (queries' positions, key blocks' sizes, causal, the block visited first): several uneven
# blocks, one block, and causal masks that leave a query row with no key in some block (also in the first visited)
CASES = [
    (range(6), (5, 3, 8), False, 1),
    (range(4), (7,), False, 0),
    (range(8, 14), (4, 6, 5, 5), True, 2),
    (range(0, 12, 2), (3, 3, 6), True, 1),
]


def _data(queries: int, keys: int, dim: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, dim, generator=g, dtype=torch.float64) for n in (queries, keys, keys)]


def _fold(update, q, k, v, q_pos, k_pos, blocks: list[tuple[int, int]], causal: bool):
    """Start from m = -inf, l = 0, o = 0 and fold in the key blocks (first, end) in the order given."""
    import torch

    m = torch.full((len(q), 1), float("-inf"), dtype=q.dtype)
    l, o = torch.zeros(len(q), 1, dtype=q.dtype), torch.zeros_like(q)
    for a, b in blocks:
        mask = (k_pos[None, a:b] <= q_pos[:, None]) if causal else None
        m, l, o = update(m, l, o, q, k[a:b], v[a:b], mask)
    return o / l


@check
def online_softmax(update, cases=CASES) -> None:
    """`update(m, l, o, q, k, v, mask)` -> (m, l, o): the check folds each case's key blocks in, in a ring's rotated
    order, and compares o / l with whole attention of one process."""
    import torch

    from course.context_parallel import attention

    for number, (queries, sizes, causal, first) in enumerate(cases):
        q_pos = torch.tensor(list(queries))
        keys = max(sum(sizes), int(q_pos.max()) + 1)
        q, k, v = _data(len(q_pos), keys, 4, number)
        k_pos = torch.arange(keys)
        ends = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        blocks = [(ends[i], ends[i + 1]) for i in range(len(sizes))]
        blocks = blocks[first:] + blocks[:first] + ([(ends[-1], keys)] if keys > ends[-1] else [])
        what = f"{len(q_pos)} queries at positions {list(queries)}, key blocks of {list(sizes)} visited from block " + (
            f"{first}{', causal' if causal else ''}"
        )
        got = _fold(update, q, k, v, q_pos, k_pos, blocks, causal)
        want = attention(q, k, v, causal, q_pos, k_pos)
        expect(
            isinstance(got, torch.Tensor) and got.shape == want.shape,
            f"{what}: o / l has shape {tuple(getattr(got, 'shape', ()))}, not {tuple(want.shape)}",
        )
        expect(
            not torch.isnan(got).any(),
            f"{what}: NaN in rows {sorted({int(r) for r in torch.isnan(got).nonzero()[:, 0]})}: a query row with "
            "no key it may attend in a block must leave m, l and o as they were",
        )
        error = float((got - want).abs().max())
        expect(error <= TOLERANCE, f"{what}: o / l is {error:.2g} away from whole attention")


# ---- the ring, on every rank


def chunk_rows(chunks: tuple[int, int]):
    """The global positions of two chunks of CHUNK rows, in the order given."""
    import torch

    return torch.cat([torch.arange(c * CHUNK, (c + 1) * CHUNK) for c in chunks])


def whole(size: int):
    """The check's q, k, v: the whole sequence of 2 CHUNK rows per rank, D features, float64."""
    return _data(2 * CHUNK * size, 2 * CHUNK * size, D, 14)


def pair_flops(update) -> int:
    """The matrix-product flops of one call of `update` on a pair of halves (CHUNK queries, CHUNK keys)."""
    import torch

    from course.context_parallel import Ops

    q, k, v = _data(CHUNK, CHUNK, D, 3)
    m = torch.full((CHUNK, 1), float("-inf"), dtype=q.dtype)
    with Ops() as ops:
        update(m, torch.zeros(CHUNK, 1, dtype=q.dtype), torch.zeros_like(q), q, k, v, None)
    return ops.flops


def ring_run(ring_attention, causal: bool, chunks=None, update=None) -> dict:
    """On every rank: `ring_attention(q, k, v, pos, causal, group)` on this rank's two chunks of the check's sequence
    (chunks 2r, 2r + 1, or `chunks(rank, size)`) over a gloo group the check makes of every rank, measured from
    outside: its output, each send's (destination's global rank, bytes), the kinds of collectives it ran and how many
    ran on another group than `group`, the largest tensor an op made and its matrix-product flops (in pairs of halves
    where `update` is given: its flops on one pair)."""
    import datetime

    import torch
    import torch.distributed as dist

    from course.context_parallel import Ops
    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    run = {"rank": rank, "size": size, "causal": causal, "error": None}
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    run["next"] = dist.get_global_rank(group, (dist.get_rank(group) + 1) % size)
    group_name = group.group_name
    try:
        mine = tuple(int(c) for c in (chunks(rank, size) if chunks else (2 * rank, 2 * rank + 1)))
        run["chunks"] = mine
        if len(mine) != 2 or not all(0 <= c < 2 * size for c in mine):
            raise ValueError(f"chunks {mine} are not two of the {2 * size} chunks 0..{2 * size - 1}")
        pos = chunk_rows(mine)
        q, k, v = whole(size)
        with Collectives() as seen, Ops() as ops, lent(ring_attention, **({"update": update} if update else {})):
            out = ring_attention(q[pos].clone(), k[pos].clone(), v[pos].clone(), pos.clone(), causal, group)
    except Exception as failed:  # noqa: BLE001 - the learner's code failing is what the check tells
        run["error"] = f"{type(failed).__name__}: {str(failed).splitlines()[0][:300]}"
        return run
    finally:
        dist.destroy_process_group(group)
    run["out"] = out.tolist() if isinstance(out, torch.Tensor) else None
    run["pos"] = pos.tolist()
    run["sent"] = list(seen.sent)
    run["kinds"] = sorted({kind for kind, _ in seen.seen} - {"send", "recv"})
    run["collectives"] = len(seen.names)
    run["off_group"] = sum(name != group_name for name in seen.names)
    run["largest"], run["flops"] = ops.largest, ops.flops
    per_pair = pair_flops(update) if update else 0
    run["pairs"] = ops.flops / per_pair if per_pair else None  # None: no update, or one without matrix products
    return run


def ring_runs(ring_attention, cases: list, update=None) -> list[dict]:
    """On every rank: ring_run for each (causal, chunks) in turn (one job for several)."""
    return [ring_run(ring_attention, causal, chunks, update) for causal, chunks in cases]


def pairs_needed(pos: list[int], size: int, causal: bool) -> int:
    """(query half, key half) pairs of a rank holding `pos` with at least one query that may attend a key."""
    halves = [pos[:CHUNK], pos[CHUNK:]]
    keys = [range(c * CHUNK, (c + 1) * CHUNK) for c in range(2 * size)]
    return sum(not causal or max(h) >= min(kh) for h in halves for kh in keys)


def _failed(runs: list[dict]) -> str | None:
    failed = sorted((r for r in runs if r["error"]), key=lambda r: "Connection closed" in r["error"])
    return failed and f"on rank {failed[0]['rank']}: {failed[0]['error']}"


def _output_right(runs: list[dict]) -> None:
    import torch

    from course.context_parallel import attention

    size, causal = len(runs), runs[0]["causal"]
    q, k, v = whole(size)
    want = attention(q, k, v, causal)
    mask = "causal" if causal else "no mask"
    for r in runs:
        got = torch.tensor(r["out"], dtype=torch.float64) if r["out"] is not None else None
        rows = want[r["pos"]]
        expect(
            got is not None and got.shape == rows.shape,
            f"{mask}: rank {r['rank']} returned {None if got is None else tuple(got.shape)}, not its {len(rows)} "
            f"rows of {D} features",
        )
        error = float((got - rows).abs().max())
        expect(error <= TOLERANCE, f"{mask}: rank {r['rank']}'s rows are {error:.2g} away from whole attention")


@check
def ring(runs: list[dict]) -> None:
    """`runs`: ring_run on every rank (with `update`). Each rank ran every send and receive on the group it was
    given; its rows are whole attention's; it sent its K and V blocks to the group's next rank only, p - 1 times
    (positions may ride along), ran no other collective, made no tensor larger than one block's K, V and positions
    together, and computed the pairs of halves its mask needs, no more."""
    expect(not _failed(runs), _failed(runs))
    size, causal = len(runs), runs[0]["causal"]
    mask = "causal" if causal else "no mask"
    for r in runs:
        expect(
            not r["off_group"],
            f"{mask}: rank {r['rank']} ran {r['off_group']} of its {r['collectives']} sends, receives or collectives "
            "on another process group than the `group` it was given (the default one?): pass group=group to each",
        )
    _output_right(runs)
    n = 2 * CHUNK
    kv = 2 * n * D * 8
    for r in runs:
        rank, nxt = r["rank"], r["next"]
        expect(not r["kinds"], f"{mask}: rank {rank} ran {', '.join(r['kinds'])}: the ring only sends and receives")
        where = sorted({d for d, _ in r["sent"]})
        expect(
            where in ([], [nxt]) and (where or size == 1),
            f"{mask}: rank {rank} sent to ranks {where}: each rank sends to the next one of the group, {nxt}",
        )
        sent = sum(b for _, b in r["sent"])
        least, most = (size - 1) * kv, (size - 1) * (kv + n * 8)
        expect(
            least <= sent <= most,
            f"{mask}: rank {rank} sent {sent} bytes; its K and V blocks ({kv} bytes), p - 1 = {size - 1} times, make "
            f"{least} (positions may go with them)",
        )
        limit = n * (2 * D + 1)
        expect(
            r["largest"] <= limit,
            f"{mask}: rank {rank} made a tensor of {r['largest']} numbers, more than a block's K, V and positions "
            f"together ({limit}): a rank holds one visiting block at a time, never the whole K or V",
        )
        needed = pairs_needed(r["pos"], size, causal)
        expect(r["pairs"] is not None, "`update` computed no matrix product: its scores and output use `@`")
        expect(
            abs(r["pairs"] - needed) < 1e-9,
            f"{mask}: rank {rank} computed the matrix products of {r['pairs']:g} (query half, key half) pairs, not "
            f"the {needed} its mask needs" + (": a pair whose mask is all False is skipped" if causal else ""),
        )


@check
def zigzag_balance(runs: list[dict]) -> None:
    """`runs`: ring_run on every rank, causal, with the chunks of the learner's `zigzag`. The chunks are a partition
    of 0..2p-1, the rows whole attention's, and every rank computed as many pairs of halves as every other."""
    expect(not _failed(runs), _failed(runs))
    size = len(runs)
    held = sorted(c for r in runs for c in r["chunks"])
    expect(
        held == list(range(2 * size)),
        f"on {size} ranks the ranks hold chunks {[r['chunks'] for r in runs]}: each of the {2 * size} chunks once",
    )
    _output_right(runs)
    work = [r["pairs"] for r in runs]
    expect(None not in work, "`update` computed no matrix product: its scores and output use `@`")
    expect(
        max(work) - min(work) < 1e-9,
        f"on {size} ranks, causal, the ranks computed {[round(w, 3) for w in work]} pairs of halves: not the same "
        "on every rank",
    )


# ---- bytes: the ring against Ulysses


def ulysses_run(seq: int, heads: int, dim: int, causal: bool = True) -> dict:
    """On every rank: course.context_parallel.ulysses_attention on its seq / p rows of a check's (seq, heads, dim)
    float64 sequence, against whole attention; what it sent to each rank."""
    import torch
    import torch.distributed as dist

    from course.context_parallel import attention, ulysses_attention
    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(seq, heads, dim, generator=g, dtype=torch.float64) for _ in range(3))
    n = seq // size
    rows = slice(rank * n, (rank + 1) * n)
    with Collectives() as seen:
        out = ulysses_attention(q[rows], k[rows], v[rows], causal)
    want = attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), causal).transpose(0, 1)[rows]
    return {"rank": rank, "error": float((out - want).abs().max()), "sent": sum(b for _, b in seen.sent)}


def ring_bytes_run(ring_attention, update, seq: int, heads: int, dim: int) -> int:
    """On every rank: `ring_attention` (calling `update`) on this rank's seq / p rows of a float64 sequence of `heads` heads of `dim`
    features (their heads side by side: the ring sends them all alike), no mask, over a gloo group the check makes;
    the bytes it sent."""
    import datetime

    import torch
    import torch.distributed as dist

    from course.torch_collectives import Collectives

    rank, size = dist.get_rank(), dist.get_world_size()
    n = seq // size
    pos = torch.arange(rank * n, (rank + 1) * n)
    q, k, v = _data(n, n, heads * dim, 20 + rank)
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=GROUP_TIMEOUT))
    try:
        with Collectives() as seen, lent(ring_attention, update=update):
            ring_attention(q, k, v, pos, False, group)
    finally:
        dist.destroy_process_group(group)
    return sum(b for _, b in seen.sent)


def bytes_runs(ring_attention, update, seq: int, heads: int, dim: int) -> dict:
    """On every rank: the bytes it sent in ring_bytes_run and in ulysses_run, by method (one job for both)."""
    ring = ring_bytes_run(ring_attention, update, seq, heads, dim)
    return {"ring": ring, "ulysses": ulysses_run(seq, heads, dim)["sent"]}


def figures_run(ring_attention, update, zigzag, sizes: tuple[int, int, int]) -> dict:
    """On every rank, for the notebook's figures in one job: the pairs of halves it computed, causal, with the plain
    and with the zig-zag split, and the bytes it sent in bytes_runs at `sizes` (tokens, heads, features)."""
    plain, zigzagged = ring_runs(ring_attention, [(True, None), (True, zigzag)], update)
    return {"plain": plain["pairs"], "zigzag": zigzagged["pairs"], **bytes_runs(ring_attention, update, *sizes)}


@check
def bytes_predicted(bytes_sent, measured: dict) -> None:
    """`measured`: (method, seq, heads, dim, ranks, itemsize) -> the bytes one rank sent in one attention forward,
    measured from what ran. `bytes_sent` says each (the ring's K and V: the positions sent with them are allowed)."""
    for (method, seq, heads, dim, ranks, itemsize), got in sorted(measured.items()):
        said = bytes_sent(method, seq, heads, dim, ranks, itemsize)
        positions = (ranks - 1) * (seq // ranks) * 8 if method == "ring" else 0  # may ride along with K and V
        expect(
            isinstance(said, (int, float)) and said <= got <= said + positions,
            f"{method} with {seq} tokens, {heads} heads of {dim}, {ranks} ranks, {itemsize}-byte numbers: a rank sent "
            f"{got} bytes" + (" (its keys' positions included)" if positions else "") + f", not {said}",
        )
