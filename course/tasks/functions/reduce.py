"""`merge_reduce` and `merge_n_reduce` (as `pycompss.functions.reduce`): reduce a list with a task as a tree."""

from __future__ import annotations

from typing import Any, Callable


def merge_reduce(function: Callable, data: list) -> Any:
    """Combine the items pairwise, level by level (a binary tree: log2(n) levels of independent calls)."""
    return merge_n_reduce(function, 2, data)


def merge_n_reduce(function: Callable, arity: int, data: list) -> Any:
    """Combine the items `arity` at a time, the results joining the queue, until one is left."""
    items = list(data)
    if not items:
        raise ValueError("merge_reduce of an empty list")
    while len(items) > 1:
        group, items = items[:arity], items[arity:]
        items.append(function(*group))
    return items[0]
