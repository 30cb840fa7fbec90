"""`pycompss.api.opencl`: @opencl is not supported here (see _refused.py)."""

from course.tasks.api._refused import refuse

refuse("opencl")
