"""nbgrader's own configuration for this course, for instructors who use `nbgrader ...` and formgrader.

nbgrader expects <root>/<step>/<student>/<assignment>/<notebook>.ipynb; this course keeps its instructor
notebooks flat in solutions/. The mapping (the whole course is one nbgrader assignment, "ddl-hpc"):

    solutions/*.ipynb                 ==  build/nbgrader/source/ddl-hpc/*.ipynb  (a symlink made below)
    notebooks/*.ipynb                 ==  build/nbgrader/release/ddl-hpc/*.ipynb (same cells; see
                                          `python -m course release`, which runs the same preprocessors)
    SUBMISSIONS/<student>/*.ipynb     ->  build/nbgrader/submitted/<student>/ddl-hpc/*.ipynb

So, from the checkout:  nbgrader generate_assignment ddl-hpc;  copy submissions into submitted/;
nbgrader autograde ddl-hpc;  nbgrader formgrader (or `jupyter lab` and the Formgrader tab);
nbgrader generate_feedback ddl-hpc;  nbgrader export.  `nbgrader validate solutions/NN_x.ipynb` works as is.
`python -m course grade` does the autograding without this layout (and in parallel, with limits).
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from course.grading import ASSIGNMENT, CELL_TIMEOUT  # noqa: E402  (one source for the course's settings)

ROOT = HERE / "build" / "nbgrader"
source = ROOT / "source" / ASSIGNMENT
if not source.exists():
    source.parent.mkdir(parents=True, exist_ok=True)
    source.symlink_to(HERE / "solutions", target_is_directory=True)

c = get_config()  # noqa: F821  (provided by nbgrader when it loads this file)
c.CourseDirectory.course_id = ASSIGNMENT
c.CourseDirectory.root = str(ROOT)
c.CourseDirectory.db_url = f"sqlite:///{ROOT / 'gradebook.db'}"
# nbgrader's default of 30 s per cell is too short for the training cells; the course's own grader uses the same.
c.Execute.timeout = CELL_TIMEOUT
c.Execute.interrupt_on_timeout = True
# Every notebook nbgrader runs gets a cluster id of its own, and its engines end with its kernel (even after an
# error, a time limit or a crash), so no submission attaches to another's engines (course/grading/isolation.py).
c.Execute.kernel_manager_class = "course.grading.isolation.IsolatedKernelManager"
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}
