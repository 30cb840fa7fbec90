"""An input pipeline with a realistic decoding cost, and what notebook 06 measures of it: the time a training loop
waits for its data, the stages of a `tf.data` pipeline, and fingerprints of the batches it feeds.

The images are stored as JPEG files of photo size (512 x 512 RGB: decoding one costs about a millisecond,
as for an ImageNet photo) and decoded back to the model's small input in `decode`, the `map` function.

    >>> files = photos(x_train[:256])                  # the encoded "files" (bytes), one per image
    >>> ds = tf.data.Dataset.from_tensor_slices((list(files), y_train[:256])).map(decode).batch(32)
    >>> timing = measure(ds, step, epochs=3)           # timing.wait_fraction: the share of time spent in next()
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

PHOTO = 512  # side of the stored photos, in pixels
SIZE = 28  # side of what the model sees
DECODE_OP = "DecodeJpeg"  # the op of `decode` that runs once per file: the profiler's trace shows each run

# tf.data's dataset classes, by what a learner writes (class names of TensorFlow 2.15)
_STAGES = {
    "_TensorSliceDataset": "from_tensor_slices",
    "_MapDataset": "map",
    "_ParallelMapDataset": "parallel map",
    "CacheDataset": "cache",
    "_CacheDataset": "cache",
    "_MemoryCacheDataset": "cache",
    "BatchDataset": "batch",
    "_BatchDataset": "batch",
    "_ParallelBatchDataset": "batch",
    "_PrefetchDataset": "prefetch",
    "PrefetchDataset": "prefetch",
    "_ShuffleDataset": "shuffle",
    "ShuffleDataset": "shuffle",
    "_RepeatDataset": "repeat",
    "RepeatDataset": "repeat",
    "_TakeDataset": "take",
    "_OptionsDataset": "options",
}


def photos(images: np.ndarray, seed: int = 0) -> np.ndarray:
    """Each image (N, H, W, 1 or 3) in [0, 1] as the bytes of a PHOTO x PHOTO RGB JPEG file (grain added, as a
    camera's)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    files = []
    for image in images:
        rgb = tf.constant(image, tf.float32)
        rgb = tf.image.grayscale_to_rgb(rgb) if rgb.shape[-1] == 1 else rgb
        big = tf.image.resize(rgb, (PHOTO, PHOTO)).numpy()
        grain = rng.uniform(0.0, 0.05, big.shape)
        pixels = np.clip((big + grain) * 255.0, 0, 255).astype(np.uint8)
        files.append(tf.io.encode_jpeg(pixels, quality=90).numpy())
    return np.array(files, dtype=object)


def decode(file, label):
    """The `map` function: one JPEG file -> the model's (SIZE, SIZE, 3) float32 image in [0, 1], and its label."""
    import tensorflow as tf

    image = tf.io.decode_jpeg(file, channels=3)
    image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, (SIZE, SIZE))
    return image, label


def stages(dataset) -> list[str]:
    """The transformations of a `tf.data` pipeline from its source to what the model pulls, e.g.
    ['from_tensor_slices', 'parallel map', 'cache', 'batch', 'prefetch']; unknown ones by their class name."""
    found = []
    node = dataset
    while node is not None:
        name = type(node).__name__
        found.append(_STAGES.get(name, name))
        node = getattr(node, "_input_dataset", None)
    return [s for s in reversed(found) if s != "options"]


def parallel_calls(dataset) -> list[int]:
    """`num_parallel_calls` of every parallel map in the pipeline (-1 is AUTOTUNE)."""
    calls = []
    node = dataset
    while node is not None:
        if type(node).__name__ == "_ParallelMapDataset":
            calls.append(int(node._num_parallel_calls))
        node = getattr(node, "_input_dataset", None)
    return calls


def fingerprints(dataset) -> list[str]:
    """One short digest per batch the dataset yields, of its images (rounded to 1e-4) and labels, in order."""
    prints = []
    for images, labels in dataset:
        digest = hashlib.sha256(np.round(np.asarray(images, np.float64), 4).tobytes())
        digest.update(np.asarray(labels).astype(np.int64).tobytes())
        prints.append(digest.hexdigest()[:16])
    return prints


@dataclass
class Timing:
    """What `measure` saw over the epochs after the first (the first also traces the step and fills caches)."""

    epoch_s: list[float] = field(default_factory=list)  # every epoch's time, the first included
    wait_s: float = 0.0  # time spent in next(iterator), first epoch excluded
    total_s: float = 0.0  # all time, first epoch excluded
    steps: int = 0  # steps taken, first epoch excluded

    @property
    def wait_fraction(self) -> float:
        """The share of the time the loop waited for its data."""
        return self.wait_s / self.total_s if self.total_s else 0.0

    @property
    def step_ms(self) -> float:
        """Mean time per step (waiting included), in milliseconds."""
        return 1000.0 * self.total_s / self.steps if self.steps else 0.0


def measure(dataset, step: Callable, epochs: int = 3) -> Timing:
    """Run `step(images, labels)` over `epochs` passes of `dataset`, timing the wait for each batch apart."""
    if epochs < 2:
        raise ValueError("measure needs at least 2 epochs: the first is not counted")
    timing = Timing()
    for epoch in range(epochs):
        started, waited, steps = time.perf_counter(), 0.0, 0
        batches = iter(dataset)
        while True:
            asked = time.perf_counter()
            try:
                images, labels = next(batches)
            except StopIteration:
                break
            waited += time.perf_counter() - asked
            _ = np.asarray(step(images, labels))  # the step's result in hand: its work is done
            steps += 1
        elapsed = time.perf_counter() - started
        timing.epoch_s.append(elapsed)
        if epoch:
            timing.wait_s, timing.total_s, timing.steps = (
                timing.wait_s + waited,
                timing.total_s + elapsed,
                timing.steps + steps,
            )
    return timing
