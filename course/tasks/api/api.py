"""`from course.tasks.api.api import compss_wait_on, compss_barrier, TaskGroup, ...` (as `pycompss.api.api`)."""

from course.tasks.decorators import TaskGroup
from course.tasks.sync import (
    compss_barrier,
    compss_barrier_group,
    compss_cancel_group,
    compss_delete_file,
    compss_delete_object,
    compss_file_exists,
    compss_get_number_of_resources,
    compss_open,
    compss_start,
    compss_stop,
    compss_wait_on,
    compss_wait_on_directory,
    compss_wait_on_file,
)

__all__ = [
    "TaskGroup",
    "compss_barrier",
    "compss_barrier_group",
    "compss_cancel_group",
    "compss_delete_file",
    "compss_delete_object",
    "compss_file_exists",
    "compss_get_number_of_resources",
    "compss_open",
    "compss_start",
    "compss_stop",
    "compss_wait_on",
    "compss_wait_on_directory",
    "compss_wait_on_file",
]
