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

from course.tasks.api.api import *  # noqa: F403 - PyCOMPSs's api calls (compss_wait_on, ...) and TaskGroup
from course.tasks.api.api import __all__ as _api
from course.tasks.parameter import *  # noqa: F403
from course.tasks.parameter import __all__ as _parameters
from course.tasks.decorators import COMPSsException, constraint, on_failure, task
from course.tasks.runtime import Future, TaskError, reset
from course.tasks.sync import synchronised
from course.tasks.views import Stats, graph, history, stats, trace, wait_points, waits

__all__ = [
    *_parameters,
    *_api,
    "COMPSsException",
    "Future",
    "TaskError",
    "constraint",
    "on_failure",
    "reset",
    "task",
    "synchronised",
    "Stats",
    "graph",
    "history",
    "stats",
    "trace",
    "waits",
    "wait_points",
]
