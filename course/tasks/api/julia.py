"""PyCOMPSs's @julia (Julia scripts as tasks) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @julia (Julia scripts as tasks) is not supported here; use @binary(binary='julia', args='script.jl ...') instead")
