"""course.shortcuts: an answer that calls the course's reference code or MPI's collectives is noticed, however it
reaches them; an answer that does the work itself is not. One process (a one-rank MPI world)."""

from __future__ import annotations

import numpy as np
import pytest

from course import averaging, shortcuts
from course.shortcuts import Watch, call_watched, collectives_named, names_used

mpi4py = pytest.importorskip("mpi4py")


def _world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def own_ring(c, x):
    """Does the exchange itself: point-to-point only."""
    out = np.array(x, copy=True)
    c.Sendrecv(np.ascontiguousarray(x), dest=c.Get_rank(), recvbuf=np.empty_like(out), source=c.Get_rank())
    return out


def lower_case_allreduce(c, x):
    return c.allreduce(np.asarray(x))


def world_allreduce(c, x):
    from mpi4py import MPI

    out = np.empty_like(x)
    MPI.COMM_WORLD.Allreduce(x, out, op=MPI.SUM)  # bypasses the communicator it was given
    return out


def via_reference(c, x):
    from course.answers import ring_allreduce as mine  # an alias hides the name, not the code

    return mine(c, x)


def numpy_reduce(c, x):
    return np.add.reduce(np.asarray(x)) + 0 * c.Get_rank()


def test_collectives_are_read_from_the_code_wherever_they_are_called():
    assert collectives_named(lower_case_allreduce) == ["allreduce"]
    assert collectives_named(world_allreduce) == ["Allreduce"]
    assert collectives_named(own_ring) == [] and collectives_named(numpy_reduce) == []  # NumPy's reduce is not MPI's


def test_watch_sees_the_reference_through_an_alias_and_nothing_else():
    x = np.arange(4.0)
    with Watch(shortcuts.references()) as seen:
        via_reference(_world(), x)
    assert seen.called == ["course.answers.ring_allreduce"]
    with Watch(shortcuts.references()) as seen:
        own_ring(_world(), x)
    assert seen.called == []


@pytest.mark.parametrize(
    "function,named",
    [
        (lower_case_allreduce, "MPI's allreduce"),
        (world_allreduce, "MPI's Allreduce"),
        (via_reference, "course.answers.ring_allreduce, the course's own version"),
    ],
)
def test_call_watched_names_each_shortcut(function, named):
    _, used = call_watched(function, _world(), np.arange(4.0), references=shortcuts.references())
    assert named in used, used


def test_call_watched_passes_own_work_and_allowed_collectives():
    result, used = call_watched(own_ring, _world(), np.arange(4.0), references=shortcuts.references())
    assert used == "" and np.array_equal(result, np.arange(4.0))
    result, used = call_watched(world_allreduce, _world(), np.arange(4.0), collectives=True)
    assert used == "" and np.array_equal(result, np.arange(4.0))  # K-Means may all-reduce; only the reference counts


def test_a_task_is_watched_through_its_function():
    assert "worker_aggregate" in names_used(lambda g, w, f: averaging.worker_aggregate(g, w, f))
    with Watch([averaging.worker_aggregate]) as seen:
        averaging.worker_aggregate.function([np.zeros(2)], [np.ones(2)], 0.5)
    assert seen.called == ["course.averaging.worker_aggregate"]


def _strategy(schedule):
    """A decorator like course.averaging's: every strategy shares this wrapper's code."""

    def wrapper(*args):
        return schedule(*args)

    wrapper.__name__ = schedule.__name__
    return wrapper


@_strategy
def alpha():
    return 1


@_strategy
def beta():
    return 2


def test_strategies_sharing_a_wrapper_are_named_by_what_each_wraps():
    """course.averaging's fit_sync, fit_async and fit_full_async share one wrapper's code, as these two do."""
    with Watch([alpha, beta]) as seen:
        alpha()
    assert seen.called == [f"{__name__}.alpha"], seen.called
    assert set(_codes_of(averaging.fit_sync)) - set(_codes_of(averaging.fit_async))  # the schedules differ


def _codes_of(function):
    from course.shortcuts import _codes

    return list(_codes(function))
