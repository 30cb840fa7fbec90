"""Run in a fresh process: the same model, initial weights and global batches trained with MirroredStrategy on
one logical CPU device and on two; saves both sets of weights to OUT."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np

from course import training

out, global_batch, steps, lr = sys.argv[1], 16, 3, 0.05
devices = training.logical_cpus(2)  # before TensorFlow starts
import tensorflow as tf  # noqa: E402

from course import models  # noqa: E402

rng = np.random.default_rng(0)
x = rng.random((steps * global_batch, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, steps * global_batch)
tf.keras.utils.set_random_seed(1)
initial = models.mnist_cnn((28, 28, 1), 10).get_weights()
np.savez(os.path.join(out, "initial.npz"), *initial)
for replicas in (1, 2):
    strategy = training.mirrored_strategy(replicas)
    with strategy.scope():
        model = models.mnist_cnn((28, 28, 1), 10, learning_rate=lr)
        model.set_weights(initial)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    model.fit(data, epochs=1, verbose=0)
    np.savez(os.path.join(out, f"replicas{strategy.num_replicas_in_sync}.npz"), *model.get_weights())
    print(f"REPLICAS {strategy.num_replicas_in_sync} DEVICES {list(strategy.extended.worker_devices)}", flush=True)
