"""What a check runs on the notebook's engines, answered within a deadline, and the engines left usable.

A wrong answer can leave engines waiting for ever: a rank that raises (or returns) before a collective its peers
are in, collectives of different sizes, an endless loop. `apply` then says which engine raised what and which did
not finish, restarts the cluster's engines (a rank inside MPI cannot be interrupted), and the check returns those
words, so the learner fixes the answer and runs the same cell again.

    results = deadline.apply(view, sharded.trained, train, state, step)   # in a check: one result per engine
    results, problem = deadline.gather(view, sharded.trained, ...)          # in a check cell: or what went wrong
    gradient = deadline.call(view, parallel_gradient, view, params, x, y)    # an answer that uses the view itself
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from course.checks import Wrong

DEADLINE = 60.0  # s: the checks' cases take well under a second on each engine; a loaded machine, far less than this
GRACE = 5.0  # s the other engines get once one raised: a peer waiting for it inside a collective never returns


def apply(view, function: Callable, *args, seconds: float = DEADLINE, **kwargs) -> list:
    """`view.apply_sync(function, *args, **kwargs)`, or Wrong within `seconds` when an engine did not finish.

    An exception on every engine that finished, with all of them finished, is raised as ipyparallel raises it."""
    result = view.apply_async(function, *args, **kwargs)
    _wait(result, seconds)
    if result.ready():
        return result.get()
    engines = list(result._targets) if isinstance(result._targets, (list, tuple)) else [result._targets]
    raised = {e: _raised(f) for e, f in zip(engines, result._children) if _raised(f)}
    waiting = [e for e, f in zip(engines, result._children) if not f.done()]
    name = getattr(function, "__name__", "the check's call")
    message = _words(name, raised, waiting, seconds)
    raise Wrong(f"{message} {_restart(view)}")


def gather(view, function: Callable, *args, seconds: float = DEADLINE, **kwargs) -> tuple[list | None, str | None]:
    """For a check cell: (each engine's result, None), or (None, what went wrong) as `apply` words it.

    _zero, _problem = deadline.gather(view, sharded.trained, train, zero_state, zero_step, SIZES, STEPS)
    assert not _problem, _problem
    """
    try:
        return apply(view, function, *args, seconds=seconds, **kwargs), None
    except Wrong as wrong:
        return None, str(wrong)


def call(view, function: Callable, *args, seconds: float = DEADLINE) -> Any:
    """`function(*args)`, run here for an answer that sends work to the engines of `view` itself; Wrong within
    `seconds` when it has not returned (the engines restarted: what it waits for then fails)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = function(*args)
        except BaseException as exc:  # raised here, in the check's own thread, as a direct call would
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        name = getattr(function, "__name__", "answer")
        raise Wrong(
            f"your {name} did not return within {seconds:.0f} s: does the work it sends to every engine end, and "
            f"does it wait only for results it asked for? {_restart(view)}"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def _wait(result, seconds: float) -> None:
    """Until every engine answered, `seconds` passed, or GRACE passed since one raised."""
    deadline = time.monotonic() + seconds
    while not result.ready() and time.monotonic() < deadline:
        if any(_raised(f) for f in result._children):
            deadline = min(deadline, time.monotonic() + GRACE)
        result.wait(0.1)


def _raised(future) -> BaseException | None:
    """What one engine raised, once it answered (ipyparallel sets an engine's error as its message's result)."""
    if not future.done():
        return None
    answer = future.exception() or future.result()
    return answer if isinstance(answer, BaseException) else None


def _words(name: str, raised: dict, waiting: list, seconds: float) -> str:
    """One line: which engines did not finish, and what the others raised."""
    plural = "s" if len(waiting) > 1 else ""
    stuck = f"engine{plural} {', '.join(map(str, waiting))}"
    if raised:
        errors = "; ".join(f"engine {e} raised {_error(x)}" for e, x in raised.items())
        return (
            f"{errors}, and {stuck} never finished {name}: a rank that stops before a collective leaves its peers "
            "waiting in it."
        )
    return (
        f"{stuck} did not finish {name} within {seconds:.0f} s: does every rank reach the same collectives, with "
        "the same sizes, and does every send have a matching receive?"
    )


def _error(exc: BaseException) -> str:
    """A remote exception as 'Name: message' (ipyparallel's RemoteError keeps the engine's own type and text)."""
    kind = getattr(exc, "ename", None) or type(exc).__name__
    text = getattr(exc, "evalue", None) or str(exc)
    return f"{kind}: {text}" if text else kind


def _restart(view) -> str:
    """Restart the engines of the cluster `view` belongs to and point `view` at the new ones; what to tell."""
    running = getattr(view.client, "course_cluster", None)  # the course's handle on the view's cluster
    if running is None or running.stopped:
        return "Restart the engines (cluster.restart()) before running the cell again."
    grouped = running.torch_group is not None
    running.restart()
    view.targets = running.view.targets  # the learner's own `view` reaches the new engines too
    if grouped:  # a PyTorch notebook's engines are one process group: the new ones are made one again
        from course import torch_group

        torch_group.form(running)
        return (
            "The engines were restarted and formed into a process group again; anything else earlier cells "
            "defined on them is gone: run this cell again (and those cells, if it needs them)."
        )
    return (
        "The engines were restarted, so anything earlier cells defined on them is gone: run those cells and this "
        "one again."
    )
