"""COMPSs-style task graphs on the cluster's engines: PyCOMPSs's API, run by ipyparallel.

    from course.tasks import task, INOUT, compss_wait_on
    @task(returns=1)
    def inc(x): return x + 1
    compss_wait_on([inc(i) for i in range(5)])      # [1, 2, 3, 4, 5]
    course.tasks.graph(); course.tasks.trace(); course.tasks.stats(); course.tasks.reset()

A PyCOMPSs program runs unchanged once its `pycompss.` imports become `course.tasks.` (pycompss.api.task ->
course.tasks.api.task, pycompss.functions.reduce -> course.tasks.functions.reduce).
Tasks run on the engines of `course.cluster.current()` (a local cluster is started on first use).
"""

from course.tasks.parameter import *  # noqa: F403
from course.tasks.parameter import __all__ as _parameters
from course.tasks.runtime import COMPSsException, Future, TaskError, TaskGroup, constraint, on_failure, reset, task
from course.tasks.sync import (
    compss_barrier,
    compss_barrier_group,
    compss_cancel_group,
    compss_delete_file,
    compss_delete_object,
    compss_file_exists,
    compss_get_number_of_resources,
    compss_open,
    compss_start,
    compss_stop,
    compss_wait_on,
    compss_wait_on_directory,
    compss_wait_on_file,
    synchronised,
)
from course.tasks.views import Stats, graph, history, stats, trace, waits

__all__ = [
    *_parameters,
    "COMPSsException",
    "Future",
    "TaskError",
    "TaskGroup",
    "constraint",
    "on_failure",
    "reset",
    "task",
    "compss_barrier",
    "compss_barrier_group",
    "compss_cancel_group",
    "compss_delete_file",
    "compss_delete_object",
    "compss_file_exists",
    "compss_get_number_of_resources",
    "compss_open",
    "compss_start",
    "compss_stop",
    "compss_wait_on",
    "compss_wait_on_directory",
    "compss_wait_on_file",
    "synchronised",
    "Stats",
    "graph",
    "history",
    "stats",
    "trace",
    "waits",
]
