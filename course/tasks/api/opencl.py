"""PyCOMPSs's @opencl (OpenCL kernels as tasks) has no counterpart on ipyparallel engines: refused at import, in one line."""

raise SystemExit("course.tasks: @opencl (OpenCL kernels as tasks) is not supported here; use a plain @task that launches the kernel instead")
