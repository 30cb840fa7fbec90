"""course.sharding: shards cut as MPI's recvcounts and np.array_split cut; the flat network's gradient is the
derivative of its loss; Adam on a shard is that shard of Adam on the whole; bytes held are counted."""

import numpy as np
import pytest

from course import UserError, sharding


@pytest.mark.parametrize("n, parts", [(10, 3), (12, 4), (2, 5), (0, 2), (264, 3)])
def test_shards_cut_as_array_split(n, parts):
    counts = sharding.shard_counts(n, parts)
    assert counts == [len(c) for c in np.array_split(np.arange(n), parts)]
    flat = np.arange(n)
    pieces = [flat[slice(*sharding.shard_bounds(n, parts, r))] for r in range(parts)]
    assert np.array_equal(np.concatenate(pieces), flat)


def test_a_shard_that_does_not_exist_is_refused():
    with pytest.raises(UserError, match="shard 3 does not exist"):
        sharding.shard_bounds(10, 3, 3)
    with pytest.raises(UserError):
        sharding.shard_counts(10, 0)


def test_nbytes_counts_arrays_in_containers_only():
    held = {"m": np.zeros(5), "v": [np.zeros(3, dtype=np.float32)], "step": 7}
    assert sharding.nbytes(held) == 5 * 8 + 3 * 4
    assert sharding.nbytes(3.0) == 0


def test_gradient_is_the_derivative_of_the_loss():
    sizes = (4, 6, 3)
    params = sharding.mlp_init(sizes, seed=2)
    assert len(params) == sharding.mlp_size(sizes) == 4 * 6 + 6 + 6 * 3 + 3
    ((x, y),) = sharding.regression_batches(sizes, batch=5, steps=1, seed=1)
    loss, grad = sharding.mlp_loss_and_gradient(params, sizes, x, y)
    numeric = np.empty_like(params)
    for i in range(len(params)):
        step = np.zeros_like(params)
        step[i] = 1e-6
        up, _ = sharding.mlp_loss_and_gradient(params + step, sizes, x, y)
        down, _ = sharding.mlp_loss_and_gradient(params - step, sizes, x, y)
        numeric[i] = (up - down) / 2e-6
    assert loss > 0
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_wrong_parameter_count_is_refused():
    with pytest.raises(UserError, match="has 13"):
        sharding.mlp_loss_and_gradient(np.zeros(12), (2, 3, 1), np.zeros((1, 2)), np.zeros((1, 1)))


def test_adam_on_shards_equals_adam_on_the_whole_and_lowers_the_loss():
    sizes = (5, 8, 2)
    whole = sharding.mlp_init(sizes)
    m, v = np.zeros_like(whole), np.zeros_like(whole)
    sharded = whole.copy()
    moments = [(np.zeros(c), np.zeros(c)) for c in sharding.shard_counts(len(whole), 3)]
    batches = sharding.regression_batches(sizes, batch=16, steps=20)
    first = sharding.mlp_loss_and_gradient(whole, sizes, *batches[0])[0]
    for step, (x, y) in enumerate(batches, start=1):
        _, grad = sharding.mlp_loss_and_gradient(whole, sizes, x, y)
        sharding.adam(whole, grad, m, v, step, lr=0.01)
        for r, (ms, vs) in enumerate(moments):
            part = slice(*sharding.shard_bounds(len(sharded), 3, r))
            piece = sharded[part]  # a view: updated in place
            sharding.adam(piece, grad[part], ms, vs, step, lr=0.01)
    assert np.array_equal(whole, sharded)
    assert sharding.mlp_loss_and_gradient(whole, sizes, *batches[0])[0] < first
