"""PyCOMPSs's @container (tasks in containers) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @container (tasks in containers) is not supported here; use a plain @task (the engines already run in the course's environment) instead")
