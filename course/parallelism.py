"""Data vs model parallelism with the course's Keras models: what each would communicate, and a model cut in two.

`layer_volumes` counts, per layer, the gradient values data parallelism all-reduces and the activation values
model parallelism passes on; `split_sequential` cuts a Sequential model into two models that share its weights,
so that two workers (engines, devices) can each run one part and pass the activations between them.
"""

from __future__ import annotations

from course import UserError


def layer_volumes(model, batch: int) -> list[dict]:
    """Per layer: name, parameters (= gradient values per step) and activations (output values for `batch` samples)."""
    if batch < 1:
        raise UserError(f"batch must be a positive number of samples, not {batch}")
    rows = []
    for layer in model.layers:
        shape = layer.output_shape
        per_sample = 1
        for dim in shape[1:]:
            per_sample *= int(dim)
        rows.append({"layer": layer.name, "parameters": int(layer.count_params()), "activations": per_sample * batch})
    return rows


def split_sequential(model, at: int):
    """Two Keras models: layers [0, at) and [at, end) of the Sequential `model`, sharing its layer objects (and weights).

    front(x) is what the first worker computes; back(front(x)) equals model(x).
    """
    import tensorflow as tf  # imported here: TensorFlow takes seconds to import

    layers = model.layers
    if not 0 < at < len(layers):
        raise UserError(
            f"cut point must be between 1 and {len(layers) - 1} (the model has {len(layers)} layers), not {at}"
        )
    front = tf.keras.Sequential(
        [tf.keras.layers.Input(shape=model.input_shape[1:]), *layers[:at]], name=f"{model.name}_front"
    )
    back = tf.keras.Sequential(
        [tf.keras.layers.Input(shape=layers[at - 1].output_shape[1:]), *layers[at:]], name=f"{model.name}_back"
    )
    return front, back


def rebuild(config_json: str, weights: list):
    """The model described by `model.to_json()` with `model.get_weights()`: how a model is shipped to another worker."""
    import tensorflow as tf

    model = tf.keras.models.model_from_json(config_json)
    model.set_weights(weights)
    return model
