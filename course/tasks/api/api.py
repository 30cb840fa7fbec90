"""`from course.tasks.api.api import compss_wait_on, compss_barrier, ...` (as `pycompss.api.api`)."""

from course.tasks.sync import (compss_barrier, compss_delete_file, compss_delete_object, compss_file_exists,
                               compss_open, compss_start, compss_stop, compss_wait_on, compss_wait_on_file)

__all__ = ["compss_barrier", "compss_delete_file", "compss_delete_object", "compss_file_exists", "compss_open",
           "compss_start", "compss_stop", "compss_wait_on", "compss_wait_on_file"]
