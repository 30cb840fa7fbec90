"""Run under horovodrun or mpiexec: every rank contributes rank+1; print what the all-reduce summed."""

import horovod.tensorflow as hvd
import tensorflow as tf

hvd.init()
summed = hvd.allreduce(tf.constant([float(hvd.rank() + 1), 10.0]), op=hvd.Sum)
print(f"RANK {hvd.rank()} SIZE {hvd.size()} SUM {summed.numpy().tolist()}", flush=True)
