"""Mixed precision, measured (notebook 06, part two): the memory a policy's activations take, and Keras's own
dynamic loss scaling (`tf.keras.mixed_precision.LossScaleOptimizer`) step by step, to compare a hand-written step
with.

    >>> bytes_32 = activation_bytes(build(), x)                            # float32 policy
    >>> bytes_16 = activation_bytes(build(), x, policy="mixed_float16")    # about half
    >>> history = keras_steps(build, batches, initial_scale=2.0**17, growth_steps=2, lr=0.05)
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterable, Iterator

import numpy as np


@contextmanager
def policy(name: str) -> Iterator[None]:
    """Models built inside use the Keras dtype policy `name` ('float32', 'mixed_float16', 'mixed_bfloat16')."""
    import tensorflow as tf

    before = tf.keras.mixed_precision.global_policy()
    tf.keras.mixed_precision.set_global_policy(name)
    try:
        yield
    finally:
        tf.keras.mixed_precision.set_global_policy(before)


def activation_bytes(model, images) -> int:
    """Bytes of every layer's output for one batch: what the backward pass keeps in memory, in the layers' dtypes."""
    total, value = 0, images
    for layer in model.layers:
        value = layer(value)
        total += int(np.prod(value.shape)) * value.dtype.size
    return total


def loss_of(model, images, labels):
    """Mean cross-entropy of the model's logits, computed in float32 whatever the policy (float16 sums lose bits)."""
    import tensorflow as tf

    logits = tf.cast(model(images, training=True), tf.float32)
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))


def keras_steps(build: Callable, batches: Iterable, initial_scale: float, growth_steps: int, lr: float) -> list[dict]:
    """Train a model from `build()` one batch at a time with Keras's LossScaleOptimizer around SGD(lr): after each
    step, {'weights', 'scale', 'loss'} (the scale the next step will use)."""
    import tensorflow as tf

    model = build()
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(
        tf.keras.optimizers.SGD(lr), dynamic=True, initial_scale=initial_scale, dynamic_growth_steps=growth_steps
    )
    history = []
    for images, labels in batches:
        with tf.GradientTape() as tape:
            loss = loss_of(model, images, labels)
            scaled = optimizer.get_scaled_loss(loss)
        grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        history.append({"weights": model.get_weights(), "scale": float(optimizer.loss_scale), "loss": float(loss)})
    return history
