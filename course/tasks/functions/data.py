"""`generator` and `chunks` (as `pycompss.functions.data`): random fragments made by tasks, and list splitting."""

from __future__ import annotations

from typing import Any, Iterator

from course.tasks.decorators import task
from course.tasks.sync import compss_wait_on


@task(returns=1)
def _fragment(dim: int, rows: int, seed: int, distribution: str) -> Any:
    import numpy as np

    rng = np.random.default_rng(seed)
    if distribution == "normal":
        return rng.normal(size=(rows, dim))
    if distribution == "uniform":
        return rng.uniform(-1.0, 1.0, size=(rows, dim))
    return rng.random((rows, dim))


def generator(
    size: tuple[int, int], num_frag: int, seed: int = 0, distribution: str = "random", wait: bool = False
) -> list:
    """`num_frag` fragments of a (size[0] x size[1]) random dataset, each made by a task (Futures unless wait)."""
    if distribution not in ("random", "normal", "uniform"):
        raise ValueError(f"distribution {distribution!r}: use random, normal or uniform")
    rows = size[0] // num_frag
    data = [_fragment(size[1], rows, seed + i, distribution) for i in range(num_frag)]
    return compss_wait_on(data) if wait else data


def chunks(lst: list, n: int, balanced: bool = False) -> Iterator[list]:
    """Split `lst` into pieces of `n` items (balanced: into `n` pieces of nearly equal size)."""
    if balanced:
        size, extra = divmod(len(lst), n)
        start = 0
        for i in range(n):
            end = start + size + (1 if i < extra else 0)
            yield lst[start:end]
            start = end
    else:
        for i in range(0, len(lst), n):
            yield lst[i : i + n]
