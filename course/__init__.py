"""Distributed Deep Learning on HPC: the Python package the course notebooks use.

Modules (one concern each): profile, data, mpi, doctor, lab, cli; later cluster, tasks,
training, comm, perf, jobs and grading.
"""

__version__ = "0.1.0"


class UserError(Exception):
    """A mistake the user can fix (bad argument, missing file): shown as one line, never a traceback."""
