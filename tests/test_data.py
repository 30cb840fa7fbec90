"""course.data: search order, the announced fallback, preparation for Keras, sharding, fetch."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from course import UserError, data
from tests.conftest import ROOT, run_course


@pytest.fixture(autouse=True)
def forget_announcements():
    data._announced.clear()
    data._reachable.clear()
    yield
    data._announced.clear()
    data._reachable.clear()


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


def _arrays(loaded) -> list[np.ndarray]:
    return [array for split in loaded for array in split]


def test_the_fallback_is_built_once_then_read_from_the_users_cache(offline_home):
    """The first load builds the stand-in with scikit-learn and keeps it in the user's cache; a later process
    reads it from there, without importing scikit-learn, and gets the same arrays."""
    first = data.load("mnist")
    assert len(list((offline_home / ".cache" / "course").glob("digits-28x28x1-*.npz"))) == 1
    later = offline_home / "later.npz"
    program = (
        "import sys; import numpy as np; from course import data; loaded = data.load('mnist'); "
        "np.savez(sys.argv[1], *[a for split in loaded for a in split]); print('sklearn' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", program, later], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "False", done.stdout
    with np.load(later) as read:
        assert all(np.array_equal(mine, read[f"arr_{k}"]) for k, mine in enumerate(_arrays(first)))
        assert [read[f"arr_{k}"].dtype for k in range(4)] == [a.dtype for a in _arrays(first)]


def test_a_damaged_or_unwritable_cache_still_gives_the_fallback(offline_home):
    built = _arrays(data.load("mnist", limit=100))
    (kept,) = (offline_home / ".cache" / "course").glob("digits-*.npz")
    kept.write_bytes(b"not an npz file")  # damaged: built again, and kept again
    assert all(np.array_equal(a, b) for a, b in zip(built, _arrays(data.load("mnist", limit=100))))
    with np.load(kept) as npz:
        assert npz["images"].shape == (1797, 28, 28, 1)
    shutil.rmtree(kept.parent)
    kept.parent.write_text("")  # the cache's folder cannot be made: built each time, nothing left behind
    assert all(np.array_equal(a, b) for a, b in zip(built, _arrays(data.load("mnist", limit=100))))
    assert sorted(p.name for p in kept.parent.parent.iterdir()) == ["course"]


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


# A compute node whose DNS server never answers, as on many clusters without internet: a network namespace whose
# only route leads nowhere, and a resolv.conf naming a server there (resolv.conf's default wait: 5 s, 2 tries).
SILENT_DNS = """
ip link set lo up
ip link add v0 type veth peer name v1 && ip link set v0 up && ip link set v1 up
ip addr add 10.9.9.1/24 dev v0 && ip route add default via 10.9.9.2 dev v0
mount --bind "$RESOLV" /etc/resolv.conf
exec "$PYTHON" -c "$CODE"
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"),
    reason="needs root and unshare(1) to make a network namespace whose DNS server never answers",
)
def test_the_download_check_keeps_its_time_limit_when_the_name_lookup_hangs(tmp_path):
    # data.load asks whether it could download; a name lookup ignores the socket's timeout, and every engine of a
    # notebook on such a node waited ~10 s for it in each load before the check bounded it
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 10.9.9.53\n")
    code = (
        "import time; from course import data; t = time.monotonic(); "
        "ok = data.network_allows_download(timeout=1); again = data.network_allows_download(timeout=1); "
        "print(ok, again, round(time.monotonic() - t, 1))"
    )
    env = {**os.environ, "RESOLV": str(resolv), "PYTHON": sys.executable, "CODE": code, "PYTHONPATH": str(ROOT)}
    env.pop("COURSE_OFFLINE", None)
    done = subprocess.run(
        ["unshare", "-n", "-m", "sh", "-c", SILENT_DNS], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    ok, again, seconds = done.stdout.split()
    assert (ok, again) == ("False", "False")
    assert float(seconds) < 3, f"the check took {seconds} s with a 1 s limit: the name lookup was not bounded"
