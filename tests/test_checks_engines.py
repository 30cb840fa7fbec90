"""course.checks.engines, notebook 00's checks, tried directly on every answer the fixtures hold for its exercises
(tests/check_cases.py), on two MPI engines as the notebook's quick profile starts them. The notebook's
`train_shard` trains a network; here a stand-in with its signature and its result's keys does no training (the
checks read which engine ran it, with which arguments, and the shards' sizes, never the accuracy)."""

from __future__ import annotations

import pytest

from course import cluster
from course.cluster import cells
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
    one engine over the whole training set); and, as a notebook's cluster does, the cells watched for the requests
    each sends (course.cluster.cells)."""
    from IPython.core.interactiveshell import InteractiveShell

    train_shard = stand_in()
    one = engine_cluster.client[engine_cluster.ids[0]].apply_sync(
        train_shard, 0, 1, SIZES["LIMIT"], SIZES["EPOCHS"], SIZES["BATCH"]
    )
    cells.watch(InteractiveShell.instance(), engine_cluster.client)
    yield {**SIZES, "cluster": engine_cluster, "train_shard": train_shard, "one": one}
    cells.unwatch()


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex1-answer"}), ids=str)
def test_whoami_answers(case, context):
    names = define(case, context)
    judge(case, lambda: engines.whoami_answers(names["answers"], names["cluster"]))


def run_cells(context, *sources):
    """The sources run one after the other as cells of one notebook (a fresh namespace holding `context`)."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.clear()
    shell.user_ns.update({"__name__": "__main__", "__spec__": None}, **context)
    for source in sources:
        assert shell.run_cell(source, silent=True).success, source
    return shell.user_ns


SOLUTION_EX1 = cases(NOTEBOOK, {"ex1-answer"})[0]
WRITTEN_OUT = next(c for c in cases(NOTEBOOK, {"ex1-answer"}) if "cluster.engines" in c.answers["ex1-answer"])


def test_whoami_earlier_calls_do_not_count(context):
    """Answers written out after a right run: the engines' earlier calls returned the same dicts, but not in the
    cell that made `answers`, so the check still refuses them; the right cell run again passes."""
    names = run_cells(context, SOLUTION_EX1.answers["ex1-answer"], WRITTEN_OUT.answers["ex1-answer"])
    assert engines.whoami_answers(names["answers"], names["cluster"])
    names = run_cells(
        context,
        SOLUTION_EX1.answers["ex1-answer"],
        WRITTEN_OUT.answers["ex1-answer"],
        SOLUTION_EX1.answers["ex1-answer"],
    )
    assert engines.whoami_answers(names["answers"], names["cluster"]) is None


def test_whoami_judged_by_the_cell_that_bound_answers(context):
    """A cell run between the answer and its check (looking at `answers`, another call to the engines) does not
    change the verdict: the cell that bound `answers` is the one judged."""
    names = run_cells(context, SOLUTION_EX1.answers["ex1-answer"], "print(answers)\ncluster.view.apply_sync(whoami)")
    assert engines.whoami_answers(names["answers"], names["cluster"]) is None


def test_whoami_rank_asked_of_the_engine(context):
    """Ranks that are in range and distinct but not the engines' own (the numbering turned round) are refused: the
    check asks each engine its MPI rank."""
    swapped = SOLUTION_EX1.answers["ex1-answer"] + "\nfor a in answers:\n    a['rank'] = len(answers) - 1 - a['rank']\n"
    names = run_cells(context, swapped)
    assert "rank" in (engines.whoami_answers(names["answers"], names["cluster"]) or "")


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
