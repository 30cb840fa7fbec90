"""nbgrader for instructors on the hub (scripts/setup-hub.sh copies it to the instructors' config folder, which
the spawner puts on their JUPYTER_CONFIG_PATH): the course's settings, with the course directory at
$COURSE_NBGRADER_ROOT (the spawner sets it to a folder in the instructor's home), so Formgrader, collect,
autograde and export never write into the checkout."""

from pathlib import Path

from course.grading.nbgrader_course import configure

configure(get_config(), Path.home())  # noqa: F821  (provided by nbgrader)
