"""`from course.tasks.api.constraint import constraint` (as `pycompss.api.constraint`)."""

from course.tasks.runtime import constraint

__all__ = ["constraint"]
