"""The grading commands of `python -m course`: release, validate, grade, nbgrader-setup and student-copy; modules are
imported lazily. (mutation-report, which sits above grading, is course/mutation/cli.py's.)"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from course import UserError


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
    from course.grading.grade import check_options, grade

    if args.timeout is not None:
        check_timeout(args.timeout)
    from course import from_args

    progress = sys.stderr.isatty()
    if args.collect is not None:  # the end of a --slurm --no-wait grading: nothing else may be given
        if args.submissions or args.out or args.slurm:
            raise UserError("--collect DIR takes only the output folder: `course grade --collect DIR`")
        from course.grading import on_slurm

        print(on_slurm.collect(Path(args.collect), progress))
        return 0
    if not args.submissions or not args.out:
        raise UserError("give the class folder and where the grades go: `course grade SUBMISSIONS --out DIR`")
    slurm_only = [f"--{n.replace('_', '-')}" for n in ("tasks", "partition", "no_wait") if getattr(args, n)]
    if args.time is not None:
        slurm_only.append("--time")
    if slurm_only and not args.slurm:
        raise UserError(f"{', '.join(slurm_only)} set(s) how grading runs on Slurm: add --slurm, or leave it out")
    if args.slurm:
        if args.workers is not None:
            raise UserError("--workers is for grading on this machine; on Slurm each array task uses its node's CPUs")
        from course.grading import on_slurm

        options = from_args(args, "solutions timeout memory regrade tasks partition")
        print(
            on_slurm.submit(
                args.submissions,
                args.out,
                time_limit=args.time or "01:00:00",
                wait=not args.no_wait,
                progress=progress,
                **options,
            )
        )
        return 0
    options = check_options(args.submissions, args.out, **from_args(args, "solutions timeout workers memory"))
    print(grade(options, regrade=args.regrade, progress=progress))
    return 0


def cmd_student_copy(args: argparse.Namespace) -> int:
    from course.grading.student_copy import build

    written = build(args.out, args.solutions, hub=args.hub)
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
    """Add release, validate, grade, nbgrader-setup and student-copy to the course's command line."""
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
    grade.add_argument("submissions", nargs="?", help="the class folder: one folder per student with their notebooks")
    grade.add_argument("--out", metavar="DIR", help="where grades.csv and feedback/ go")
    grade.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    grade.add_argument("--timeout", type=float, default=None, metavar="S", help="seconds per cell (default 300)")
    grade.add_argument("--workers", type=int, default=None, metavar="N", help="parallel graders (default: the cores)")
    grade.add_argument("--memory", default=None, metavar="SIZE", help="memory limit per kernel (default 4G)")
    grade.add_argument("--regrade", action="store_true", help="grade everything again, not only what changed")
    grade.add_argument("--slurm", action="store_true", help="grade as one Slurm job array (--out on a shared disk)")
    grade.add_argument("--tasks", type=int, default=None, metavar="N", help="Slurm: array tasks (default: the nodes)")
    grade.add_argument("--time", default=None, metavar="T", help="Slurm: time limit per task (default 01:00:00)")
    grade.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    grade.add_argument("--no-wait", action="store_true", help="Slurm: return once submitted (then --collect DIR)")
    grade.add_argument("--collect", default=None, metavar="DIR", help="finish a --slurm --no-wait grading into DIR")
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
    copy.add_argument(
        "--hub", action="store_true", help="for a hub with nbgrader: each notebook says the fetched copy is graded"
    )
    copy.set_defaults(func=cmd_student_copy)
