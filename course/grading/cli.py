"""The grading commands of `python -m course`: release, validate, grade, nbgrader-setup, student-copy (modules imported lazily)."""

from __future__ import annotations

import argparse
import sys


def cmd_release(args: argparse.Namespace) -> int:
    from course.grading.release import release

    changes = release(args.solutions, args.notebooks, check=args.check)
    if args.check:
        print("notebooks/ is up to date with solutions/")
    elif changes:
        print(f"released: {', '.join(changes)}")
    else:
        print("notebooks/ was already up to date")
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from course.grading.validate import validate

    ok, lines = validate(args.notebook, timeout=args.timeout, memory=args.memory)
    print("\n".join(lines))
    return 0 if ok else 1


def cmd_grade(args: argparse.Namespace) -> int:
    from course.grading.execute import check_timeout
    from course.grading.grade import grade

    if args.timeout is not None:
        check_timeout(args.timeout)
    from course import from_args

    options = from_args(args, "solutions timeout workers memory regrade")
    print(grade(args.submissions, args.out, progress=sys.stderr.isatty(), **options))
    return 0


def cmd_student_copy(args: argparse.Namespace) -> int:
    from course.student import build

    written = build(args.out, args.solutions)
    print(
        f"wrote the student copy to {args.out}: {', '.join(written)} (no solutions/, hidden tests or instructor guide)"
    )
    return 0


def cmd_nbgrader_setup(args: argparse.Namespace) -> int:
    from pathlib import Path

    from course.grading import solutions_dir
    from course.grading.nbgrader_course import ENV_ROOT, assignments, course_root, setup

    solutions = solutions_dir(args.solutions).resolve()
    root = course_root(solutions.parent)
    for note in setup(root, solutions):
        print(note)
    names = list(assignments(solutions))
    print(f"nbgrader course directory: {root} (choose another with {ENV_ROOT}=DIR)")
    print(f"assignments: {', '.join(names[:-1])}, and {names[-1]} (the whole course)")
    print(f'next: export PATH="{Path(sys.executable).parent}:$PATH"; nbgrader generate_assignment {names[0]}')
    return 0


def add_grading(commands) -> None:
    """Add release, validate and grade to the course's command line."""
    release = commands.add_parser("release", help="generate the student notebooks/ from solutions/ (nbgrader)")
    release.add_argument(
        "--check", action="store_true", help="only check that notebooks/ is up to date (exit 1 if not)"
    )
    release.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    release.add_argument(
        "--notebooks", default=None, metavar="DIR", help="where student notebooks go (default notebooks/)"
    )
    release.set_defaults(func=cmd_release)

    validate = commands.add_parser("validate", help="run your notebook and see which checks pass and why")
    validate.add_argument("notebook", help="the notebook to check, e.g. notebooks/02_sgd.ipynb")
    validate.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per cell (default 300)")
    validate.add_argument("--memory", default=None, metavar="SIZE", help="memory limit for the kernel (default 4G)")
    validate.set_defaults(func=cmd_validate)

    grade = commands.add_parser("grade", help="autograde SUBMISSIONS/<student>/<notebook>.ipynb into --out DIR")
    grade.add_argument("submissions", help="the class folder: one folder per student with their notebooks")
    grade.add_argument("--out", required=True, metavar="DIR", help="where grades.csv and feedback/ go")
    grade.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    grade.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per cell (default 300)")
    grade.add_argument("--workers", type=int, default=None, metavar="N", help="parallel graders (default: the cores)")
    grade.add_argument("--memory", default=None, metavar="SIZE", help="memory limit per kernel (default 4G)")
    grade.add_argument("--regrade", action="store_true", help="grade everything again, not only what changed")
    grade.set_defaults(func=cmd_grade)

    setup = commands.add_parser(
        "nbgrader-setup", help="prepare nbgrader's course directory: one assignment per notebook"
    )
    setup.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    setup.set_defaults(func=cmd_nbgrader_setup)

    copy = commands.add_parser(
        "student-copy", help="write the course as learners get it (no solutions or hidden tests)"
    )
    copy.add_argument("out", metavar="OUT", help="a new or empty folder, or an earlier student copy to refresh")
    copy.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    copy.set_defaults(func=cmd_student_copy)
