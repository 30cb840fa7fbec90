"""course.data: search order, the announced fallback, preparation for Keras, sharding, fetch."""

import numpy as np
import pytest

from course import UserError, data
from tests.conftest import run_course


@pytest.fixture(autouse=True)
def forget_announcements():
    data._announced.clear()
    yield
    data._announced.clear()


def test_fallback_is_used_and_announced_once(offline_home, capsys):
    loaded = data.load("mnist")
    (x_train, y_train), (x_test, y_test) = loaded
    assert loaded.dataset == "digits"  # what a results row records: not the mnist asked for
    announced = capsys.readouterr().out
    assert "DATASET FALLBACK" in announced and "mnist" in announced and "COURSE_DATA_DIR" in announced
    assert x_train.shape[1:] == (28, 28, 1) and x_train.dtype == np.float32
    assert 0.0 <= x_train.min() and x_train.max() <= 1.0 and x_train.max() > 0.5
    assert set(np.unique(y_train)) == set(range(10)) and y_train.dtype == np.int64
    assert len(x_train) + len(x_test) == 1797  # scikit-learn's digits, not invented data
    assert data.load("mnist").dataset == "digits"
    assert "DATASET FALLBACK" not in capsys.readouterr().out  # once per process, but every result says so


def test_fallback_matches_cifar_shape(offline_home):
    (x_train, _), (x_test, _) = data.load("cifar10", limit=50)
    assert x_train.shape == (50, 32, 32, 3) and x_test.shape == (50, 32, 32, 3)


def test_data_dir_wins_over_fallback(offline_home, tmp_path, monkeypatch, capsys):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, size=(20, 28, 28), dtype=np.uint8)
    y = rng.integers(0, 10, size=20, dtype=np.uint8)
    site = tmp_path / "site"
    site.mkdir()
    np.savez(site / "fashion_mnist.npz", x_train=x, y_train=y, x_test=x[:5], y_test=y[:5])
    monkeypatch.setenv("COURSE_DATA_DIR", str(site))
    loaded = data.load("fashion-mnist", limit=10)
    (x_train, y_train), (x_test, _) = loaded
    assert loaded.dataset == "fashion_mnist"
    assert "FALLBACK" not in capsys.readouterr().out
    assert x_train.shape == (10, 28, 28, 1) and len(x_test) == 5
    np.testing.assert_allclose(x_train[3, :, :, 0], x[3] / 255.0, rtol=1e-6)
    assert y_train.tolist() == y[:10].tolist()


def test_explicit_path_that_does_not_exist(offline_home, tmp_path):
    with pytest.raises(UserError, match="data fetch"):
        data.load("mnist", path=tmp_path / "nowhere.npz")


def test_unknown_dataset_lists_known_names():
    with pytest.raises(UserError, match="mnist, fashion_mnist, cifar10"):
        data.load("imagenet")


def test_shard_splits_without_loss():
    x, y = np.arange(10), np.arange(10) * 2
    parts = [data.shard((x, y), rank, 3) for rank in range(3)]
    assert np.concatenate([p[0] for p in parts]).tolist() == x.tolist()
    assert [len(p[0]) for p in parts] == [4, 3, 3]
    assert data.shard(x, 1, 2).tolist() == [5, 6, 7, 8, 9]
    with pytest.raises(UserError):
        data.shard(x, 2, 2)


def test_fetch_without_network_is_a_clear_error(offline_home, tmp_path):
    result = run_course("data", "fetch", "mnist", "--to", str(tmp_path / "out"))
    assert result.returncode == 1
    assert "internet" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out" / "mnist.npz").exists()
