"""The course's Keras models (TensorFlow 2.15, Keras 2), built the same way on one engine or many.

`mnist_cnn` is the warm-up network of the seeds (Torres): two 5x5 convolutions with pooling and a softmax layer.
"""

from __future__ import annotations


def mnist_cnn(input_shape: tuple[int, int, int] = (28, 28, 1), classes: int = 10, learning_rate: float = 0.1):
    """Conv 32 5x5, max-pool, Conv 64 5x5, max-pool, flatten, Dense `classes` softmax; compiled with plain SGD."""
    import tensorflow as tf  # imported here: TensorFlow takes seconds to import

    model = tf.keras.Sequential([
        tf.keras.layers.Input(shape=input_shape),
        tf.keras.layers.Conv2D(32, (5, 5), activation="relu"),
        tf.keras.layers.MaxPooling2D((2, 2)),
        tf.keras.layers.Conv2D(64, (5, 5), activation="relu"),
        tf.keras.layers.MaxPooling2D((2, 2)),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(classes, activation="softmax"),
    ], name="mnist_cnn")
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


RESNETS = {"resnet50v2": "ResNet50V2", "resnet101v2": "ResNet101V2", "resnet152v2": "ResNet152V2"}


def resnet(name: str = "resnet50v2", input_shape: tuple[int, int, int] = (128, 128, 3), classes: int = 10,
           learning_rate: float = 0.01):
    """Keras' ResNet-V2 (`name`: resnet50v2 or resnet152v2) with weights=None, compiled with SGD as in seed 004.

    Build it inside `strategy.scope()` to create its variables mirrored across replicas.
    """
    import tensorflow as tf

    from course import UserError

    key = name.strip().lower().replace("-", "").replace("_", "")
    if key not in RESNETS:
        raise UserError(f"unknown ResNet {name!r}; known: {', '.join(RESNETS)}")
    model = getattr(tf.keras.applications, RESNETS[key])(include_top=True, weights=None, input_shape=input_shape,
                                                         classes=classes)
    model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
