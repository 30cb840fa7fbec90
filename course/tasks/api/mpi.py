"""`from course.tasks.api.mpi import mpi` (as `pycompss.api.mpi`): an MPI program as a task, via the course's mpiexec."""

from course.tasks.external import mpi

__all__ = ["mpi"]
