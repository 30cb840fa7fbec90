"""`python -m course mutation-report`: the instructor's command, added to the command line by course.cli where this
folder exists (the student copy leaves course/mutation/ out, and the command with it). The report is imported lazily."""

from __future__ import annotations

import argparse


def cmd_mutation_report(args: argparse.Namespace) -> int:
    from course import from_args
    from course.mutation import report

    return report.main(
        args.notebooks, **from_args(args, "exercise limit solutions semantic_only wrong_answers json_to")
    )


def add_mutation_report(commands) -> None:
    """Add mutation-report to the course's command line."""
    mutation = commands.add_parser(
        "mutation-report",
        help="instructors: how many mutants of each exercise's solution (single edits, and the plausible wrong answers) "
        "its visible check and hidden tests catch",
    )
    mutation.add_argument("notebooks", nargs="*", metavar="NOTEBOOK", help="e.g. 03 07_horovod (default: all)")
    mutation.add_argument("--exercise", default=None, metavar="GRADE_ID", help="only this answer cell, e.g. ex2-answer")
    mutation.add_argument("--limit", type=int, default=12, metavar="N", help="mutants per exercise (default 12)")
    mutation.add_argument("--solutions", default=None, metavar="DIR", help="instructor notebooks (default solutions/)")
    mutation.add_argument(
        "--semantic-only",
        action="store_true",
        help="only the semantic mutants (the plausible wrong answers listed per notebook), no single edits: faster",
    )
    mutation.add_argument(
        "--wrong-answers",
        default=None,
        metavar="DIR",
        help="the lists of wrong answers, <notebook>.json (default tests/fixtures/wrong_answers)",
    )
    mutation.add_argument(
        "--json",
        dest="json_to",
        default=None,
        metavar="FILE",
        help="also write the table as data, with the date, commit and machine "
        "(docs/guide/records/mutation-DATE.json is what the course's website shows)",
    )
    mutation.set_defaults(func=cmd_mutation_report)
