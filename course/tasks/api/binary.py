"""`from course.tasks.api.binary import binary` (as `pycompss.api.binary`)."""

from course.tasks.external import binary

__all__ = ["binary"]
