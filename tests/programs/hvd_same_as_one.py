"""Run under mpiexec -n 2: each rank trains on its half of every global batch with Horovod (plain SGD, no
warm-up); rank 0 also trains a plain Keras copy on the whole batches in one process. Saves the weights to OUT."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np

from course import training

hvd = training.horovod_init(threads=1)
import tensorflow as tf  # noqa: E402

from course import models  # noqa: E402

out, global_batch, steps, lr = sys.argv[1], 32, 4, 0.1
rank, size = hvd.rank(), hvd.size()
rng = np.random.default_rng(0)  # the same data on every rank
x = rng.random((steps * global_batch, 28, 28, 1), dtype=np.float32)
y = rng.integers(0, 10, steps * global_batch)


def build():
    tf.keras.utils.set_random_seed(1)  # the same initial weights everywhere
    return models.mnist_cnn((28, 28, 1), 10)


# Horovod: in step s, rank r takes its contiguous half of global batch s.
per_rank = global_batch // size
index = np.concatenate(
    [np.arange(s * global_batch + rank * per_rank, s * global_batch + (rank + 1) * per_rank) for s in range(steps)]
)
model = build()
initial = [w.copy() for w in model.get_weights()]
model.compile(optimizer=training.distributed_sgd(lr), loss="sparse_categorical_crossentropy")
training.broadcast_weights(model)
model.fit(
    x[index], y[index], batch_size=per_rank, epochs=1, shuffle=False, verbose=0, callbacks=training.horovod_callbacks()
)
np.savez(os.path.join(out, f"horovod-rank{rank}.npz"), *model.get_weights())

if rank == 0:  # one process, whole batches, plain SGD
    reference = build()
    reference.compile(optimizer=tf.keras.optimizers.legacy.SGD(lr), loss="sparse_categorical_crossentropy")
    reference.fit(x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0)
    np.savez(os.path.join(out, "one-process.npz"), *reference.get_weights())
    np.savez(os.path.join(out, "initial.npz"), *initial)
print(f"RANK {rank} OF {size} DONE", flush=True)
