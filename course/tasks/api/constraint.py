"""`from course.tasks.api.constraint import constraint` (as `pycompss.api.constraint`)."""

from course.tasks.decorators import constraint

__all__ = ["constraint"]
