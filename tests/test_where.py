"""course.checks.where: which engine ran which call, with which arguments and result, read back from a real
ipyparallel controller's records; and calls counted in the notebook's own process."""

from __future__ import annotations

import os

import pytest
from ipyparallel import interactive

from course import cluster, nn
from course.checks import where


@pytest.fixture(autouse=True)
def own_ipython_dir(tmp_path, monkeypatch):
    """The test's cluster lives in its own profile dir, so stopping it never touches anyone else's."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.delenv("COURSE_CLUSTER_ID", raising=False)


@interactive  # sent by value, as a notebook's function is
def shard(rank, size, epochs=1, batch=100):
    import os

    return {"rank": rank, "size": size, "pid": os.getpid()}


def test_engine_calls_name_engine_arguments_and_result():
    c = cluster.start(2, cluster_id="t-where")
    try:
        since = len(c.client.history)
        mapped = c.view.map_sync(shard, range(2), [2, 2], [3, 3])
        alone = c.client[c.ids[1]].apply_sync(shard, 7, 1, batch=5)
        calls = [call for call in where.engine_calls(c.client, since) if call.function == "shard"]
        assert [(call.engine, call.arguments) for call in calls] == [
            (0, {"rank": 0, "size": 2, "epochs": 3, "batch": 100}),
            (1, {"rank": 1, "size": 2, "epochs": 3, "batch": 100}),
            (1, {"rank": 7, "size": 1, "epochs": 1, "batch": 5}),
        ]
        assert [call.result for call in calls] == [*mapped, alone]
        assert os.getpid() not in {call.result["pid"] for call in calls}
        assert where.engine_calls(c.client, len(c.client.history)) == []
    finally:
        c.stop()


def test_counting_counts_calls_in_this_process_and_puts_the_function_back():
    original = nn.gradients
    params = nn.init([4, 3, 2], seed=0)
    import numpy as np

    x, y = np.ones((5, 4)), np.array([0, 1, 0, 1, 1])
    with where.counting(nn, "gradients") as kernel:
        nn.gradients(params, x, y)
        nn.loss(params, x, y)
    assert kernel.calls == 1 and nn.gradients is original
    assert where.same({"a": np.arange(3)}, {"a": np.arange(3)}) and not where.same(np.arange(3), np.arange(4))
