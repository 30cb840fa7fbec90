"""The PyCOMPSs-facing calls of the task runtime: @task, @constraint, @on_failure, TaskGroup and COMPSsException.

What a program (or notebook) writes, as PyCOMPSs's `pycompss.api` has it; calling a decorated function hands the call
to the runtime (runtime.py), which builds the graph and places the task.
"""

from __future__ import annotations

import inspect
import types
from typing import Any, Callable

from course import UserError
from course.tasks import parameter as P
from course.tasks import runtime

TASK_OPTIONS = {
    "returns",
    "priority",
    "is_replicated",
    "is_distributed",
    "computing_nodes",
    "on_failure",
    "time_out",
    "cache_returns",
    "target_direction",
    "varargs_type",
    "numba",
    "is_reduce",
    "chunk_size",
    "processes",
    "processes_per_node",
}
ON_FAILURE = ("RETRY", "CANCEL_SUCCESSORS", "FAIL", "IGNORE")  # PyCOMPSs's policies; RETRY is its default


class TaskFunction:
    """A function decorated with @task: calling it submits a task and returns Future(s)."""

    def __init__(self, function: Callable, options: dict):
        self.function = function
        self.name = function.__name__
        self.signature = inspect.signature(function)
        self.payload: bytes | None = None
        self.digest: str | None = None
        self.constraints = dict(getattr(function, "__course_constraints__", {}))
        params = self.signature.parameters
        self.directions: dict[str, P.ParameterDirection] = {}
        returns = options.pop("returns", None)
        self.on_failure, self.defaults = "RETRY", {}
        set_on_failure(self, options.pop("on_failure", "RETRY"))
        self.depths: dict[str, int] = {}  # collections: how many levels of nested lists are taken apart
        target = options.pop("target_direction", P.INOUT)
        self.is_method = next(iter(params), None) == "self"
        if self.is_method:  # a method: the object is INOUT (PyCOMPSs), IN with target_direction=IN
            target = P.DIRECTIONS.get(target, target) if isinstance(target, str) else target
            if target not in (P.IN, P.INOUT):
                raise UserError(f"@task on {self.name}: target_direction={target!r}; use IN or INOUT")
            self.directions["self"] = target
        for key, value in options.items():
            if key in TASK_OPTIONS:
                continue
            if key not in params:
                raise UserError(
                    f"@task on {self.name}: {key!r} is not a parameter of {self.name}{self.signature}; "
                    "give directions only for the function's own parameters"
                )
            if isinstance(value, dict):
                if P.Depth in value:
                    self.depths[key] = _depth(self.name, key, value[P.Depth])
                stream = value.get(P.StdIOStream)
                value = value.get(P.Type, value.get(P.Direction, P.FILE_IN if stream else None))
                if stream in (P.STDIN, P.STDOUT, P.STDERR) and isinstance(value, P.ParameterDirection):
                    value = P.DIRECTIONS.get(f"{value.name}_{stream}", value)
            if not isinstance(value, P.ParameterDirection):
                raise UserError(
                    f"@task on {self.name}: parameter {key!r} has direction {value!r}, which is not one "
                    f"of {', '.join(P.DIRECTIONS)}"
                )
            self.directions[key] = value
        self.nreturns, self.returns_sequence = _count_returns(self.name, returns)
        self.__doc__, self.__name__, self.__wrapped__ = function.__doc__, function.__name__, function
        self.__module__ = function.__module__
        self.__qualname__ = getattr(function, "__qualname__", self.name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if runtime.on_engine():
            return self.function(*args, **kwargs)
        return runtime.current().submit(self, args, kwargs)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        """A task on a method: `obj.method(...)` submits with `self=obj` (INOUT unless target_direction=IN)."""
        return self if instance is None else types.MethodType(self, instance)

    def __repr__(self) -> str:
        return f"<task {self.name}{self.signature}>"


def _depth(name: str, key: str, depth: Any) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UserError(f"@task on {name}: parameter {key!r} has Depth {depth!r}; give a whole number from 1")
    return depth


def set_on_failure(tf: "TaskFunction", management: Any, defaults: dict | None = None) -> None:
    """What a failure of the task does: PyCOMPSs's on_failure policies (RETRY, the default, then FAIL)."""
    if management not in ON_FAILURE:
        raise UserError(f"@task on {tf.name}: on_failure={management!r}; use one of {', '.join(ON_FAILURE)}")
    unknown = sorted(set(defaults or {}) - set(tf.signature.parameters) - {"returns"})
    if unknown:
        raise UserError(
            f"@on_failure on {tf.name}: {', '.join(unknown)} is not a parameter of {tf.name}; "
            "give defaults for returns= or for the task's own parameters"
        )
    tf.on_failure = management
    tf.defaults = dict(defaults or {})


def _count_returns(name: str, returns: Any) -> tuple[int, bool]:
    if returns is None:
        return 1, False  # as in the seeds: a task that returns a value without saying `returns=`
    if isinstance(returns, bool):
        raise UserError(f"@task on {name}: returns={returns!r}; give a number or a type")
    if isinstance(returns, int):
        if returns < 0:
            raise UserError(f"@task on {name}: returns={returns} must be 0 or more")
        return returns, returns > 1
    if isinstance(returns, str) and returns.isdigit():
        return _count_returns(name, int(returns))
    if isinstance(returns, (list, tuple)):
        return len(returns), True
    if isinstance(returns, type):
        return 1, False
    raise UserError(f"@task on {name}: returns={returns!r} is not a number, a type or a list of types")


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
