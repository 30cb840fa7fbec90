"""PyCOMPSs's @http (tasks that call HTTP services) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @http (tasks that call HTTP services) is not supported here; use a plain @task that calls the service (e.g. with urllib) instead")
