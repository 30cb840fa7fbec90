"""Datasets for the course: MNIST, Fashion-MNIST and CIFAR-10 as NumPy arrays ready for Keras.

Search order: an explicit path, then COURSE_DATA_DIR (HPC centres preload data on a shared file
system), then the Keras cache, then a download where the network allows. When none works, a small
real dataset that scikit-learn ships (its 8x8 digits, resized) stands in, and says so loudly, once.
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from course import UserError, settings

Arrays = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


class Loaded(tuple):
    """What `load` returns: ((x_train, y_train), (x_test, y_test)), and in `.dataset` the dataset those arrays are.

    `.dataset` is the name asked for, or "digits" where the fallback stood in for it (a results row records that).
    """

    dataset: str

    def __new__(cls, splits: Arrays, dataset: str) -> "Loaded":
        loaded = super().__new__(cls, splits)
        loaded.dataset = dataset
        return loaded

    def __getnewargs__(self) -> tuple:
        return tuple(self), self.dataset  # pickled (e.g. sent to an engine) with its dataset


@dataclass(frozen=True)
class Dataset:
    """What the course knows about one dataset: its image shape and where Keras caches it."""

    name: str
    shape: tuple[int, int, int]
    keras_cache: tuple[str, ...]  # paths under ~/.keras/datasets whose presence means "cached"


DATASETS = {
    "mnist": Dataset("mnist", (28, 28, 1), ("mnist.npz",)),
    "fashion_mnist": Dataset("fashion_mnist", (28, 28, 1), ("fashion-mnist/train-images-idx3-ubyte.gz",)),
    "cifar10": Dataset("cifar10", (32, 32, 3), ("cifar-10-batches-py/data_batch_1",)),
}
DOWNLOAD_HOST = ("storage.googleapis.com", 443)  # where tf.keras.datasets downloads from
FALLBACK = "digits"  # the name a results row gives the stand-in dataset

_announced: set[str] = set()  # datasets this process replaced by the fallback and said so (once each)


def info(name: str) -> Dataset:
    """The Dataset for `name`, or a UserError listing the known names."""
    key = name.strip().lower().replace("-", "_")
    if key not in DATASETS:
        raise UserError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    return DATASETS[key]


def keras_cache_dir() -> Path:
    """Where tf.keras.datasets keeps its downloads (KERAS_HOME or ~/.keras)."""
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def data_dir_file(name: str, directory: str | os.PathLike | None = None) -> Path | None:
    """The `<name>.npz` file in `directory` (default COURSE_DATA_DIR) if it exists."""
    directory = directory or settings.get("COURSE_DATA_DIR")
    if not directory:
        return None
    candidate = Path(directory).expanduser() / f"{info(name).name}.npz"
    return candidate if candidate.is_file() else None


def in_keras_cache(name: str) -> bool:
    """True when tf.keras.datasets would load `name` without downloading."""
    return all((keras_cache_dir() / p).exists() for p in info(name).keras_cache)


def network_allows_download(timeout: float = 1.5) -> bool:
    """True when the host tf.keras.datasets downloads from answers within `timeout` s, name lookup included
    (COURSE_OFFLINE=1 says no at once). Asked once per process: every engine loading data asks too."""
    if settings.get("COURSE_OFFLINE") not in ("", "0"):
        return False
    if DOWNLOAD_HOST not in _reachable:
        _reachable[DOWNLOAD_HOST] = _answers_within(DOWNLOAD_HOST, timeout)
    return _reachable[DOWNLOAD_HOST]


_reachable: dict[tuple[str, int], bool] = {}


def _answers_within(address: tuple[str, int], timeout: float) -> bool:
    """Whether `address` accepts a connection within `timeout` s. The socket's timeout does not cover the name
    lookup, which on a compute node whose DNS server does not answer blocks for ~10 s (resolv.conf's timeout x
    attempts): the attempt runs in a thread that is left behind if it takes longer."""
    answered: list[bool] = []

    def attempt() -> None:
        try:
            socket.create_connection(address, timeout=timeout).close()
            answered.append(True)
        except OSError:
            answered.append(False)

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answered and answered[0])


def locate(name: str, path: str | os.PathLike | None = None) -> str:
    """Where `load(name)` would read from: a file path, 'keras-cache', 'download' or 'fallback'."""
    if path is not None:
        return str(_explicit_file(name, path))
    found = data_dir_file(name)
    if found:
        return str(found)
    if in_keras_cache(name):
        return "keras-cache"
    return "download" if network_allows_download() else "fallback"


def load(name: str, limit: int | None = None, path: str | os.PathLike | None = None) -> Loaded:
    """Load `name` as ((x_train, y_train), (x_test, y_test)); `.dataset` on the result says which dataset it is.

    Images are float32 in [0, 1] with a channel axis (N, H, W, C); labels are int64 of shape (N,).
    `limit` caps the number of samples in each split; `path` is an explicit .npz file or directory.
    """
    dataset = info(name)
    if limit is not None and limit < 1:
        raise UserError(f"limit must be a positive number of samples, not {limit}")
    where = locate(dataset.name, path)
    if where == "fallback":
        raw = _fallback(dataset)
    elif where in ("keras-cache", "download"):
        raw = _from_keras(dataset.name)
    else:
        raw = _from_npz(Path(where))
    splits = tuple(_prepare(x, y, dataset, limit) for x, y in raw)
    return Loaded(splits, FALLBACK if where == "fallback" else dataset.name)  # type: ignore[arg-type]


def shard(arrays: tuple[np.ndarray, ...] | np.ndarray, rank: int, size: int):
    """The `rank`-th of `size` contiguous, near-equal parts of each array (the data one worker trains on)."""
    if size < 1 or not 0 <= rank < size:
        raise UserError(f"shard needs 0 <= rank < size, got rank={rank}, size={size}")
    if isinstance(arrays, np.ndarray):
        return np.array_split(arrays, size)[rank]
    return tuple(np.array_split(a, size)[rank] for a in arrays)


def fetch(name: str, to: str | os.PathLike) -> Path:
    """Save the real dataset `name` as `<to>/<name>.npz` for a site data directory (needs a network or cache)."""
    dataset = info(name)
    if not in_keras_cache(dataset.name) and not network_allows_download():
        raise UserError(
            f"cannot fetch {dataset.name}: it is not in the Keras cache ({keras_cache_dir()}) and "
            f"{DOWNLOAD_HOST[0]} is unreachable; run this on a machine with internet access and copy the file"
        )
    target_dir = Path(to).expanduser()
    target_dir.mkdir(parents=True, exist_ok=True)
    target = target_dir / f"{dataset.name}.npz"
    (x_train, y_train), (x_test, y_test) = _from_keras(dataset.name)
    partial = target.with_suffix(".npz.partial")
    with open(partial, "wb") as handle:
        np.savez_compressed(handle, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    os.replace(partial, target)  # never leave a half-written file where a class will read it
    return target


def _explicit_file(name: str, path: str | os.PathLike) -> Path:
    candidate = Path(path).expanduser()
    if candidate.is_dir():
        candidate = candidate / f"{info(name).name}.npz"
    if not candidate.is_file():
        raise UserError(
            f"no dataset file at {candidate}; prepare one with: python -m course data fetch {name} --to DIR"
        )
    return candidate


def _from_npz(file: Path):
    try:
        with np.load(file) as npz:
            return (npz["x_train"], npz["y_train"]), (npz["x_test"], npz["y_test"])
    except (KeyError, ValueError, OSError) as exc:
        raise UserError(f"{file} is not a course dataset file (needs x_train, y_train, x_test, y_test): {exc}") from exc


def _from_keras(name: str):
    import tensorflow as tf  # imported here: TensorFlow takes seconds to import

    return getattr(tf.keras.datasets, name).load_data()


FALLBACK_TRAIN = 1500  # of the 1,797 digits: the rest are the test split
_FALLBACK_FORMAT = 1  # of the cached file: a change to how the fallback is built changes it, and so the file's name


def _fallback(dataset: Dataset):
    """scikit-learn's 1,797 real 8x8 digit images, resized to the dataset's image shape. Built once per user (and
    versions of scikit-learn and SciPy), then read from the user's cache: importing scikit-learn and resizing cost
    each process that loads data (every Horovod rank, every engine) about 2 s of CPU."""
    cached = _fallback_file(dataset.shape)
    try:
        with np.load(cached) as npz:
            images, labels = npz["images"], npz["labels"]
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):  # not built yet, or a file that is not ours
        images, labels = _digits(dataset.shape)
        _keep(cached, images=images, labels=labels)
    _announce(dataset, len(images))
    split = FALLBACK_TRAIN
    return (images[:split], labels[:split]), (images[split:], labels[split:])


def _fallback_file(shape: tuple[int, int, int]) -> Path:
    from importlib.metadata import version

    key = f"{_FALLBACK_FORMAT}-{version('scikit-learn')}-{version('scipy')}"
    return settings.user_cache() / f"digits-{'x'.join(map(str, shape))}-{key}.npz"


def _digits(shape: tuple[int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The digits as float32 images of SHAPE in [0, 1] (what _prepare makes of them anyway), and their labels."""
    from scipy.ndimage import zoom
    from sklearn.datasets import load_digits

    digits = load_digits()
    height, width, channels = shape
    images = zoom(digits.images / 16.0, (1, height / 8, width / 8), order=1).clip(0, 1)
    return np.repeat(images[..., None], channels, axis=-1).astype(np.float32), digits.target


def _keep(file: Path, **arrays: np.ndarray) -> None:
    """Save ARRAYS as FILE, whole or not at all (processes starting together may all write it); where the cache
    cannot be written (a read-only home), the next process builds the arrays again."""
    partial = None
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=file.parent, suffix=".partial", delete=False) as handle:
            partial = Path(handle.name)
            np.savez(handle, **arrays)
        os.replace(partial, file)
    except OSError:
        if partial is not None:
            partial.unlink(missing_ok=True)


def _announce(dataset: Dataset, count: int) -> None:
    if dataset.name in _announced:
        return
    _announced.add(dataset.name)
    message = (
        f"DATASET FALLBACK: {dataset.name} was not found (COURSE_DATA_DIR, {keras_cache_dir()}) and cannot be "
        f"downloaded here, so scikit-learn's {count} real 8x8 handwritten digits, resized to "
        f"{'x'.join(map(str, dataset.shape))}, stand in for it. Results will differ from the real dataset. "
        f"To use {dataset.name}: on a machine with internet run 'python -m course data fetch {dataset.name} "
        f"--to DIR' and set COURSE_DATA_DIR=DIR."
    )
    # stdout, not stderr: nbgrader counts any stderr output in a test cell as a failed check.
    print(message, flush=True)


def _prepare(x: np.ndarray, y: np.ndarray, dataset: Dataset, limit: int | None):
    x = np.asarray(x)
    if limit is not None:
        x, y = x[:limit], y[:limit]
    scale = 255.0 if x.dtype == np.uint8 else 1.0
    x = (x.astype(np.float32) / scale).reshape((len(x), *dataset.shape))
    return x, np.asarray(y).reshape(-1).astype(np.int64)
