"""`from course.tasks.api.exceptions import COMPSsException` (as `pycompss.api.exceptions`)."""

from course.tasks.decorators import COMPSsException

__all__ = ["COMPSsException"]
