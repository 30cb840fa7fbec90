"""PyCOMPSs's @mpmd_mpi (multiple-program MPI tasks) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @mpmd_mpi (multiple-program MPI tasks) is not supported here; use @mpi(binary=...) with one program instead")
