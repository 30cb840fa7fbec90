"""Noticing answers that call what already exists instead of writing the exercise: the course's own versions
(`references()`: course.comm's and the instructor's `course.answers.ALL`; notebook 05's checks `Watch` the
course.averaging strategies) or MPI's collectives where the text forbids them. It holds no answer."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any
from types import CodeType

from course.comm import COLLECTIVE_CALLS, mpi_allreduce, reduce_scatter_allgather

# MPI's collectives by the names mpi4py gives them; the lower-case reduce/gather/scatter are left out of the static
# reading because NumPy and functools use the same words (the counting communicator still sees them on the comm).
MPI_COLLECTIVES = COLLECTIVE_CALLS - {"reduce", "gather", "scatter"}


def _codes(function: Callable) -> Iterable[CodeType]:
    """The code objects that run when `function` is called: its own, those of what it wraps, and of the functions
    its closure holds (a wrapper made by a decorator factory, as course.averaging's fit_* are)."""
    seen = 0
    while function is not None and seen < 5:
        inner = getattr(function, "function", None)  # a course.tasks task
        code = getattr(function, "__code__", None)
        if code is not None:
            yield code
        for cell in getattr(function, "__closure__", None) or ():
            held = getattr(cell, "cell_contents", None)
            if callable(held) and getattr(held, "__code__", None) is not None:
                yield held.__code__
        function = getattr(function, "__wrapped__", None) or inner
        seen += 1


def _qualified(function: Callable) -> str:
    module = getattr(function, "__module__", None) or getattr(getattr(function, "function", None), "__module__", "")
    return f"{module}.{getattr(function, '__name__', '?')}".lstrip(".")


def names_used(function: Callable) -> set[str]:
    """Every global and attribute name the code of `function` (nested functions included) refers to."""
    names: set[str] = set()
    stack = list(_codes(function))
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return names


def collectives_named(function: Callable) -> list[str]:
    """The MPI collectives the code of `function` names (comm.allreduce, MPI.COMM_WORLD.Allreduce, ...), sorted."""
    return sorted(names_used(function) & MPI_COLLECTIVES)


class Watch:
    """A `with` block that records which of `references` run inside it, however they were reached (an alias, an
    import, a wrapper): it watches code objects, not names. `called` lists their names in the order first seen."""

    def __init__(self, references: Iterable[Callable]) -> None:
        owners: dict[CodeType, list[str]] = {}
        for function in references:
            for code in _codes(function):
                owners.setdefault(code, []).append(_qualified(function))
        # a code several references share (one wrapper around each) names none of them: what it wraps does
        self._names = {code: names[0] for code, names in owners.items() if len(names) == 1}
        self._shared = {code: " or ".join(names) for code, names in owners.items() if len(names) > 1}
        self.called: list[str] = []
        self._previous = None

    def _profile(self, frame, event, arg):
        if event == "call":
            name = self._names.get(frame.f_code) or self._shared.get(frame.f_code)
            if name is not None and name not in self.called:
                self.called.append(name)

    def __enter__(self) -> Watch:
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc) -> None:
        sys.setprofile(self._previous)
        specific = [name for name in self.called if name not in self._shared.values()]
        self.called = specific or self.called


def call_watched(
    function: Callable, comm, *args, references: Iterable[Callable] = (), collectives: bool = False, **kwargs
) -> tuple[Any, str]:
    """`function(comm, *args, **kwargs)` with its collectives counted (course.comm.CountingComm) and `references`
    watched: (the result, '' or what the answer called instead of doing the work: one phrase). With `collectives`
    False an answer that names or asks for any MPI collective is refused before it runs (on every rank alike)."""
    from course.comm import CountingComm

    named = [] if collectives else collectives_named(function)
    if named:
        return None, f"it calls MPI's {named[0]}"
    counted = CountingComm(comm)
    with Watch(references) as seen:
        result = function(counted, *args, **kwargs)
    if seen.called:
        return result, f"it calls {seen.called[0]}, the course's own version"
    if not collectives and counted.calls:
        return result, f"it asks MPI for {counted.calls} collective(s)"
    return result, ""


def shortcut(function: Callable, *args, collectives: bool = False, **kwargs) -> str:
    """On an MPI rank (an engine): '' or what `function(MPI.COMM_WORLD, *args, **kwargs)` called instead of doing
    the exchange itself (the course's own versions, `references`, or MPI's collectives where the
    exercise forbids them). Notebooks 03 and 04 run it on every engine with `view.apply_sync`."""
    from mpi4py import MPI

    return call_watched(function, MPI.COMM_WORLD, *args, references=references(), collectives=collectives, **kwargs)[1]


def references() -> tuple[Callable, ...]:
    """The course's own versions of the exchanges learners write, which a check refuses in an answer: the two built
    on MPI's collectives in course.comm, and `course.answers.ALL` where it exists (not in the student copy, which
    has nothing more to call)."""
    try:
        from course import answers
    except ImportError:
        return (reduce_scatter_allgather, mpi_allreduce)
    return (reduce_scatter_allgather, mpi_allreduce, *answers.ALL)
