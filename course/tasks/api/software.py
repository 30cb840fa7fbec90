"""PyCOMPSs's @software (tasks described in JSON files) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @software (tasks described in JSON files) is not supported here; use @task with @binary/@mpi in the code instead")
