"""PyCOMPSs's @prolog (commands run before a task) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @prolog (commands run before a task) is not supported here; use a call at the start of the task's body instead")
