"""`from course.tasks.api.parameter import *` (as `pycompss.api.parameter`)."""

from course.tasks.parameter import *  # noqa: F403
from course.tasks.parameter import __all__  # noqa: F401
