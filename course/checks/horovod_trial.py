"""What a learner's Horovod callbacks actually do, measured on every rank: the callbacks themselves run in a short
fit of a tiny model that starts from weights of each rank's own, on data of each rank's own, and a recorder before
and after them notes the weights around the first step's broadcast, the rate the optimizer used at every step, and
the loss each epoch's logs hold once the callbacks have run. The file writers run as copies that write into a
folder of the trial's own: the last checkpoint is then resumed from as the notebook resumes (`hvd.load_model`, the
optimizer's state with it), and the losses TensorBoard logged are read back. Their state is put back afterwards, so
the notebook's own fit starts them fresh. Notebook 07's exercise 3 reads it (course.checks.horovod.callback_lists).

    view.apply_sync(horovod_trial.run, on_engine("callbacks"), rate, epochs, steps)   # one record per rank
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

WRITERS = (
    "ModelCheckpoint",
    "TensorBoard",
)  # copied in the trial, to write into its own folder, not the notebook's OUT
BATCH = 4


def run(callbacks: Sequence, rate: float, epochs: int, steps: int) -> dict[str, Any]:
    """On an engine: fit a one-layer model for `epochs` epochs of `steps` steps with `callbacks` (writers left
    out), compiled at `rate`; returns this rank's record: `before` and `after`, digests of the weights at the end
    of the first step before and after the callbacks ran; `rates`, the rate of every step; `losses`, each epoch's
    loss as the logs hold it after the callbacks; `resumed`, what resuming from the last checkpoint gave (None
    without a checkpoint writer); `logged`, the epoch losses TensorBoard wrote (None without one)."""
    import hashlib
    import shutil
    import tempfile

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

    folder = tempfile.mkdtemp(prefix="course-trial-")
    tried = [_writing_into(c, folder) for c in callbacks]
    states = [(c, dict(vars(c))) for c in tried]
    try:
        model.fit(x, y, batch_size=BATCH, epochs=epochs, callbacks=[Before(), *tried, After()], verbose=0)
    finally:
        for c, state in states:
            vars(c).clear()
            vars(c).update(state)
    names = [type(c).__name__ for c in callbacks]
    try:
        seen["resumed"] = _resumed(folder) if "ModelCheckpoint" in names else None
        seen["logged"] = _logged(folder) if "TensorBoard" in names else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return seen


def _writing_into(callback: Any, folder: str) -> Any:
    """A writer callback copied to write into FOLDER (a checkpoint of the same file name, logs in FOLDER/logs);
    any other callback as it is."""
    import copy
    import os

    name = type(callback).__name__
    if name not in WRITERS:
        return callback
    callback = copy.copy(callback)
    if name == "ModelCheckpoint":
        callback.filepath = os.path.join(folder, os.path.basename(str(callback.filepath)))
    else:
        callback.log_dir = os.path.join(folder, "logs")
    return callback


def _resumed(folder: str) -> dict[str, Any]:
    """Resuming from the newest checkpoint in FOLDER as the notebook does (course.training.resume's load):
    {"epoch": its epoch, "iterations": the optimizer's step count loaded, "error": None or why it failed}."""
    import horovod.tensorflow.keras as hvd

    from course import training

    path, epoch = training.latest_checkpoint(folder)
    if path is None:
        return {"epoch": 0, "iterations": None, "error": "no checkpoint-NNN.h5 file was written"}
    try:
        model = hvd.load_model(str(path), legacy_opts=True)
        return {"epoch": epoch, "iterations": int(model.optimizer.iterations.numpy()), "error": None}
    except Exception as exc:  # noqa: BLE001 - what the learner's resume would meet, said in the feedback
        return {"epoch": epoch, "iterations": None, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def _logged(folder: str) -> list[float]:
    """The epoch losses TensorBoard wrote under FOLDER/logs (its training run), in epoch order."""
    from pathlib import Path

    import tensorflow as tf

    found: dict[int, float] = {}
    for events in sorted(Path(folder, "logs").rglob("events.out.tfevents.*")):
        if events.parent.name != "train":
            continue
        for event in tf.compat.v1.train.summary_iterator(str(events)):
            for value in event.summary.value:
                if value.tag == "epoch_loss":
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return [found[k] for k in sorted(found)]
