"""course.checks.engines, notebook 00's checks, tried directly on every answer the fixtures hold for its exercises
(tests/check_cases.py), on two MPI engines as the notebook's quick profile starts them. The notebook's
`train_shard` trains a network; here a stand-in with its signature and its result's keys does no training (the
checks read which engine ran it, with which arguments, and the shards' sizes, never the accuracy)."""

from __future__ import annotations

import pytest

from course import cluster
from course.checks import engines
from tests.check_cases import cases, define, judge, shared_cluster

NOTEBOOK = "00_environment_and_cluster"
COVERED = {"ex1-answer", "ex2-answer", "ex3-answer"}  # the answer cells whose fixture answers this module tries

SIZES = {"LIMIT": 300, "EPOCHS": 3, "BATCH": 100}  # EPOCHS not train_shard's default, as in both profiles

TRAIN_SHARD = '''
def train_shard(rank, size, limit=None, epochs=1, batch=100):
    """The notebook's train_shard without the training: its shard's size, as course.data.shard cuts it, and the
    seconds the call took (different on every call, as a real run's)."""
    import time
    import numpy as np
    from course import data

    started = time.perf_counter()
    samples = len(data.shard(np.arange(limit), rank, size))
    time.sleep(0.01)
    return {"rank": rank, "samples": samples, "seconds": time.perf_counter() - started, "test_accuracy": 0.9}
'''


def stand_in():
    """TRAIN_SHARD defined as the notebook's own cells are (in __main__), so that it travels to the engines by value."""
    namespace = {"__name__": "__main__"}
    exec(TRAIN_SHARD, namespace)
    return namespace["train_shard"]


@pytest.fixture(scope="module")
def engine_cluster(tmp_path_factory):
    """Two MPI engines in a profile of their own, as the notebook starts them."""
    with shared_cluster(tmp_path_factory, 2, engines="mpi") as started:
        yield started


@pytest.fixture(scope="module")
def context(engine_cluster):
    """What the notebook defines before exercises 1 and 2: its sizes, the cluster, train_shard, and `one` (the run on
    one engine over the whole training set)."""
    train_shard = stand_in()
    one = engine_cluster.client[engine_cluster.ids[0]].apply_sync(
        train_shard, 0, 1, SIZES["LIMIT"], SIZES["EPOCHS"], SIZES["BATCH"]
    )
    return {**SIZES, "cluster": engine_cluster, "train_shard": train_shard, "one": one}


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_whoami_answers(case, context):
    names = define(case, context)
    judge(case, lambda: engines.whoami_answers(names["answers"], names["cluster"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex2-answer"}), ids=str)
def test_shards_trained(case, context):
    names = define(case, context)
    judge(
        case,
        lambda: engines.shards_trained(
            names["results"], names["one"], names["cluster"], names["LIMIT"], names["EPOCHS"], names["BATCH"]
        ),
    )


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex3-answer"}), ids=str)
def test_stopped(case, tmp_path, monkeypatch):
    """Each answer stops (or not) a cluster of its own: one local engine, started as this process's cluster."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    own = cluster.start(1, engines="local", cluster_id="t-checks-engines-stop", quiet=True)
    try:
        names = define(case, {"cluster": own})
        judge(case, lambda: engines.stopped(names["final"]))
    finally:
        own.stop()
