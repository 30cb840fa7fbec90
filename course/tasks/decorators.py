"""The PyCOMPSs-facing calls of the task runtime: @task, @constraint, @on_failure, TaskGroup and COMPSsException.

What a program (or notebook) writes, as PyCOMPSs's `pycompss.api` has it; calling a decorated function hands the call
to the runtime (runtime.py), which builds the graph and places the task.
"""

from __future__ import annotations

import types
from typing import Any, Callable

from course import UserError
from course.tasks import runtime
from course.tasks.definition import TaskDefinition, set_on_failure


class TaskFunction(TaskDefinition):
    """A function decorated with @task: calling it submits a task and returns Future(s)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if runtime.on_engine():
            return self.function(*args, **kwargs)
        return runtime.current().submit(self, args, kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A task on a method: `obj.method(...)` submits with `self=obj` (INOUT unless target_direction=IN)."""
        return self if instance is None else types.MethodType(self, instance)


def task(*args: Any, **options: Any) -> Any:
    """`@task(returns=..., x=INOUT, ...)`: calls of the function become tasks on the engines."""
    if args and callable(args[0]) and not options and len(args) == 1:
        return TaskFunction(args[0], {})
    if args:
        raise UserError("@task takes keyword arguments only, e.g. @task(returns=1, c=INOUT)")

    def decorate(function: Callable) -> TaskFunction:
        return TaskFunction(function, dict(options))

    return decorate


CONSTRAINT_KEYS = {
    "computing_units",
    "processors",
    "memory_size",
    "processor_architecture",
    "operating_system_type",
    "host_queues",
    "app_software",
    "storage_size",
    "wall_clock_limit",
}


def constraint(**options: Any) -> Callable:
    """`@constraint(computing_units=N, processors=[{"processorType": "GPU", "computingUnits": 1}])`."""
    unknown = sorted(set(options) - CONSTRAINT_KEYS)
    if unknown:
        raise UserError(
            f"@constraint: unknown option(s) {', '.join(unknown)}; supported: computing_units, processors, memory_size"
        )
    need: dict[str, float] = {}
    try:
        if "computing_units" in options:
            need["cores"] = int(options["computing_units"])
        for proc in options.get("processors", []) or []:
            kind = str(proc.get("processorType", proc.get("ProcessorType", "CPU"))).upper()
            units = int(proc.get("computingUnits", proc.get("ComputingUnits", 1)))
            if kind == "GPU":
                need["gpus"] = need.get("gpus", 0) + units
            else:
                need["cores"] = max(need.get("cores", 1), units)
        if "memory_size" in options:
            need["memory_gb"] = float(options["memory_size"])
    except (TypeError, ValueError, AttributeError) as exc:
        raise UserError(f"@constraint: {exc}; give numbers, e.g. computing_units=2") from None

    def decorate(function: Any) -> Any:
        if isinstance(function, TaskFunction):
            function.constraints.update(need)
        else:
            existing = dict(getattr(function, "__course_constraints__", {}))
            existing.update(need)
            function.__course_constraints__ = existing
        return function

    return decorate


def on_failure(management: str, **defaults: Any) -> Callable:
    """`@on_failure(management="IGNORE", returns=0, x=...)` above `@task`: the policy and, for IGNORE, the outputs."""

    def decorate(function: Any) -> Any:
        if not isinstance(function, TaskFunction):
            raise UserError(f"@on_failure on {getattr(function, '__name__', function)!r}: put it above @task")
        set_on_failure(function, management, defaults)
        return function

    return decorate


class COMPSsException(Exception):
    """Raised by a task to stop its TaskGroup: the group's other tasks are cancelled and the group's barrier
    raises it in the program (PyCOMPSs's `pycompss.api.exceptions.COMPSsException`)."""


class TaskGroup:
    """`with TaskGroup("name"):` the tasks submitted inside form a group; at the end of the block the program
    waits for them (implicit_barrier=True), or later with compss_barrier_group("name")."""

    def __init__(self, group_name: str, implicit_barrier: bool = True):
        self.group_name, self.implicit_barrier = group_name, implicit_barrier

    def __enter__(self) -> "TaskGroup":
        rt = runtime.current()
        rt.groups[self.group_name] = []
        rt.open_groups.append(self.group_name)
        return self

    def __exit__(self, *exc: Any) -> None:
        rt = runtime.current()
        rt.open_groups.remove(self.group_name)
        if self.implicit_barrier and exc[0] is None:
            rt.barrier_group(self.group_name)
