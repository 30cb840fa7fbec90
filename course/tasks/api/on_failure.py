"""`from course.tasks.api.on_failure import on_failure` (as `pycompss.api.on_failure`)."""

from course.tasks.decorators import on_failure

__all__ = ["on_failure"]
