"""`python -m course student-copy OUT` (or `make student`): the course as a learner should get it.

    python -m course student-copy build/student     # then publish build/student (a `student` branch)

The instructor's checkout holds every solution and hidden test (solutions/), the wrong answers the tests
use, and the instructor guide. OUT gets only what a learner needs to run the course: the package
(course/, with its offline data fallback, without the course's own answers), the student notebooks generated afresh from solutions/ by
nbgrader's preprocessors, the set-up (Makefile, scripts/setup-*.sh, pyproject.toml, environment.yml,
binder/), the benchmarks the notebooks mention, and a README for learners. Binder launches it and
JupyterHub pulls it (nbgitpuller); see the instructor guide.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from course import UserError
from course.grading import ROOT

MARKER = ".course-student-copy"  # a folder holding this file may be refreshed in place (CI's checkout)
FOLDERS = ("course", "binder", "benchmarks")
FILES = (
    "environment.yml",
    "pyproject.toml",
    "Makefile",
    ".gitignore",
    "scripts/setup-system.sh",
    "scripts/setup-python.sh",
    "scripts/python-choice.sh",  # which Python .venv is made from: setup-python.sh sources it
)
# The course's own answers (course.answers.ALL, and the benchmark that times the ring) and the mutation report (which
# holds how the checks are measured) stay with the instructor
INSTRUCTOR_ONLY = ("course/answers.py", "course/mutation", "benchmarks/collectives.py")
IGNORE = ("__pycache__", "*.pyc", ".ipynb_checkpoints", "*.egg-info")

README = """# Distributed Deep Learning on HPC

An interactive Jupyter course on training neural networks on many processes and GPUs: task graphs,
SGD and parallel SGD, collectives, parameter averaging, Horovod, TensorFlow's MirroredStrategy,
scaling studies and Slurm. Open the notebooks in `notebooks/`, in order, starting with
`00_environment_and_cluster.ipynb`. Every exercise checks itself when you run the cell after it.

## Run it

- **Binder** (nothing to install, CPU only):
  [Launch on Binder](https://mybinder.org/v2/gh/OWNER/REPOSITORY/student?urlpath=lab/tree/notebooks/00_environment_and_cluster.ipynb)
- **JupyterHub or Open OnDemand**: your instructor's link puts this folder in your home directory;
  open the notebooks with the kernel **Python (DDL on HPC)**.
- **Your own machine** (Debian/Ubuntu, Python 3.11; with only Python 3.12+, set-up asks uv for a 3.11, or says
  in one line how to get one): `make lab` sets everything up in `.venv` (about 10 minutes the first time) and
  starts JupyterLab. Conda users: the steps are at the top of
  `environment.yml`.

## Check your work

`python -m course validate notebooks/02_sgd.ipynb` runs a notebook and says, check by check, what
passes and why the others fail. When you hand a notebook in, your instructor grades it with further
tests that are not in your copy: passing the visible checks is necessary, not sufficient.

## Data

The notebooks load MNIST, Fashion-MNIST and CIFAR-10 from `COURSE_DATA_DIR` (your site may preload
them), the Keras cache, or a download. Without any of these they fall back, and say so, to
scikit-learn's small digits dataset, so every notebook runs offline.
"""

# A hub's learners also fetch each notebook released as an assignment (nbgrader's Assignment List): the copy they
# fetch is the one submitted, so the student copy a hub gives them (`--hub`) says so at the top of each notebook.
PRACTICE_NOTE = (
    "**Practice copy.** If your instructor releases this notebook as an assignment, fetch it in "
    "**Nbgrader > Assignment List** and work in the copy that opens from there (in a folder named after the "
    "assignment, such as `~/02-sgd/`): only that copy is submitted and graded. This one stays yours to try things out."
)


def build(out: Path, solutions: Path | None = None, hub: bool = False) -> list[str]:
    """Write the student copy into OUT (new, empty, or an earlier student copy); returns what it wrote. HUB: each
    notebook opens with the practice-copy note."""
    from course.grading.release import release

    out = Path(out).resolve()
    solutions = Path(solutions).resolve() if solutions is not None else ROOT / "solutions"
    _prepare(out)
    for folder in FOLDERS:
        left_out = [Path(p).name for p in INSTRUCTOR_ONLY if Path(p).parent.name == folder]
        shutil.copytree(ROOT / folder, out / folder, ignore=shutil.ignore_patterns(*IGNORE, *left_out))
    for name in FILES:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, out / name)
    release(solutions, out / "notebooks")
    if hub:
        _note_practice_copies(out / "notebooks")
    (out / "README.md").write_text(README, encoding="utf-8")
    (out / MARKER).write_text("written by python -m course student-copy; refreshed in place by the next run\n")
    return sorted(p.name for p in out.iterdir() if p.name != ".git")


def _note_practice_copies(notebooks: Path) -> None:
    """Put PRACTICE_NOTE first in every notebook of NOTEBOOKS."""
    import nbformat

    for path in sorted(notebooks.glob("*.ipynb")):
        nb = nbformat.read(str(path), as_version=4)
        # a fixed cell id: the copy is byte for byte the same on every build (setup-hub.sh reinstalls on a change)
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(PRACTICE_NOTE, id="practice-copy-note"))
        nbformat.write(nb, str(path))


def _prepare(out: Path) -> None:
    """OUT must be new, empty or an earlier student copy (refreshed: everything but .git is replaced)."""
    if out == ROOT or out in ROOT.parents:
        raise UserError(f"{out} is the course checkout (or holds it); give a new folder, e.g. build/student")
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; give a folder for the student copy")
    if out.is_dir():
        entries = [p for p in out.iterdir() if p.name != ".git"]
        if entries and not (out / MARKER).is_file():
            raise UserError(
                f"{out} is not empty and is not an earlier student copy; "
                f"give a new or empty folder (nothing in it was changed)"
            )
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    out.mkdir(parents=True, exist_ok=True)
