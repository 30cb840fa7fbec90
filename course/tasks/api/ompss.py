"""PyCOMPSs's @ompss (OmpSs binaries) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @ompss (OmpSs binaries) is not supported here; use @binary to run the program as a task instead")
