"""The course's Keras models (TensorFlow 2.15, Keras 2), built the same way on one engine or many.

`mnist_cnn` is the workshops' warm-up network (from Jordi Torres's Fundamentals of Deep Learning for
Multi-GPUs, BSC): two 5x5 convolutions with pooling and a softmax layer.
"""

from __future__ import annotations


def _compiled(model, learning_rate: float):
    """`model` compiled as every course model is: plain SGD, sparse categorical cross-entropy, accuracy."""
    import tensorflow as tf

    model.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=learning_rate),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


def _conv_net(
    name: str,
    input_shape: tuple[int, int, int],
    blocks: list[list[int]],
    dense: list[int],
    classes: int,
    learning_rate: float,
    kernel: int,
    padding: str = "valid",
    pool_padding: str = "valid",
):
    """A compiled Sequential CNN: per block its ReLU convolutions (filters listed) then a 2x2 max-pool; flatten,
    the ReLU dense layers (units listed) and a softmax over `classes`."""
    import tensorflow as tf  # imported here: TensorFlow takes seconds to import

    layers = tf.keras.layers
    stack = [layers.Input(shape=input_shape)]
    for block in blocks:
        stack += [layers.Conv2D(f, (kernel, kernel), padding=padding, activation="relu") for f in block]
        stack.append(layers.MaxPooling2D((2, 2), padding=pool_padding))
    stack += [layers.Flatten(), *(layers.Dense(units, activation="relu") for units in dense)]
    stack.append(layers.Dense(classes, activation="softmax"))
    return _compiled(tf.keras.Sequential(stack, name=name), learning_rate)


def mnist_cnn(input_shape: tuple[int, int, int] = (28, 28, 1), classes: int = 10, learning_rate: float = 0.1):
    """Conv 32 5x5, max-pool, Conv 64 5x5, max-pool, flatten, Dense `classes` softmax; compiled with plain SGD."""
    return _conv_net("mnist_cnn", input_shape, [[32], [64]], [], classes, learning_rate, kernel=5)


RESNETS = {"resnet50v2": "ResNet50V2", "resnet101v2": "ResNet101V2", "resnet152v2": "ResNet152V2"}


def resnet(
    name: str = "resnet50v2",
    input_shape: tuple[int, int, int] = (128, 128, 3),
    classes: int = 10,
    learning_rate: float = 0.01,
):
    """Keras' ResNet-V2 (`name`: resnet50v2 or resnet152v2) with weights=None, compiled with SGD as in Torres's BSC hands-on.

    Build it inside `strategy.scope()` to create its variables mirrored across replicas.
    """
    import tensorflow as tf

    from course import UserError

    key = name.strip().lower().replace("-", "").replace("_", "")
    if key not in RESNETS:
        raise UserError(f"unknown ResNet {name!r}; known: {', '.join(RESNETS)}")
    model = getattr(tf.keras.applications, RESNETS[key])(
        include_top=True, weights=None, input_shape=input_shape, classes=classes
    )
    return _compiled(model, learning_rate)


def lenet(input_shape: tuple[int, int, int] = (32, 32, 3), classes: int = 10, learning_rate: float = 0.05):
    """LeNet as in the DeepHealth HPC lab's CIFAR-10 run: Conv 20 5x5, pool, Conv 50 5x5, pool, Dense 500, Dense `classes`; SGD."""
    return _conv_net("lenet", input_shape, [[20], [50]], [500], classes, learning_rate, kernel=5, padding="same")


def vgg16(
    input_shape: tuple[int, int, int] = (32, 32, 3), classes: int = 10, learning_rate: float = 0.05, width: int = 8
):
    """VGG16's layout (13 3x3 convolutions in blocks of 2, 2, 3, 3, 3, each block then a max-pool; two dense layers)
    at `width` filters in the first block (VGG16 itself: 64), so that it trains on a CPU; SGD."""
    blocks = [[width * factor] * convs for convs, factor in ((2, 1), (2, 2), (3, 4), (3, 8), (3, 8))]
    return _conv_net(
        "vgg16_small",
        input_shape,
        blocks,
        [width * 16],
        classes,
        learning_rate,
        kernel=3,
        padding="same",
        pool_padding="same",
    )


# The networks of the DeepHealth HPC lab's run script (--network), by their names there.
NETWORKS = {"simple-mnist": mnist_cnn, "lenet": lenet, "vgg16": vgg16}


def build(network: str, input_shape: tuple[int, int, int], classes: int = 10, learning_rate: float | None = None):
    """A compiled model by its DeepHealth-lab name (simple-mnist, lenet, vgg16); unknown names list the known ones."""
    from course import UserError

    key = str(network).strip().lower().replace("_", "-")
    if key not in NETWORKS:
        raise UserError(f"unknown network {network!r}; known networks: {', '.join(NETWORKS)}")
    options = {} if learning_rate is None else {"learning_rate": learning_rate}
    return NETWORKS[key](input_shape=tuple(input_shape), classes=classes, **options)
