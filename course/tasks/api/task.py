"""`from course.tasks.api.task import task` (as `pycompss.api.task`)."""

from course.tasks.decorators import task

__all__ = ["task"]
