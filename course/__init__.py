"""Distributed Deep Learning on HPC: the Python package the course notebooks use.

Modules (one concern each): profile, data, mpi, doctor, lab, cli; later cluster, tasks,
training, comm, perf, jobs and grading.
"""

__version__ = "0.1.0"


from typing import Any


class UserError(Exception):
    """A mistake the user can fix (bad argument, missing file): shown as one line, never a traceback."""


def from_args(args: Any, names: str) -> dict[str, Any]:
    """The options `names` (separated by spaces) of parsed arguments `args`, as keywords of the same names: for the
    command line (course.cli, course.grading.cli) and the job programs alike, so none imports another's parser."""
    return {name: getattr(args, name) for name in names.split()}
