"""course.parallelism: a model cut in two gives the unsplit model's output; per-layer volumes are counted right."""

import numpy as np
import pytest

from course import UserError, models, parallelism


@pytest.fixture(scope="module")
def cnn():
    import tensorflow as tf

    tf.keras.utils.set_random_seed(3)
    return models.mnist_cnn()


@pytest.mark.slow
@pytest.mark.parametrize("at", [1, 2, 4, 5])
def test_split_model_gives_the_unsplit_output(cnn, at):
    x = np.random.default_rng(0).random((4, 28, 28, 1)).astype(np.float32)
    front, back = parallelism.split_sequential(cnn, at)
    whole = cnn(x, training=False).numpy()
    activations = front(x, training=False).numpy()
    assert activations.shape[1:] == cnn.layers[at - 1].output_shape[1:]
    np.testing.assert_allclose(back(activations, training=False).numpy(), whole, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_shipped_model_is_the_same_model(cnn):
    x = np.random.default_rng(1).random((2, 28, 28, 1)).astype(np.float32)
    copy = parallelism.rebuild(cnn.to_json(), cnn.get_weights())
    np.testing.assert_allclose(copy(x).numpy(), cnn(x).numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_layer_volumes(cnn):
    rows = parallelism.layer_volumes(cnn, batch=10)
    assert [r["layer"] for r in rows] == [layer.name for layer in cnn.layers]
    first = rows[0]  # Conv2D 32 5x5 on 1 channel: 32*25 + 32 parameters; output 24x24x32 per sample
    assert first["parameters"] == 32 * 25 + 32 and first["activations"] == 10 * 24 * 24 * 32
    assert sum(r["parameters"] for r in rows) == cnn.count_params()
    with pytest.raises(UserError):
        parallelism.layer_volumes(cnn, batch=0)


@pytest.mark.slow
def test_bad_cut_point_is_a_user_error(cnn):
    with pytest.raises(UserError, match="cut point"):
        parallelism.split_sequential(cnn, len(cnn.layers))


@pytest.mark.slow
def test_split_across_two_mpi_ranks_gives_the_unsplit_output(tmp_path):
    import subprocess
    import sys

    import tensorflow as tf

    from course import mpi
    from tests.conftest import PROGRAMS

    out = tmp_path / "split.npy"
    result = subprocess.run(
        mpi.command(2, sys.executable, str(PROGRAMS / "split_check.py"), str(out), "3"),
        capture_output=True,
        text=True,
        timeout=600,
        env=mpi.env(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "RANK 0 SENT (6, 8, 8, 64)" in result.stdout and "RANK 1 SAVED" in result.stdout
    tf.keras.utils.set_random_seed(11)
    model = models.mnist_cnn()
    x = np.random.default_rng(5).random((6, 28, 28, 1)).astype(np.float32)
    np.testing.assert_allclose(np.load(out), model(x, training=False).numpy(), rtol=1e-5, atol=1e-6)
