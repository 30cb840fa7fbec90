"""PyCOMPSs's @local (local (master-side) functions) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @local (local (master-side) functions) is not supported here; use an ordinary function that calls compss_wait_on on its arguments instead")
