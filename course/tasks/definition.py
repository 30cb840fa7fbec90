"""What @task declares about a function, read and checked once when the program is read: the task's definition.

The runtime (runtime.py, graph.py, placement.py) works from this; decorators.py makes it callable, so that calling
the function submits a task.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from course import UserError
from course.tasks import parameter as P

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


class TaskDefinition:
    """What @task says of a function: its parameters' directions, returns, constraints and failure policy.

    Checked here, when the program is read, so that a wrong option is one line at the decorator, not a failure
    on an engine. `decorators.TaskFunction` adds the call that submits it."""

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

    def __repr__(self) -> str:
        return f"<task {self.name}{self.signature}>"


def _depth(name: str, key: str, depth: Any) -> int:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise UserError(f"@task on {name}: parameter {key!r} has Depth {depth!r}; give a whole number from 1")
    return depth


def set_on_failure(tf: TaskDefinition, management: Any, defaults: dict | None = None) -> None:
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
