"""PyCOMPSs's @IO (I/O tasks) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @IO (I/O tasks) is not supported here; use a plain @task instead")
