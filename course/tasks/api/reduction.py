"""PyCOMPSs's @reduction (reduction tasks) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @reduction (reduction tasks) is not supported here; use course.tasks.functions.reduce.merge_reduce instead")
