"""PyCOMPSs's @multinode (tasks spanning several nodes) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @multinode (tasks spanning several nodes) is not supported here; use @mpi(binary=...) for a multi-process program instead")
