"""What notebooks call to check a learner's answer, one module per notebook or topic (CONTRIBUTING.md says how to
add one). A check is a plain function that returns what is wrong in words, or None when nothing is: the notebook's
check cell asserts that it returned None, so the learner reads the words and nbgrader scores the cell. Never a
reference implementation a learner could call instead of the exercise (the hidden tests stay in the cells). What
a check runs on the engines goes through `deadline`, so that a stuck rank is told, not waited for.

    @check
    def ring(allreduce, view) -> None:
        expect(all(deadline.apply(view, matches, allreduce)), "a rank's sum differs from MPI.Allreduce")

    ring(my_ring_allreduce, view)      # -> "a rank's sum differs from MPI.Allreduce", or None
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import ParamSpec

P = ParamSpec("P")


class Wrong(Exception):
    """What a check found wrong with an answer, in words a learner can act on (never the answer itself)."""


def expect(condition: object, message: str) -> None:
    """Stop the check with `message` unless `condition` holds."""
    if not condition:
        raise Wrong(message)


def check(function: Callable[P, None]) -> Callable[P, str | None]:
    """A check written as a series of `expect`s, returning its first problem's words (None when there is none).
    Other exceptions (the learner's own code failing) go through: the check cell shows them as they are."""

    @functools.wraps(function)
    def first_problem(*args: P.args, **kwargs: P.kwargs) -> str | None:
        try:
            function(*args, **kwargs)
        except Wrong as wrong:
            return str(wrong)
        return None

    return first_problem


@contextlib.contextmanager
def lent(function: Callable, **names: object) -> Iterator[None]:
    """Bind NAMES in FUNCTION's globals for the block, then put back what was there: a learner's function sent to
    an engine calls their other functions by name, and the engine's namespace lacks them or holds an older one."""
    space = function.__globals__
    before = {name: space[name] for name in names if name in space}
    space.update(names)
    try:
        yield
    finally:
        for name in names:
            if name in before:
                space[name] = before[name]
            else:
                space.pop(name, None)
