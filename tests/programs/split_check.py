"""Run under mpiexec -n 2: rank 0 runs the front of a model, sends the activations, rank 1 runs the back.

Rank 1 saves the pipeline's output to argv[1]; the test compares it with the unsplit model built from the
same seed in the test process. Usage: split_check.py OUTPUT.npy CUT
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf
from mpi4py import MPI

from course import models, parallelism

world = MPI.COMM_WORLD
rank = world.Get_rank()
cut = int(sys.argv[2])
tf.keras.utils.set_random_seed(11)
model = models.mnist_cnn()  # every rank builds the same weights from the seed
x = np.random.default_rng(5).random((6, 28, 28, 1)).astype(np.float32)
front, back = parallelism.split_sequential(model, cut)
if rank == 0:
    activations = front(x, training=False).numpy()
    world.Send(activations, dest=1)
    print(f"RANK 0 SENT {activations.shape}", flush=True)
elif rank == 1:
    activations = np.empty((len(x), *front.output_shape[1:]), dtype=np.float32)
    world.Recv(activations, source=0)
    np.save(sys.argv[1], back(activations, training=False).numpy())
    print("RANK 1 SAVED", flush=True)
