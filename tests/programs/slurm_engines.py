"""Start Slurm engines with one task per node and show where they run: hostnames, an mpi4py all-reduce
across the engines, and %px. Usage: slurm_engines.py CLUSTER_ID [--keep] [--horovod] (keep: leave the cluster
running; horovod: also Horovod's ranks and an all-reduce, after training.horovod_nodes as notebook 07 calls it)."""

import socket
import sys

from IPython.testing.globalipapp import start_ipython

from course import cluster, training

cluster_id, keep = sys.argv[1], "--keep" in sys.argv
shell = start_ipython()  # an IPython shell, so that %px can be tried as a learner types it
engines = cluster.start(2, engines="slurm", tasks_per_node=1, cluster_id=cluster_id, persist=keep, timeout=180)
print("HOSTS", " ".join(sorted(engines.view.apply_sync(socket.gethostname))), flush=True)


def mpi_sum() -> float:
    from mpi4py import MPI

    return MPI.COMM_WORLD.allreduce(MPI.COMM_WORLD.rank + 1.0)


print("MPI_SUM", " ".join(str(s) for s in engines.view.apply_sync(mpi_sum)), flush=True)


def horovod_ranks() -> tuple:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    total = hvd.allreduce(tf.constant(hvd.rank() + 1.0), op=hvd.Sum)
    return hvd.rank(), hvd.local_rank(), hvd.local_size(), float(total)


if "--horovod" in sys.argv:
    print("HOROVOD_LAYOUT", training.horovod_nodes(engines.view, nodes=2), flush=True)
    print("HOROVOD", sorted(engines.view.apply_sync(horovod_ranks)), flush=True)
shell.run_line_magic("px", "import socket; where = socket.gethostname()")
print("PX", " ".join(sorted(engines.view.pull("where", block=True))), flush=True)
if not keep:
    cluster.stop(cluster_id)
    print("STOPPED", flush=True)
