"""Stands in for a job's program: records what this rank got from Slurm and its launcher, then exits.

It writes one JSON file per process into $COURSE_PROBE_DIR: the node, the pid and the environment a rank's layout
is read from (ranks, GPUs, threads). Standard library only, so any launcher and Python start it quickly.
"""

import json
import os
import socket
import sys

KEPT = ("SLURM_", "OMPI_COMM_WORLD_", "PMIX_RANK", "PMI_RANK", "HOROVOD_", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")

if __name__ == "__main__":
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "args": sys.argv[1:],
        "env": {k: v for k, v in os.environ.items() if k.startswith(KEPT)},
    }
    path = os.path.join(os.environ["COURSE_PROBE_DIR"], f"{record['host']}-{record['pid']}.json")
    with open(path + ".part", "w") as file:
        json.dump(record, file)
    os.replace(path + ".part", path)  # a reader never sees half a record
