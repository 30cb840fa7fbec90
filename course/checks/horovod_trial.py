"""What a learner's Horovod callbacks actually do, measured on every rank: the callbacks themselves (all but the
file writers) run in a short fit of a tiny model that starts from weights of each rank's own, on data of each
rank's own, and a recorder before and after them notes the weights around the first step's broadcast, the rate
the optimizer used at every step, and the loss each epoch's logs hold once the callbacks have run. Their state is
put back afterwards, so the notebook's own fit starts them fresh. Notebook 07's exercise 3 reads it
(course.checks.horovod.callback_lists).

    view.apply_sync(horovod_trial.run, on_engine("callbacks"), rate, epochs, steps)   # one record per rank
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WRITERS = ("ModelCheckpoint", "TensorBoard")  # left out of the trial: they would write into the notebook's OUT
BATCH = 4


def run(callbacks: Sequence, rate: float, epochs: int, steps: int) -> dict[str, Any]:
    """On an engine: fit a one-layer model for `epochs` epochs of `steps` steps with `callbacks` (writers left
    out), compiled at `rate`; returns this rank's record: `before` and `after`, digests of the weights at the end
    of the first step before and after the callbacks ran; `rates`, the rate of every step; `losses`, each epoch's
    loss as the logs hold it after the callbacks."""
    import hashlib

    import horovod.tensorflow.keras as hvd
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(hvd.rank())  # this rank's own start and data
    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(3, activation="softmax")])
    model.set_weights([rng.normal(0, 0.5, w.shape).astype(w.dtype) for w in model.get_weights()])
    model.compile(optimizer=tf.keras.optimizers.legacy.SGD(learning_rate=rate), loss="sparse_categorical_crossentropy")
    x = rng.random((steps * BATCH, 4)).astype("float32")
    y = rng.integers(0, 3, steps * BATCH)
    seen: dict[str, Any] = {"before": None, "after": None, "rates": [], "losses": []}

    def digest() -> str:
        return hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()

    class Before(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if seen["before"] is None:
                seen["before"] = digest()

    class After(tf.keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen["rates"].append(float(tf.keras.backend.get_value(self.model.optimizer.lr)))

        def on_train_batch_end(self, batch, logs=None):
            if seen["after"] is None:
                seen["after"] = digest()

        def on_epoch_end(self, epoch, logs=None):
            seen["losses"].append(float((logs or {}).get("loss", float("nan"))))

    tried = [c for c in callbacks if type(c).__name__ not in WRITERS]
    states = [(c, dict(vars(c))) for c in tried]
    try:
        model.fit(x, y, batch_size=BATCH, epochs=epochs, callbacks=[Before(), *tried, After()], verbose=0)
    finally:
        for c, state in states:
            vars(c).clear()
            vars(c).update(state)
    return seen
