"""`from course.tasks.api.exceptions import COMPSsException` (as `pycompss.api.exceptions`)."""

from course.tasks.runtime import COMPSsException

__all__ = ["COMPSsException"]
