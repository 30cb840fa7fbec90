"""Drop-in for `pycompss.functions` (reduce, elapsed_time, data): `pycompss.` -> `course.tasks.` in the import."""
