"""Which requests to the engines each notebook cell sent: the cluster notes, for every name a cell binds, the part
of its client's history that cell added, so that a check can judge an answer by the calls of the cell that made
it (not by an earlier run's calls that returned the same values).

    cells.watch(shell, client)       # done by course.cluster when it enables %px in IPython
    cells.requests_of(answers)       # (first, end) indices into client.history of the cell that bound `answers`
"""

from __future__ import annotations

from typing import Any


class _Watch:
    """The hooks on one IPython shell: before a cell, the history's length and what every name holds (by id);
    after it, the names that hold another object now, each with the history span the cell added."""

    def __init__(self, shell: Any, client: Any) -> None:
        self.shell, self.client = shell, client
        self.start, self.before = 0, {}
        self.bound: dict[str, tuple[int, int]] = {}

    def pre(self) -> None:
        self.start = len(self.client.history)
        self.before = {name: id(value) for name, value in self.shell.user_ns.items()}

    def post(self) -> None:
        span = (self.start, len(self.client.history))
        for name, value in self.shell.user_ns.items():
            if self.before.get(name) != id(value):
                self.bound[name] = span


_watch: _Watch | None = None


def watch(shell: Any, client: Any) -> None:
    """Note, from now on, which requests of `client` each cell of `shell` sent (replacing an earlier watch)."""
    global _watch
    unwatch()
    _watch = _Watch(shell, client)
    shell.events.register("pre_execute", _watch.pre)
    shell.events.register("post_execute", _watch.post)


def unwatch() -> None:
    """Stop noting (nothing when no watch runs)."""
    global _watch
    if _watch is not None:
        for event, hook in (("pre_execute", _watch.pre), ("post_execute", _watch.post)):
            try:
                _watch.shell.events.unregister(event, hook)
            except ValueError:
                pass
    _watch = None


def requests_of(value: object, client: Any) -> tuple[int, int] | None:
    """The span of `client.history` (first, end) sent by the cell that last bound a name now holding `value`, or
    None when no cell of a watched shell is known to have bound it (no IPython, another client, not a name)."""
    if _watch is None or _watch.client is not client:
        return None
    spans = [_watch.bound[n] for n, v in _watch.shell.user_ns.items() if v is value and n in _watch.bound]
    return max(spans) if spans else None
