"""course.nn: backpropagation agrees with finite differences; shard gradients averaged by size equal the batch's."""

import numpy as np
import pytest

from course import UserError, nn


def problem(n=12, features=5, classes=3, seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, features)), rng.integers(0, classes, n)


@pytest.mark.parametrize("sizes", [[5, 3], [5, 4, 3], [5, 6, 4, 3]])
def test_backprop_matches_finite_differences(sizes):
    x, y = problem()
    params = nn.init(sizes, seed=2)
    for p in params[1::2]:  # non-zero biases, so their gradients are exercised too
        p += 0.1
    value, grads = nn.gradients(params, x, y)
    assert value == pytest.approx(nn.loss(params, x, y))
    numeric = nn.numerical_gradient(params, x, y)
    for analytic, approx in zip(grads, numeric):
        assert analytic.shape == approx.shape
        np.testing.assert_allclose(analytic, approx, rtol=1e-5, atol=1e-7)


def test_unequal_shards_weighted_by_size_equal_the_whole_batch():
    x, y = problem(n=23)
    params = nn.init([5, 7, 3], seed=3)
    _, full = nn.gradients(params, x, y)
    cuts = [0, 4, 15, 23]  # shards of 4, 11 and 8 samples
    shards = [nn.gradients(params, x[a:b], y[a:b])[1] for a, b in zip(cuts[:-1], cuts[1:])]
    counts = np.diff(cuts)
    for got, want in zip(nn.average(shards, counts), full):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    # The plain mean of unequal shards is NOT the batch gradient: the weighting matters.
    plain = nn.average(shards)
    assert not all(np.allclose(g, w, rtol=1e-6, atol=1e-9) for g, w in zip(plain, full))


def test_equal_shards_plain_mean_equals_whole_batch():
    x, y = problem(n=20)
    params = nn.init([5, 4, 3], seed=4)
    _, full = nn.gradients(params, x, y)
    shards = [nn.gradients(params, x[i::2], y[i::2])[1] for i in range(2)]
    for got, want in zip(nn.average(shards), full):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_sgd_lowers_the_loss_on_a_learnable_problem():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 4))
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    params = nn.init([4, 8, 2], seed=0)
    before = nn.loss(params, x, y)
    steps = nn.steps_to_target(params, x, y, batch_size=20, learning_rate=0.5, target=0.2 * before, max_steps=2000)
    assert steps is not None and steps > 0
    assert nn.loss(params, x, y) == before  # steps_to_target does not change the caller's parameters


def test_learning_rate_rules():
    assert nn.linear_scaled_lr(0.1, 32, 256) == pytest.approx(0.8)
    assert nn.warmup_lr(0, 0.8, 10) == pytest.approx(0.08)
    assert nn.warmup_lr(5, 0.8, 10) == pytest.approx(0.44)
    assert nn.warmup_lr(10, 0.8, 10) == nn.warmup_lr(500, 0.8, 10) == 0.8


def test_user_errors():
    with pytest.raises(UserError):
        nn.init([5])
    with pytest.raises(UserError):
        nn.average([])
    with pytest.raises(UserError):
        next(nn.batches(10, 11, np.random.default_rng()))
