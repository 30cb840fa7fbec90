"""PyCOMPSs's @epilog (commands run after a task) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @epilog (commands run after a task) is not supported here; use a call at the end of the task's body instead")
