"""PyCOMPSs's @data_transformation (data transformations) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @data_transformation (data transformations) is not supported here; use a task that converts its input instead")
