"""`from course.tasks.api.implement import implement` (as `pycompss.api.implement`).

PyCOMPSs picks one of several implementations of a task per resource; here every engine is alike, so
the task's own body always runs and the alternative is kept only as its name says.
"""

from typing import Any, Callable


def implement(source_class: str = "", method: str = "", **_ignored: Any) -> Callable:
    """Mark an alternative implementation of `source_class.method`; it is not scheduled here (engines are alike)."""

    def decorate(function: Any) -> Any:
        function.__course_implements__ = f"{source_class}.{method}"
        return function

    return decorate


__all__ = ["implement"]
