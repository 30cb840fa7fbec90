"""Notebook 13's activation-checkpointing check: a forward pass that checkpoints the blocks it is told to, and the
choice of the fewest blocks to checkpoint so that what autograd saves for backward fits a budget. Everything runs
in the notebook's own process, on a chain of MLP blocks of unequal widths (`chain`, residual where the features
allow), and is measured from outside the answer: the bytes autograd saved (`saved_bytes`, with
`torch.autograd.graph.saved_tensors_hooks`), the blocks run again during backward (forward pre-hooks on the blocks),
and the gradients against the plain chain's.

    checkpoint(forward, choose, widths, batch, budgets, sets, dim)    # ex-checkpoint: bytes saved, blocks recomputed,
                                                                      # gradients, the fewest blocks for a budget

`per_block` and `trade` are the notebook's demonstrations: what each block saves, and the step time and bytes of a
forward pass the learner wrote, with none, some or all blocks checkpointed.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Sequence

import torch

from course.checks import check, expect

DIM = 32  # features between the blocks: every block's input and output (a list of them: each block's own)
WIDTHS = (64, 256, 32, 128, 192, 96)  # each block's hidden width (the exercise's chain)
BATCH = 16  # samples in the chain's input
# the checkpointed blocks the check runs the forward pass with, and the budgets (bytes) it asks `choose` for: one
# that one block fits exactly, one that needs three (two if a checkpointed block kept nothing), one that nothing
# needs to be checkpointed for, and one that even every block checkpointed does not fit
SETS = ((), (0,), (1, 3), (0, 1, 2, 3, 4, 5))
BUDGETS = (77_824, 52_000, 110_592, 12_287)
TOLERANCE = 1e-5  # relative: a block recomputed in backward computes what it computed in forward


class Block(torch.nn.Module):
    """An MLP block, down(gelu(up(x))) with `width` hidden features, `dim` in and `out` out (`dim` by default),
    residual (x added) where they are equal."""

    def __init__(self, dim: int, width: int, out: int | None = None) -> None:
        super().__init__()
        out = dim if out is None else out
        self.up, self.down, self.residual = torch.nn.Linear(dim, width), torch.nn.Linear(width, out), dim == out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(torch.nn.functional.gelu(self.up(x)))
        return x + y if self.residual else y


def features(widths: Sequence[int], dim: int | Sequence[int] = DIM) -> list[int]:
    """The features before each block and after the last: `dim` everywhere, or the list `dim` is."""
    found = [dim] * (len(widths) + 1) if isinstance(dim, int) else [int(d) for d in dim]
    assert len(found) == len(widths) + 1, f"{len(widths)} blocks need {len(widths) + 1} feature counts, not {dim}"
    return found


def chain(widths: Sequence[int] = WIDTHS, seed: int = 0, dim: int | Sequence[int] = DIM) -> torch.nn.ModuleList:
    """The blocks, in order, one per hidden width, float32; the same weights for the same seed."""
    dims = features(widths, dim)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return torch.nn.ModuleList(Block(dims[i], w, dims[i + 1]) for i, w in enumerate(widths))


def inputs(batch: int = BATCH, dim: int | Sequence[int] = DIM, seed: int = 1) -> torch.Tensor:
    """The chain's input: `batch` samples of the first block's features (it needs no gradient, as a batch of
    data)."""
    first = dim if isinstance(dim, int) else int(dim[0])
    return torch.randn(batch, first, generator=torch.Generator().manual_seed(seed))


def saved_bytes(run: Callable[[], object], blocks: torch.nn.Module) -> tuple[object, int]:
    """run()'s result, and the bytes autograd saved for backward while it ran: each storage once, the blocks'
    parameters left out (they are held anyway)."""
    params = {p.untyped_storage().data_ptr() for p in blocks.parameters()}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in params:
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = run()
    return result, sum(seen.values())


def per_block(blocks: torch.nn.ModuleList, x: torch.Tensor) -> list[tuple[int, int]]:
    """For each block, measured on the input it gets in the plain chain: the bytes it saves for backward when run
    as it is, and its input's bytes (what it keeps when checkpointed)."""
    found = []
    with torch.no_grad():
        ins = list(itertools.accumulate(blocks, lambda h, b: b(h), initial=x))[:-1]
    for block, h in zip(blocks, ins):
        _, plain = saved_bytes(lambda: block(h), block)
        found.append((plain, h.untyped_storage().nbytes()))
    return found


def _calls(blocks: torch.nn.ModuleList, run: Callable[[], object]) -> tuple[object, list[int]]:
    """run()'s result, and the blocks whose forward ran while it did, in order (forward pre-hooks)."""
    calls: list[int] = []
    handles = [b.register_forward_pre_hook(lambda m, a, i=i: calls.append(i)) for i, b in enumerate(blocks)]
    try:
        return run(), calls
    finally:
        for handle in handles:
            handle.remove()


def _plain(blocks: torch.nn.ModuleList, x: torch.Tensor) -> torch.Tensor:
    for block in blocks:
        x = block(x)
    return x


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE * float(b.abs().max()))


def _run_forward(
    forward: Callable, widths: Sequence[int], batch: int, dim: int | Sequence[int], chosen: list[int]
) -> None:
    """The answer's forward with `chosen` checkpointed, against the plain chain: its output, the blocks it ran
    forward and again in backward, every parameter's gradient, and the bytes it saved for backward."""
    x, said = inputs(batch, dim), f"with blocks {chosen} checkpointed"
    reference = chain(widths, dim=dim)
    expected = _plain(reference, x)
    probe = torch.randn(expected.shape, generator=torch.Generator().manual_seed(2))
    (expected * probe).sum().backward()
    blocks = chain(widths, dim=dim)
    out, forward_calls = _calls(blocks, lambda: forward(blocks, x, list(chosen)))
    expect(isinstance(out, torch.Tensor), f"{said}, forward returned a {type(out).__name__}, not the output tensor")
    expect(
        forward_calls == list(range(len(blocks))),
        f"{said}, the forward pass ran the blocks {forward_calls}: each once, in order",
    )
    expect(_close(out.detach(), expected.detach()), f"{said}, the output differs from the blocks run one by one")
    expect(out.requires_grad, f"{said}, the output needs no gradient: backward cannot reach the blocks")
    _, backward_calls = _calls(blocks, lambda: (out * probe).sum().backward())
    for i, (mine, theirs) in enumerate(zip(blocks, reference)):
        for (name, p), q in zip(mine.named_parameters(), theirs.parameters()):
            expect(
                p.grad is not None,
                f"{said}, block {i}'s {name} got no gradient: backward never reached that block (its input needs none)",
            )
            expect(_close(p.grad, q.grad), f"{said}, block {i}'s {name} gradient differs from the plain chain's")
    expect(
        sorted(backward_calls) == sorted(chosen),
        f"{said}, the blocks run again during backward were {sorted(backward_calls)}: a checkpointed block, and "
        "only one, runs its forward again there",
    )
    sizes = per_block(chain(widths, dim=dim), x)
    should = sum(kept if i in chosen else plain for i, (plain, kept) in enumerate(sizes))
    blocks = chain(widths, dim=dim)
    _, saved = saved_bytes(lambda: forward(blocks, x, list(chosen)), blocks)
    expect(
        saved == should,
        f"{said}, the forward pass saved {saved:,d} bytes for backward, not {should:,d}: a checkpointed block keeps "
        "only its input, the others all they need for backward",
    )


def _fewest(sizes: list[tuple[int, int]], budget: int) -> int | None:
    """How many blocks at least must be checkpointed for the saved bytes to fit `budget` (None: no number does)."""
    for k in range(len(sizes) + 1):
        for chosen in itertools.combinations(range(len(sizes)), k):
            if sum(kept if i in chosen else plain for i, (plain, kept) in enumerate(sizes)) <= budget:
                return k
    return None


def _run_choose(
    forward: Callable, choose: Callable, widths: Sequence[int], batch: int, dim: int | Sequence[int], budget: int
) -> None:
    """The answer's choice for `budget`, measured: the forward pass with those blocks checkpointed fits it, and
    no smaller number of blocks would."""
    x, blocks = inputs(batch, dim), chain(widths, dim=dim)
    sizes = per_block(blocks, x)
    saved, kept = [p for p, _ in sizes], [k for _, k in sizes]
    chosen = choose(list(saved), list(kept), budget)
    fewest, said = _fewest(sizes, budget), f"for a budget of {budget:,d} bytes, blocks saving {saved} (kept {kept})"
    if chosen is None:
        expect(fewest is None, f"{said}, choose returned None, but checkpointing {fewest} block(s) fits")
        return
    expect(
        fewest is not None,
        f"{said}, even every block checkpointed does not fit: choose should return None, not {chosen!r}",
    )
    try:
        indices = [int(i) for i in chosen]
    except (TypeError, ValueError):
        expect(False, f"{said}, choose returned {chosen!r}: a list of block indices (or None)")
    expect(
        all(0 <= i < len(blocks) for i in indices) and len(set(indices)) == len(indices),
        f"{said}, choose returned {indices}: each block's index (0 to {len(blocks) - 1}) at most once",
    )
    _, measured = saved_bytes(lambda: forward(blocks, x, sorted(indices)), blocks)
    expect(
        measured <= budget,
        f"{said}, with your choice {sorted(indices)} checkpointed the forward pass saved {measured:,d} bytes, over "
        "the budget",
    )
    expect(
        len(indices) == fewest,
        f"{said}, your choice of {len(indices)} block(s) fits, but {fewest} would: each checkpointed block costs one "
        "more forward pass of it",
    )


@check
def checkpoint(
    forward: Callable,
    choose: Callable,
    widths: Sequence[int] = WIDTHS,
    batch: int = BATCH,
    budgets: Iterable[int] = BUDGETS,
    sets: Iterable[Sequence[int]] = SETS,
    dim: int | Sequence[int] = DIM,
) -> None:
    """Exercise `ex-checkpoint`, on the chain of `widths` (`dim`: its features, see `features`) and `batch`
    samples. `forward(blocks, x, checkpointed)`: with each of `sets` checkpointed, the output and every gradient are
    the plain chain's, the checkpointed blocks and only they run again in backward, and the bytes saved for backward
    are the plain blocks' and the checkpointed ones' inputs. `choose(saved, kept, budget)`: for each of `budgets`,
    blocks whose checkpointing makes the answer's forward pass save at most `budget` bytes, as few as can; None where
    none do."""
    for chosen in sets:
        _run_forward(forward, widths, batch, dim, list(chosen))
    for budget in budgets:
        _run_choose(forward, choose, widths, batch, dim, budget)


def trade(
    forward: Callable,
    sets: Iterable[Sequence[int]],
    widths: Sequence[int] = WIDTHS,
    batch: int = BATCH,
    dim: int = DIM,
    repeat: int = 7,
) -> list[dict]:
    """For each of `sets` checkpointed: the bytes `forward` saved for backward, and its step (forward and
    backward) time in ms, the best of `repeat`, on one thread. The sets take turns, so that a busy machine slows
    them alike."""
    threads, sets = torch.get_num_threads(), [list(s) for s in sets]
    torch.set_num_threads(1)
    try:
        x, models = inputs(batch, dim), [chain(widths, dim=dim) for _ in sets]
        saved = [saved_bytes(lambda: forward(m, x, list(s)), m)[1] for m, s in zip(models, sets)]
        best = [float("inf")] * len(sets)
        for turn in range(repeat + 1):  # the first turn warms the allocator up, untimed
            for k, (blocks, chosen) in enumerate(zip(models, sets)):
                start = time.perf_counter()
                forward(blocks, x, list(chosen)).square().mean().backward()
                if turn:
                    best[k] = min(best[k], time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return [{"checkpointed": s, "saved": b, "ms": 1e3 * t} for s, b, t in zip(sets, saved, best)]
