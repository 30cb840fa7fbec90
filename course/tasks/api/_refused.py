"""PyCOMPSs decorators with no counterpart on ipyparallel engines: their modules refuse to import, in one line."""

REFUSED = {
    "ompss": ("OmpSs binaries", "@binary to run the program as a task"),
    "container": ("tasks in containers", "a plain @task (the engines already run the course's environment)"),
    "http": ("tasks that call HTTP services", "a plain @task that calls the service (e.g. with urllib)"),
    "multinode": ("tasks spanning several nodes", "@mpi(binary=...) for a multi-process program"),
    "opencl": ("OpenCL kernels as tasks", "a plain @task that launches the kernel"),
    "julia": ("Julia scripts as tasks", "@binary(binary='julia', args='script.jl ...')"),
    "decaf": ("Decaf dataflows", "@binary or @mpi(binary=...)"),
    "mpmd_mpi": ("multiple-program MPI tasks", "@mpi(binary=...) with one program"),
    "software": ("tasks described in JSON files", "@task with @binary/@mpi in the code"),
    "prolog": ("commands run before a task", "a call at the start of the task's body"),
    "epilog": ("commands run after a task", "a call at the end of the task's body"),
    "reduction": ("reduction tasks", "course.tasks.functions.reduce.merge_reduce"),
    "local": ("master-side functions", "an ordinary function that calls compss_wait_on on its arguments"),
    "data_transformation": ("data transformations", "a task that converts its input"),
    "IO": ("I/O tasks", "a plain @task"),
    "compss": ("nested COMPSs applications", "call the application's functions (tasks) directly"),
}


def refuse(module: str) -> None:
    """Stop the program at `from course.tasks.api.MODULE import ...`: name the decorator and what to use."""
    what, instead = REFUSED[module]
    raise SystemExit(f"course.tasks: @{module} ({what}) is not supported here; use {instead} instead")
