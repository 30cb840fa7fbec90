"""Which process ran a learner's function: the calls the notebook's ipyparallel client sent to its engines, read
back from the controller's own task records (which engine, which function, with which arguments, what it
returned), and the calls a function got in the notebook's own process.

    calls = where.engine_calls(cluster.client)                  # every call sent to an engine, oldest first
    [c for c in calls if c.function == "train_shard"]           # .engine, .arguments (defaults filled in), .result
    with where.counting(nn, "gradients") as kernel:             # calls of nn.gradients in the notebook itself
        parallel_gradient(view, params, x, y)
    kernel.calls                                                # 0 when the engines did the work
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineCall:
    """One call an engine ran for the client: `arguments` are bound to the function's parameters with their
    defaults filled in ({} when the function's signature cannot be read)."""

    engine: int | None
    function: str
    arguments: dict[str, Any] = field(default_factory=dict)
    result: Any = None


def _bound(function: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    try:
        bound = inspect.signature(function).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {}
    bound.apply_defaults()
    return dict(bound.arguments)


def _calls_of(record: dict, engines: dict) -> list[EngineCall]:
    """The calls one task record holds: one, or one per element of a map's chunk (ipyparallel's `_map`)."""
    from ipyparallel.serialize import deserialize_object, unpack_apply_message

    function, args, kwargs = unpack_apply_message(record["buffers"], copy=True)
    result = deserialize_object(record["result_buffers"])[0] if record.get("result_buffers") else None
    engine = engines.get(record.get("engine_uuid"))
    if getattr(function, "__name__", "") == "_map" and args and callable(args[0]):
        inner, elements = args[0], list(zip(*args[1:]))
        results = list(result) if isinstance(result, (list, tuple)) else [None] * len(elements)
        name = getattr(inner, "__name__", "?")
        return [EngineCall(engine, name, _bound(inner, e, {}), r) for e, r in zip(elements, results)]
    return [EngineCall(engine, getattr(function, "__name__", "?"), _bound(function, args, kwargs), result)]


def _records(client: Any, ids: list[str], patience: float = 60.0) -> list[dict]:
    """The controller's records of `ids`, once it has noted them all as completed: the client can get a result
    before the controller has recorded it, so this asks again (a short sleep each time) for up to `patience`
    seconds, then returns what is recorded."""
    import time

    keys = ["msg_id", "buffers", "result_buffers", "engine_uuid", "submitted", "completed"]
    deadline = time.monotonic() + patience
    while True:
        records = client.db_query({"msg_id": {"$in": ids}}, keys=keys)
        done = len(records) == len(ids) and all(r.get("completed") is not None for r in records)
        if done or time.monotonic() > deadline:
            return records
        time.sleep(0.05)


def engine_calls(client: Any, since: int = 0, until: int | None = None) -> list[EngineCall]:
    """Every call `client` sent to an engine from its `since`-th request up to (not including) its `until`-th,
    oldest first, as the controller recorded it (requests that were not calls, such as a push, are left out)."""
    ids = list(client.history)[since:until]
    if not ids:
        return []
    records = _records(client, ids)
    engines = {uuid.decode() if isinstance(uuid, bytes) else uuid: engine for engine, uuid in client._engines.items()}
    calls: list[EngineCall] = []
    for record in sorted(records, key=lambda r: (r.get("submitted") is None, r.get("submitted") or 0)):
        try:
            calls.extend(_calls_of(record, engines))
        except Exception:  # a push, an execute or a record that does not unpack: not a call
            continue
    return calls


def same(a: Any, b: Any) -> bool:
    """Whether two returned values are equal (NumPy arrays and dicts of them included), without raising."""
    try:
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        import numpy as np

        return bool(np.array_equal(np.asarray(a), np.asarray(b))) if hasattr(a, "shape") else bool(a == b)
    except Exception:
        return False


@dataclass
class Counted:
    """How often a function was called in this process while a `counting` block ran."""

    calls: int = 0


@contextmanager
def counting(owner: Any, name: str) -> Iterator[Counted]:
    """Count the calls of `owner.name` (a module's function) made in this process inside the block; the function
    itself still runs and is put back afterwards."""
    original, counted = getattr(owner, name), Counted()

    def wrapper(*args, **kwargs):
        counted.calls += 1
        return original(*args, **kwargs)

    setattr(owner, name, wrapper)
    try:
        yield counted
    finally:
        setattr(owner, name, original)
