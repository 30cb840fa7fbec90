"""Drop-in for `pycompss.api`: change `pycompss.api.X` to `course.tasks.api.X` and the program runs on the engines."""
