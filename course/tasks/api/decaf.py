"""PyCOMPSs's @decaf (Decaf dataflows) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @decaf (Decaf dataflows) is not supported here; use @binary or @mpi(binary=...) instead")
