"""nbgrader's own configuration for this course, for instructors who use `nbgrader ...` and JupyterLab's Formgrader tab.

Assignments: one per notebook, named after it with dashes (00-environment-and-cluster, 01-task-graphs, 02-sgd,
..., 11-job-scripts, 11-running-on-a-cluster), and `ddl-hpc`, the whole course as one, for workshops that grade it at once. The course
id is `ddl-hpc`. Loading this file only reads settings (course/grading/nbgrader_course.py); nothing is written.

nbgrader's course directory is $COURSE_NBGRADER_ROOT (a folder you choose: the checkout may be read only), else
build/nbgrader here; the exchange is nbgrader's default (/srv/nbgrader/exchange) or $COURSE_NBGRADER_EXCHANGE.
From the checkout (docs/guide/04-release-collect-grade.md, "The nbgrader route", has the whole walk):

    export PATH="$PWD/.venv/bin:$PATH"              # nbgrader and the notebooks need the environment's tools
    python -m course nbgrader-setup                  # source/<assignment>/ -> solutions/, and the gradebook
    nbgrader generate_assignment 02-sgd && nbgrader release_assignment 02-sgd
    nbgrader collect 02-sgd && nbgrader autograde 02-sgd && nbgrader generate_feedback 02-sgd && nbgrader release_feedback 02-sgd

`python -m course grade` autogrades without this layout (and in parallel, with limits).
"""

from pathlib import Path

from course.grading.nbgrader_course import configure

configure(get_config(), Path(__file__).resolve().parent)  # noqa: F821  (get_config: provided by nbgrader)
