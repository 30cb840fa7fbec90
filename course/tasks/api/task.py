"""`from course.tasks.api.task import task` (as `pycompss.api.task`)."""

from course.tasks.runtime import task

__all__ = ["task"]
