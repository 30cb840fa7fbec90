"""Notebook 08's checks and measurements for a MirroredStrategy training loop the learner writes.

The learner writes `build(strategy, make_model, learning_rate)` (model and optimizer in the strategy's scope),
`replica_step(model, optimizer, images, labels, global_batch)` (one replica's loss, scaled by the global batch) and
`train(strategy, model, optimizer, dataset, global_batch, epochs)` (`strategy.run` + `strategy.reduce`). This module
runs them on 1 and 2 replicas of one process and says, in one line, what differs - it holds no training loop of its
own. The process needs its replica devices before TensorFlow starts: `training.replica_devices(n)` first.

    devices = training.replica_devices(2)
    mirrored.check_same_as_one_device(mirrored.compare_replicas(build, train))
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

TOLERANCE = 1e-5  # largest weight difference allowed between 1 and 2 replicas: float32 sums in another order


def check_build(build: Callable, replicas: int = 2) -> dict[str, Any]:
    """Call `build` under a `replicas`-device strategy; fail with a hint unless model and optimizer are mirrored."""
    from course import models, training

    strategy = training.mirrored_strategy(replicas)
    try:
        model, optimizer = build(strategy, models.mnist_cnn, 0.1)
    except ValueError as exc:
        raise AssertionError(f"build raised {exc}") from None
    variable, step = model.weights[0], optimizer.iterations
    found = {
        "replicas": strategy.num_replicas_in_sync,
        "kind": type(variable).__name__,
        "copies": len(getattr(variable, "values", [variable])),
        "optimizer": type(step).__name__,
    }
    assert found["kind"] == "MirroredVariable", (
        f"the model's variables are {found['kind']}, not MirroredVariable: build (make_model()) the model inside "
        f"`with strategy.scope():`"
    )
    assert found["optimizer"] == "MirroredVariable", (
        "the optimizer's variables (its step counter, momentum...) are not mirrored: create the optimizer inside "
        "`with strategy.scope():` too"
    )
    theirs = [v for v in (variable, step) if not strategy.extended.variable_created_in_scope(v)]
    assert not theirs, (
        "the variables were made in the scope of another strategy, not of the `strategy` build is given: a new "
        "MirroredStrategy() picks its own devices. Build inside `with strategy.scope():`"
    )
    return found


def check_whole_batches(build: Callable, train: Callable) -> None:
    """Every step sees a whole global batch: 2 whole batches and 5 images more train as the 2 batches alone (the
    partial last batch dropped, as the loop's averages over steps x global batch assume)."""
    whole = compare_replicas(build, train, replicas=(1,), steps=2)
    more = compare_replicas(build, train, replicas=(1,), steps=2, extra=5)
    moved = max(float(np.abs(a - b).max()) for a, b in zip(whole.weights[1], more.weights[1]))
    assert moved < TOLERANCE, (
        f"with 5 images more than 2 whole global batches the weights moved {moved:.2g} further than on the 2 "
        f"batches alone: the loop took a step on a partial last batch; every step should see a whole global "
        f"batch (the loop's loss and accuracy divide by steps x global batch)"
    )


def check_training_mode(replica_step: Callable) -> None:
    """The step runs the model in training mode: on a small model with a BatchNormalization layer (as ResNet50V2
    has), one call moves the layer's moving statistics; in inference mode they stay."""
    import tensorflow as tf

    tf.keras.utils.set_random_seed(0)
    model = tf.keras.Sequential(
        [tf.keras.Input((28, 28, 1)), tf.keras.layers.Flatten(), tf.keras.layers.Dense(8),
         tf.keras.layers.BatchNormalization(), tf.keras.layers.Dense(10, activation="softmax")]
    )  # fmt: skip
    norm = model.layers[2]
    before = norm.moving_mean.numpy().copy()
    rng = np.random.default_rng(0)
    images, labels = rng.random((8, 28, 28, 1), dtype=np.float32), rng.integers(0, 10, 8)
    replica_step(model, tf.keras.optimizers.SGD(0.1), tf.constant(images), tf.constant(labels), 16)
    assert not np.allclose(norm.moving_mean.numpy(), before), (
        "your step ran the model in inference mode: a BatchNormalization layer (ResNet50V2 has many) kept its "
        "moving statistics, so it would never learn them; a training step runs the model in training mode"
    )


def check_step(
    replica_step: Callable, learning_rate: float = 0.1, seed: int = 0, images: int = 8, global_batch: int = 16
) -> dict[str, float]:
    """One call of the learner's step on `images` images of a global batch of `global_batch`, outside any strategy:
    the loss must be the sum of the per-image losses / global_batch, and the update exactly one SGD step on it."""
    import tensorflow as tf

    from course import models

    n, g = images, global_batch
    tf.keras.utils.set_random_seed(seed)
    model = models.mnist_cnn()
    rng = np.random.default_rng(seed)
    pixels = rng.random((n, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, n)
    before = [w.numpy() for w in model.trainable_variables]
    with tf.GradientTape() as tape:
        probabilities = model(pixels, training=True)
        total = tf.reduce_sum(tf.keras.losses.sparse_categorical_crossentropy(labels, probabilities))
    gradients = tape.gradient(total, model.trainable_variables)  # of the SUM: the check scales it itself
    correct = float(np.sum(np.argmax(probabilities.numpy(), axis=1) == labels))
    try:
        result = replica_step(
            model, tf.keras.optimizers.SGD(learning_rate), tf.constant(pixels), tf.constant(labels), g
        )
    except ValueError as exc:
        if "No gradients provided" not in str(exc):
            raise
        raise AssertionError(
            "no gradient reached the weights: tape.gradient gave None for every variable, so the tape never saw "
            "the weights used. Run the model's forward pass, and the loss, inside `with tf.GradientTape() as tape:`"
        ) from None
    assert isinstance(result, (tuple, list)) and len(result) == 2, "replica_step should return (loss, correct)"
    loss, got_correct = float(result[0]), float(result[1])
    total = float(total)
    assert not np.isclose(loss, total / n, rtol=1e-4), (
        f"your loss {loss:.4f} is the mean over the replica's own {n} images; MirroredStrategy adds the gradients "
        f"of all replicas, so its step would be {g / n:.3g} times too large. Divide the sum of the per-image losses "
        f"by the GLOBAL batch ({g} here): "
        "tf.nn.compute_average_loss(..., global_batch_size=global_batch)"
    )
    assert np.isclose(loss, total / g, rtol=1e-4), (
        f"the loss should be the sum of the {n} per-image cross-entropies divided by the global batch {g} "
        f"({total / g:.4f}), not {loss:.4f}"
    )
    moved = max(float(np.abs(w.numpy() - b).max()) for w, b in zip(model.trainable_variables, before))
    assert moved > 0, "the weights did not change: apply the gradients with optimizer.apply_gradients"
    wrong = max(
        float(np.abs(w.numpy() - (b - learning_rate * d.numpy() / g)).max())
        for w, b, d in zip(model.trainable_variables, before, gradients)
    )
    assert wrong < TOLERANCE, (
        f"the update differs from one SGD step on your loss by {wrong:.2e}: take the "
        f"gradients of the scaled loss with respect to model.trainable_variables"
    )
    assert got_correct == correct, (
        f"correct should count this replica's right predictions ({correct:.0f} of {n}), not {got_correct:g}"
    )
    return {"loss": loss, "correct": got_correct}


@dataclass(frozen=True)
class StepCase:
    """One replica's part of a global batch, for `check_step`, and a name the message cites."""

    name: str
    images: int
    global_batch: int


# Exercise 3 beyond the notebook's even split (8 of 16): tf.nn.compute_average_loss divides the sum of the
# per-example losses by global_batch_size whatever the replica's own share, and a global batch the replicas do not
# divide evenly gives them unequal parts (TensorFlow's custom training tutorial: divide by the global batch, not
# the replica's own).
STEP_CASES = (
    StepCase("one replica of 4 (8 images of a global batch of 32)", 8, 32),
    StepCase("the larger part of a global batch of 17 on 2 replicas (9 images)", 9, 17),
    StepCase("the smaller part of a last, short global batch of 5 on 2 replicas (2 images)", 2, 5),
)


def check_step_cases(replica_step: Callable, cases: Sequence[StepCase] = STEP_CASES) -> None:
    """`check_step` on every case of STEP_CASES (other shares of the global batch, uneven ones); the message names
    the case."""
    for case in cases:
        try:
            check_step(replica_step, images=case.images, global_batch=case.global_batch)
        except AssertionError as wrong:
            raise AssertionError(f"{case.name}: {wrong}") from None


@dataclass
class Comparison:
    """The learner's loop on each replica count from the same weights and global batches."""

    weights: dict[int, list[np.ndarray]]
    initial: list[np.ndarray]
    history: dict[int, list[dict]]
    global_batch: int
    distributed: set[int] = field(default_factory=set)  # replica counts whose loop distributed its dataset
    ran: set[int] = field(default_factory=set)  # replica counts whose loop ran its step with strategy.run

    def difference(self, n: int, base: int = 1) -> float:
        """Largest absolute weight difference between `n` replicas and `base`."""
        return max(float(np.abs(a - b).max()) for a, b in zip(self.weights[n], self.weights[base]))

    def movement(self, n: int) -> float:
        """How far training moved the weights on `n` replicas (Euclidean norm of the change)."""
        return float(np.sqrt(sum(float(np.sum((a - b) ** 2)) for a, b in zip(self.weights[n], self.initial))))


def compare_replicas(
    build: Callable,
    train: Callable,
    replicas: Sequence[int] = (1, 2),
    *,
    global_batch: int = 16,
    steps: int = 4,
    learning_rate: float = 0.05,
    seed: int = 0,
    extra: int = 0,
) -> Comparison:
    """Train from the same initial weights on the same `steps` global batches with each replica count (and `extra`
    images after them: a partial last batch)."""
    import tensorflow as tf

    from course import models, training

    rng = np.random.default_rng(seed)
    images = rng.random((steps * global_batch, 28, 28, 1), dtype=np.float32)
    labels = rng.integers(0, 10, steps * global_batch)
    images = np.concatenate([images, rng.random((extra, 28, 28, 1), dtype=np.float32)])
    labels = np.concatenate([labels, rng.integers(0, 10, extra)])
    tf.keras.utils.set_random_seed(seed)
    initial = models.mnist_cnn().get_weights()
    weights, history, distributed, ran = {}, {}, set(), set()
    for n in replicas:
        strategy = training.mirrored_strategy(n)
        _note_distribution(strategy, distributed, n)
        _note(strategy, ("run",), ran, n)
        try:
            model, optimizer = build(strategy, models.mnist_cnn, learning_rate)
            model.set_weights(initial)
            history[n] = train(
                strategy, model, optimizer, tf.data.Dataset.from_tensor_slices((images, labels)), global_batch, 1
            )
        except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised, in one line
            raise AssertionError(
                f"training on {n} replica(s) raised {type(exc).__name__}: "
                f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
                f"{_hint(exc)}"
            ) from None
        weights[n] = model.get_weights()
    return Comparison(weights, initial, history, global_batch, distributed, ran)


def _note_distribution(strategy: Any, distributed: set[int], n: int) -> None:
    """Add `n` to `distributed` when the learner's loop distributes a dataset with `strategy` (a diagnosis: a run
    on an undistributed dataset and one with a per-replica mean loss move the weights alike)."""
    _note(strategy, ("experimental_distribute_dataset", "distribute_datasets_from_function"), distributed, n)


def _note(strategy: Any, names: Sequence[str], seen: set[int], n: int) -> None:
    """Add `n` to `seen` whenever the learner's code calls one of the strategy's methods `names`."""
    for name in names:
        original = getattr(strategy, name)

        def noted(*args, _original=original, **kwargs):
            seen.add(n)
            return _original(*args, **kwargs)

        setattr(strategy, name, noted)


def _hint(exc: Exception) -> str:
    text = f"{type(exc).__name__} {exc}"
    if "colocate_vars_with" in text or "scope" in text:
        return " (create the model and the optimizer inside strategy.scope())"
    if "PerReplica" in text:
        return (
            " (strategy.run returns one value per replica: combine them into one with "
            "strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None))"
        )
    return ""


def check_same_as_one_device(comparison: Comparison, n: int = 2) -> float:
    """Fail with the reason unless `n` replicas end with the weights and metrics of 1 device; returns the difference."""
    c = comparison
    assert n in c.ran, (
        f"with {n} replicas the loop never called strategy.run: its step ran once, outside the replicas (on the "
        f"whole global batch), not on each replica with its part of the batch. Run the step with strategy.run"
    )
    assert c.movement(1) > 1e-4, "training on 1 device did not change the weights: does each step apply the gradients?"
    ratio = c.movement(n) / c.movement(1)
    difference = c.difference(n)
    if difference > TOLERANCE:
        if n not in c.distributed:
            raise AssertionError(
                f"with {n} replicas the weights moved {ratio:.2f}x as far as with 1 device: the loop never distributed "
                f"its dataset, so every replica trained on the whole global batch of {c.global_batch}. Iterate "
                f"strategy.experimental_distribute_dataset(...), which splits each global batch among the replicas"
            )
        if abs(ratio - n) < 0.15 * n:
            raise AssertionError(
                f"with {n} replicas the weights moved {ratio:.2f}x as far as with 1 device on the same global batches: "
                f"each replica divided its loss by its own {c.global_batch // n} images (a per-replica mean), and "
                f"MirroredStrategy adds the replicas' gradients, so every step is {n}x too large. Scale each "
                f"replica's loss by the GLOBAL batch ({c.global_batch}) instead"
            )
        raise AssertionError(
            f"{n} replicas end with weights {difference:.2e} away from 1 device's (tolerance "
            f"{TOLERANCE:g}) on the same global batches: they should train the same model"
        )
    for metric in ("loss", "accuracy"):
        one, many = _last(c.history[1], metric), _last(c.history[n], metric)
        if not np.isclose(one, many, rtol=1e-4, atol=1e-6):
            share = f" - about 1/{n} of it" if np.isclose(many * n, one, rtol=0.3) else ""
            raise AssertionError(
                f"the {metric} reported for {n} replicas ({many:.4f}) differs from 1 device's ({one:.4f}){share}: "
                f"each replica returns only its part of a step's {metric} (one replica's value, or the mean of them, "
                f"is about 1/{n} of it); add the parts up with strategy.reduce(tf.distribute.ReduceOp.SUM, ..., "
                f"axis=None)"
            )
    assert 0 <= _last(c.history[1], "accuracy") <= 1, "accuracy should be a fraction between 0 and 1"
    return difference


def _last(history: Any, metric: str) -> float:
    try:
        return float(history[-1][metric])
    except (TypeError, KeyError, IndexError, ValueError) as exc:
        raise AssertionError(
            f"train should return a list with one dict per epoch holding {metric!r} "
            f"(as the given loop does): {type(exc).__name__}: {exc}"
        ) from None


def epoch_time(history: list[dict]) -> float:
    """Mean seconds per epoch, the first epoch left out (it also traces the step); needs two epochs or more."""
    later = [e["seconds"] for e in history[1:]]
    if not later:
        from course import UserError

        raise UserError("epoch_time needs at least 2 epochs: the first one also traces the step and is left out")
    return float(np.mean(later))


def accuracy_on(model, dataset, batch: int = 256) -> float:
    """Share of right predictions of `model` on an unbatched (image, label) tf.data.Dataset."""
    right = total = 0
    for images, labels in dataset.batch(batch):
        predicted = np.argmax(model(images, training=False).numpy(), axis=1)
        right += int(np.sum(predicted == labels.numpy()))
        total += len(predicted)
    return right / total


def search_batch(
    model: str,
    input_size: int,
    candidates: Sequence[int],
    memory_limit_gb: float | None = None,
    timeout: float | None = 1800,
):
    """The largest-batch search of `training.search_batch` (one step per candidate, each in a fresh process,
    stopping at the first out-of-memory), also for the small "mnist_cnn" the quick profile trains."""
    from course import training

    return training.largest_batch(
        lambda batch: training.in_fresh_process(
            _batch_trial, model, input_size, batch, memory_limit_gb, timeout=timeout
        ),
        candidates,
    )


def _batch_trial(model: str, input_size: int, batch: int, memory_limit_gb: float | None) -> float:
    """One training step on `batch` zero images (in a fresh process, under the memory cap if any); its seconds."""
    import resource

    import psutil

    from course import models

    channels = 1 if model == "mnist_cnn" else 3
    shape = (input_size, input_size, channels)
    net = models.mnist_cnn(shape) if model == "mnist_cnn" else models.resnet(model, input_shape=shape)
    if memory_limit_gb is not None:
        allowed = psutil.Process().memory_info().vms + int(memory_limit_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (allowed, resource.getrlimit(resource.RLIMIT_AS)[1]))
    started = time.perf_counter()
    net.train_on_batch(np.zeros((batch, *shape), np.float32), np.zeros(batch, np.int64))
    return time.perf_counter() - started
