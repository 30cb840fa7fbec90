"""`pycompss.api.data_transformation`: @data_transformation is not supported here (see _refused.py)."""

from course.tasks.api._refused import refuse

refuse("data_transformation")
