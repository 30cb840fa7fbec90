"""Context (sequence) parallelism for notebook 14's part on attention: what one process measures of attention, and
DeepSpeed-Ulysses' all-to-all attention as a course tool (not an exercise).

    attention(q, k, v, causal=True)                     # one process, the whole sequence: softmax(q k^T / sqrt(d)) v
    with Ops() as ops:                                  # every op's outputs, seen from outside the code it runs
        attention(q, k, v)
    ops.largest, ops.flops                              # -> elements of the largest tensor made, matmul flops
    out = ulysses_attention(q, k, v, causal=True)       # on every rank: q, k, v (n, heads, d), its rows of S
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


def attention(q, k, v, causal: bool = False, q_pos=None, k_pos=None):
    """Softmax attention of one process: `softmax(q k^T / sqrt(d)) v` on the last two dimensions; with `causal`, a
    query attends the keys at its position or before (positions `q_pos`, `k_pos`: 0, 1, ... where not given)."""
    import torch

    scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        q_pos = torch.arange(q.shape[-2]) if q_pos is None else q_pos
        k_pos = torch.arange(k.shape[-2]) if k_pos is None else k_pos
        scores = scores.masked_fill(k_pos[None, :] > q_pos[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class Ops(TorchDispatchMode):
    """A dispatch mode that measures what ran under it: `largest`, the elements of the largest tensor any op made
    (its outputs); `flops`, the floating-point operations of its matrix products (aten.mm, bmm, addmm, baddbmm:
    2 per multiply-add); `made`, the outputs' elements by op name."""

    PRODUCTS = ("mm", "bmm", "addmm", "baddbmm")

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0
        self.flops = 0
        self.made: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        import torch

        out = func(*args, **(kwargs or {}))
        name = func.__name__.split(".")[0]
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
                self.made[name] = max(self.made.get(name, 0), t.numel())
        if func.namespace == "aten" and name in self.PRODUCTS:
            a, b = (args[1], args[2]) if name in ("addmm", "baddbmm") else (args[0], args[1])
            self.flops += 2 * a.numel() * b.shape[-1]
        return out


def largest_and_seconds(seq: int, dim: int = 64, repeat: int = 3) -> tuple[int, float]:
    """Whole causal attention of one head on `seq` tokens of `dim` features, float64: the bytes of the largest
    tensor it made, and its best time of `repeat` runs in seconds."""
    import time

    import torch

    q, k, v = (torch.randn(seq, dim, dtype=torch.float64) for _ in range(3))
    with Ops() as ops:
        attention(q, k, v, causal=True)
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        attention(q, k, v, causal=True)
        best = min(best, time.perf_counter() - start)
    return ops.largest * 8, best


def _all_to_all(x, scatter: int, gather: int, group=None):
    """Cut `x` in `size` parts along dimension `scatter`, send part j to rank j, and put the parts received back
    together along dimension `gather` (rank order)."""
    import torch
    import torch.distributed as dist

    size = dist.get_world_size(group)
    send = torch.stack(x.chunk(size, dim=scatter)).contiguous()  # (size, ...): part j for rank j
    received = torch.empty_like(send)
    dist.all_to_all_single(received, send, group=group)
    return torch.cat(received.unbind(0), dim=gather)


def ulysses_attention(q, k, v, causal: bool = False, group=None):
    """DeepSpeed-Ulysses (Jacobs et al., 2023) on every rank of `group`: q, k, v are this rank's n consecutive rows
    of the sequence, all heads: (n, heads, d). An all-to-all turns them into the whole sequence of heads / p heads
    (S, heads / p, d); each rank runs whole attention on its heads; an all-to-all back gives its rows, all heads."""
    import torch.distributed as dist

    size = dist.get_world_size(group)
    if q.shape[1] % size:
        raise ValueError(f"Ulysses cuts the {q.shape[1]} heads over {size} ranks: they must divide evenly")
    q, k, v = (_all_to_all(t, scatter=1, gather=0, group=group) for t in (q, k, v))  # (S, heads / p, d)
    out = attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), causal).transpose(0, 1)
    return _all_to_all(out, scatter=0, gather=1, group=group)  # (n, heads, d)
