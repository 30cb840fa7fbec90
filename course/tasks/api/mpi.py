"""`from course.tasks.api.mpi import mpi` (as `pycompss.api.mpi`): an MPI program as a task (course mpiexec)."""

from course.tasks.external import mpi

__all__ = ["mpi"]
