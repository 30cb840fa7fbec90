"""`pycompss.api.mpmd_mpi`: @mpmd_mpi is not supported here (see _refused.py)."""

from course.tasks.api._refused import refuse

refuse("mpmd_mpi")
