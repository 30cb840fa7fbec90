"""PyCOMPSs's @compss (nested COMPSs applications) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @compss (nested COMPSs applications) is not supported here; use call the application's functions (tasks) directly instead")
