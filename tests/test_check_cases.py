"""tests/check_cases.py itself: what `define` leaves behind lets the rest of the run start processes."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tests.check_cases import Case, define, shared_cluster


def test_define_runs_cells_and_spawn_still_starts_processes():
    names = define(Case("a case", {"ex-answer": "def twice(x):\n    return 2 * x\n"}, right=True), {"k": 3})
    assert names["twice"](names["k"]) == 6
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # reads sys.modules["__main__"].__spec__
        assert pool.apply(os.getpid) != os.getpid()


def test_shared_cluster_is_started_once_and_found_clean(tmp_path_factory):
    """A second module asking for the same engines gets the same cluster, current again after another cluster was
    (as the task runtime needs), with nothing the first module left in the engines' namespaces."""
    from course import cluster

    with shared_cluster(tmp_path_factory, 2) as first:
        first.view.push({"left_behind": 1}, block=True)
        pids = [e["pid"] for e in first.engines]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IPYTHONDIR", str(tmp_path_factory.mktemp("ipython")))
        other = cluster.start(1, cluster_id="t-check-cases-other", quiet=True)
        other.stop()
    with shared_cluster(tmp_path_factory, 2) as second:
        assert cluster.current() is second
        assert [e["pid"] for e in second.engines] == pids, "the shared engines were started again"
        second.view.execute("found = 'left_behind' in globals()", block=True)
        assert second.view.pull("found", block=True) == [False, False]
