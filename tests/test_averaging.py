"""course.averaging on real engines: the three parameter-averaging strategies against plain sequential training."""

from __future__ import annotations

import numpy as np
import pytest

from course import data, tasks
from course.averaging import Network, fit_async, fit_full_async, fit_sync, master_average
from tests.check_cases import own_cluster

pytestmark = pytest.mark.slow
NET = Network("simple-mnist", (28, 28, 1), 10, 0.05)
BATCH = 16


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_OFFLINE", "1")  # the same small real data everywhere: the digits fallback
        mp.delenv("COURSE_DATA_DIR", raising=False)
        mp.setenv("KERAS_HOME", "/nonexistent-course-test")
        (x, y), _ = data.load("mnist", limit=96)
    # a profile of its own: a `cluster stop --all` in the Slurm tests' worker, beside it, must not end it
    with own_cluster(
        tmp_path_factory, 2, cluster_id="course-test-averaging", threads=1, quiet=True, persist=False
    ) as c:
        try:
            yield c, x, y
        finally:
            tasks.reset()


@pytest.fixture(scope="module")
def start_weights():
    import tensorflow as tf

    tf.keras.utils.set_random_seed(1)
    return NET.build().get_weights()


def sequential(x, y, weights, epochs):
    """Plain training in this process: the same model, the same batches in the same order."""
    model = NET.build()
    model.set_weights(weights)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, shuffle=False, verbose=0)
    return model.get_weights()


def assert_same(a, b, what):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5, err_msg=f"{what}: layer weight {i} differs")


def assert_differ(a, b, what):
    assert max(float(np.max(np.abs(u - v))) for u, v in zip(a, b)) > 1e-3, what


def test_sync_with_one_worker_is_sequential_training(engines, start_weights):
    _, x, y = engines
    result = fit_sync(NET, x, y, workers=1, epochs=2, batch_size=BATCH, weights=start_weights)
    expected = sequential(x, y, start_weights, 2)
    assert_differ(expected, start_weights, "sequential training did not change the weights")
    assert_same(result.weights, expected, "fit_sync(workers=1) vs model.fit")
    assert [r[:2] for r in result.epoch_ranges] == [(1, 1), (2, 2)]
    assert result.aggregations == 2 and result.train_tasks == 2
    assert sum(s["samples"] for s in result.worker_stats) == 2 * len(x)


def test_sync_on_identical_shards_equals_one_worker(engines, start_weights):
    _, x, y = engines
    shard = (x[:48], y[:48])
    one = fit_sync(NET, None, None, workers=1, epochs=2, batch_size=BATCH, weights=start_weights, shards=[shard])
    three = fit_sync(
        NET, None, None, workers=3, epochs=2, batch_size=BATCH, weights=start_weights, shards=[shard] * 3
    )  # more workers than engines: the tasks queue
    assert_differ(one.weights, start_weights, "one worker did not train")
    assert_same(three.weights, one.weights, "3 workers on identical shards vs 1 worker")


def test_sync_averages_every_epoch(engines, start_weights):
    """Two workers on different shards: the result is the average after each epoch, not only at the end."""
    _, x, y = engines
    shards = [(x[:48], y[:48]), (x[48:], y[48:])]
    result = fit_sync(NET, x, y, workers=2, epochs=2, batch_size=BATCH, weights=start_weights)
    after_one = master_average([sequential(sx, sy, start_weights, 1) for sx, sy in shards])
    expected = master_average([sequential(sx, sy, after_one, 1) for sx, sy in shards])
    assert_same(result.weights, expected, "fit_sync(workers=2) vs averaging per epoch by hand")


def test_full_async_averages_exactly_once_at_the_end(engines, start_weights):
    _, x, y = engines
    shards = [(x[:48], y[:48]), (x[48:], y[48:])]
    result = fit_full_async(NET, x, y, workers=2, epochs=2, batch_size=BATCH, weights=start_weights)
    once = master_average([sequential(sx, sy, start_weights, 2) for sx, sy in shards])
    assert_same(result.weights, once, "fit_full_async vs each shard trained alone, then one average")
    per_epoch = fit_sync(NET, x, y, workers=2, epochs=2, batch_size=BATCH, weights=start_weights)
    assert_differ(result.weights, per_epoch.weights, "full-async ended where per-epoch averaging ends")
    assert result.aggregations == 1


def test_async_aggregates_workers_times_epochs(engines, start_weights):
    _, x, y = engines
    tasks.reset()
    result = fit_async(NET, x, y, workers=3, epochs=2, batch_size=BATCH, weights=start_weights)
    records = tasks.history()
    aggregations = [r for r in records if r["name"] == "worker_aggregate"]
    trains = [r for r in records if r["name"] == "worker_train"]
    assert all(r["ok"] for r in records), [r["error"] for r in records if not r["ok"]]
    assert len(aggregations) == 3 * 2 and result.aggregations == 6
    assert len(trains) == 3 * 2
    # no global barrier: a second-epoch training task waits for one aggregation (its worker's), not all of them
    numbers = {r["number"] for r in aggregations}
    second = sorted(trains, key=lambda r: r["number"])[3:]
    for r in second:
        assert len([p for p in r["parents"] if p[0] in numbers]) == 1, r
    assert_differ(result.weights, start_weights, "async did not train")
    assert all(np.isfinite(w).all() for w in result.weights)


def test_async_with_one_worker_is_sequential_training(engines, start_weights):
    _, x, y = engines
    result = fit_async(NET, x, y, workers=1, epochs=2, batch_size=BATCH, weights=start_weights)
    assert_same(result.weights, sequential(x, y, start_weights, 2), "fit_async(workers=1) vs model.fit")


def test_every_spelling_of_a_sync_type_names_its_strategy_and_its_fit():
    from course import UserError, averaging, results

    spellings = {
        "sync": "sync",
        " Sync ": "sync",
        0: "sync",
        "1": "async",
        "relaxed": "async",
        "2": "full-async",
        "full_async": "full-async",
        "FullAsync": "full-async",
        "none": "full-async",
    }
    assert {s: averaging.strategy_name(s) for s in spellings} == spellings
    assert [averaging.FITS[averaging.strategy_name(n)] for n in (0, 1, 2)] == [fit_sync, fit_async, fit_full_async]
    assert [results.validate({**ROW, "strategy": n})["strategy"] for n in "012"] == ["sync", "async", "full-async"]
    assert results.validate({**ROW, "strategy": "relaxed"})["strategy"] == "relaxed"  # a results row keeps a name
    with pytest.raises(UserError, match=r"^unknown sync type 'fast'; valid: sync, async, full-async \(or 0, 1, 2"):
        averaging.strategy_name("fast")


ROW = {
    "date": "2026-11-23T22:00:00",
    "dataset": "mnist",
    "network": "lenet",
    "workers": 2,
    "epochs": 3,
    "batch_size": 64,
    "elapsed_s": 1.5,
    "hardware": "2 CPU cores",
}
