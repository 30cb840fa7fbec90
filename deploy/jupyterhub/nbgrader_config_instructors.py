"""nbgrader for instructors on the hub (scripts/setup-hub.sh copies it to the instructors' config folder, which
the spawner puts on their JUPYTER_CONFIG_PATH): the course's settings, with the course directory at
$COURSE_NBGRADER_ROOT (the spawner sets it to a folder in the instructor's home), so Formgrader, collect,
autograde and export never write into the checkout. Every assignment released here opens with
assignment_header.ipynb (copied beside this file): learners also have a practice copy of each notebook, and the header
says the fetched one is the copy to work in and submit."""

from pathlib import Path

from course.grading.nbgrader_course import configure

c = get_config()  # noqa: F821  (provided by nbgrader)
configure(c, Path.home())
c.IncludeHeaderFooter.header = str(Path(__file__).with_name("assignment_header.ipynb"))
