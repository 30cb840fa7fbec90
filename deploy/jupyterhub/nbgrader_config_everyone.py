"""nbgrader for every user of the hub (scripts/setup-hub.sh copies it to the shared environment's etc/jupyter/):
the course id and the exchange, all a learner's Assignments tab needs. The spawner sets COURSE_NBGRADER_EXCHANGE.
A submission too large for the exchange is refused in one line (course/grading/exchange.py)."""

import os

c = get_config()  # noqa: F821  (provided by nbgrader)
c.CourseDirectory.course_id = "ddl-hpc"
c.Exchange.root = os.environ.get("COURSE_NBGRADER_EXCHANGE") or "/srv/nbgrader/exchange"
c.ExchangeFactory.submit = "course.grading.exchange.Submit"
