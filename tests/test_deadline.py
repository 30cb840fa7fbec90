"""course.checks.deadline: a check that runs a wrong answer on MPI engines answers within its deadline, says which
engine raised or did not finish, and leaves the engines usable: the next call, on the same view, runs."""

from __future__ import annotations

import time

import pytest
from ipyparallel import interactive

from course.checks import Wrong, deadline

SECONDS = 5.0  # the deadline these tests give: the cases below finish in milliseconds when they finish at all


@interactive  # sent by value: the engines cannot import this test module
def raises_before_the_collective():
    import numpy as np
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 0:
        raise ZeroDivisionError("rank 0 stops here")
    out = np.zeros(4)
    MPI.COMM_WORLD.Allreduce(np.ones(4), out)


@interactive  # sent by value: the engines cannot import this test module
def sizes_differ():
    import numpy as np
    from mpi4py import MPI

    n = 4 if MPI.COMM_WORLD.rank == 0 else 400_000  # as n_params // size where the ranks' shards differ
    out = np.zeros(n)
    MPI.COMM_WORLD.Allreduce(np.ones(n), out)


@interactive  # sent by value: the engines cannot import this test module
def one_rank_skips_the_collective():
    import numpy as np
    from mpi4py import MPI

    if MPI.COMM_WORLD.rank == 1:
        return None
    out = np.zeros(4)
    MPI.COMM_WORLD.Allreduce(np.ones(4), out)


@interactive  # sent by value: the engines cannot import this test module
def loops_for_ever_on_one_rank():
    from mpi4py import MPI

    while MPI.COMM_WORLD.rank == 1:
        pass


@interactive  # sent by value: the engines cannot import this test module
def right():
    import numpy as np
    from mpi4py import MPI

    out = np.zeros(4)
    MPI.COMM_WORLD.Allreduce(np.ones(4), out)
    return MPI.COMM_WORLD.rank, out.tolist()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    from course import cluster

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython-deadline")))
        started = cluster.start(2, engines="mpi", cluster_id="t-deadline", quiet=True)
        try:
            yield started
        finally:
            started.stop()


@pytest.mark.parametrize(
    "answer, words",
    [
        (raises_before_the_collective, "engine 0 raised ZeroDivisionError: rank 0 stops here, and engine 1 never"),
        (sizes_differ, "engine"),
        (one_rank_skips_the_collective, "engine 0 did not finish one_rank_skips_the_collective within 5 s"),
        (loops_for_ever_on_one_rank, "engine 1 did not finish loops_for_ever_on_one_rank within 5 s"),
    ],
    ids=lambda a: getattr(a, "__name__", ""),
)
def test_a_wrong_answer_is_told_within_the_deadline_and_the_engines_run_the_next_call(
    engines, answer, words, monkeypatch
):
    view = engines.view
    restarts, restart = [], type(engines).restart

    def timed_restart(self):  # the real restart, timed: it takes as long as starting engines on this node does
        began = time.monotonic()
        try:
            return restart(self)
        finally:
            restarts.append(time.monotonic() - began)

    monkeypatch.setattr(type(engines), "restart", timed_restart)
    began = time.monotonic()
    with pytest.raises(Wrong) as told:
        deadline.apply(view, answer, seconds=SECONDS)
    took = time.monotonic() - began
    assert words in str(told.value)
    assert "The engines were restarted" in str(told.value) and len(restarts) == 1, restarts
    deciding = took - restarts[0]  # from the call to the verdict, the restart aside
    assert deciding < SECONDS + deadline.GRACE + 20, f"told after {deciding:.0f} s and a {restarts[0]:.0f} s restart"
    assert deadline.apply(view, right) == [(0, [2.0] * 4), (1, [2.0] * 4)]


def test_an_answer_that_raises_on_every_engine_it_finished_on_is_raised_as_ipyparallel_raises_it(engines):
    from ipyparallel.error import CompositeError

    @interactive
    def raises_on_rank_1():
        from mpi4py import MPI

        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("only here")
        return 1

    ids = list(engines.view.targets)
    with pytest.raises(CompositeError, match="only here"):
        deadline.apply(engines.view, raises_on_rank_1, seconds=SECONDS)
    assert list(engines.view.targets) == ids, "engines that all answered are not restarted"


def test_a_check_cell_gets_the_results_or_the_words_and_the_notebook_states_the_deadline(engines):
    assert deadline.gather(engines.view, right) == ([(0, [2.0] * 4), (1, [2.0] * 4)], None)
    results, words = deadline.gather(engines.view, raises_before_the_collective, seconds=SECONDS)
    assert results is None and "engine 0 raised ZeroDivisionError" in words
    assert deadline.gather(engines.view, right)[0] == [(0, [2.0] * 4), (1, [2.0] * 4)]
    # what notebook 03 tells learners, where MPI exercises first appear
    assert deadline.DEADLINE <= 60
    assert "A check does not wait: within a minute" in " ".join(_text_of("03_parallelism_and_collectives").split())


def _text_of(notebook: str) -> str:
    import nbformat

    from tests.conftest import ROOT

    cells = nbformat.read(str(ROOT / "solutions" / f"{notebook}.ipynb"), as_version=4).cells
    return "\n".join(c.source for c in cells if c.cell_type == "markdown")


def test_no_check_calls_the_engines_without_a_deadline():
    """Every check module and every graded cell (its hidden tests too) reaches the engines through `deadline`."""
    import ast

    import nbformat

    from tests.conftest import ROOT

    def bare_calls(source: str) -> list[str]:
        calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)]
        return [ast.unparse(c)[:80] for c in calls if getattr(c.func, "attr", "") in ("apply_sync", "apply_async")]

    found = [
        f"{path.name}: {call}"
        for path in sorted((ROOT / "course" / "checks").glob("*.py"))
        if path.name != "deadline.py"
        for call in bare_calls(path.read_text())
    ]
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for cell in nbformat.read(str(path), as_version=4).cells:
            if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
                found += [f"{path.name}: {call}" for call in bare_calls(cell.source)]
    assert found == [], found


def test_an_answer_that_sends_work_to_the_engines_itself_is_told_within_the_deadline(engines):
    def parallel_answer(view):  # as notebook 02's parallel_gradient, with an engine that never returns
        return view.apply_sync(loops_for_ever_on_one_rank)

    with pytest.raises(Wrong, match="your parallel_answer did not return within 5 s") as told:
        deadline.call(engines.view, parallel_answer, engines.view, seconds=SECONDS)
    assert "The engines were restarted" in str(told.value)
    assert deadline.call(engines.view, lambda v: v.apply_sync(right), engines.view) == [(0, [2.0] * 4), (1, [2.0] * 4)]
    with pytest.raises(ZeroDivisionError):  # the answer's own error, as a direct call raises it
        deadline.call(engines.view, lambda: 1 / 0)


@interactive  # sent by value: the engines cannot import this test module
def rank_0_waits_for_a_peer_that_returned():
    import torch
    import torch.distributed as dist

    if dist.get_rank() == 0:
        dist.recv(torch.zeros(1), src=1)  # rank 1 never sends


@interactive  # sent by value: the engines cannot import this test module
def group_sum():
    import torch
    import torch.distributed as dist

    t = torch.ones(1)
    dist.all_reduce(t)
    return dist.get_rank(), float(t)


def test_engines_restarted_after_a_stuck_collective_are_one_process_group_again(tmp_path_factory):
    """A PyTorch notebook's engines are one gloo group; a learner runs the same check cell again after a restart."""
    from course import cluster, torch_group

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython-deadline-torch")))
        started = cluster.start(2, engines="local", cluster_id="t-deadline-torch", quiet=True)
        try:
            torch_group.form(started)
            with pytest.raises(Wrong) as told:
                deadline.apply(started.view, rank_0_waits_for_a_peer_that_returned, seconds=SECONDS)
            assert "formed into a process group again" in str(told.value)
            assert started.torch_group is not None
            assert deadline.apply(started.view, group_sum) == [(0, 2.0), (1, 2.0)]
        finally:
            started.stop()
