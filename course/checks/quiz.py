"""Immediate feedback on conceptual questions without printing the answer key in the notebook.

The key holds a salted SHA-256 digest of each right answer, so a learner is told at once which answers are
right (and why, once they are) while the answers themselves do not appear in the student notebook. Hidden
tests still grade. Make a key entry with ``python -m course.checks.quiz QUESTION_ID ANSWER``.

    >>> key = {"q1": digest("q1", "b")}
    >>> check({"q1": "B"}, key, explanations={"q1": "init sets up communication"})
    q1: right. init sets up communication
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Mapping

SALT = "ddl-hpc-quiz"


def canonical(answer: object) -> str:
    """One spelling per answer: letters case- and space-insensitive, sets and lists in sorted order."""
    if isinstance(answer, str):
        return answer.strip().lower()
    if isinstance(answer, Iterable):
        return ",".join(sorted(canonical(a) for a in answer))
    return repr(answer)


def digest(question: object, answer: object) -> str:
    """The key entry for `answer` to `question` (salted with the question, so equal answers differ)."""
    return hashlib.sha256(f"{SALT}:{question}:{canonical(answer)}".encode()).hexdigest()


def is_right(question: object, answer: object, key: Mapping) -> bool:
    """Whether `answer` matches the key's digest for `question`."""
    return digest(question, answer) == key[question]


def check(answers: Mapping, key: Mapping, explanations: Mapping | None = None) -> None:
    """Print right/not yet for each question (with its explanation once right); fail if any is missing or wrong."""
    if not isinstance(answers, Mapping):
        raise AssertionError(f"answers should be a dict of question -> answer, got {type(answers).__name__}")
    missing = [q for q in key if q not in answers]
    extra = [q for q in answers if q not in key]
    if missing or extra:
        words = [f"missing {missing}" if missing else "", f"unknown questions {extra}" if extra else ""]
        raise AssertionError(
            "answers should have exactly the questions " + str(list(key)) + ": " + "; ".join(w for w in words if w)
        )
    wrong = []
    for question in key:
        if is_right(question, answers[question], key):
            why = (explanations or {}).get(question, "")
            print(f"{question}: right. {why}".rstrip())
        else:
            wrong.append(question)
            print(f"{question}: not yet - think again.")
    if wrong:
        raise AssertionError(f"{len(wrong)} of {len(key)} answers are not right yet: question(s) {wrong}")


def main(argv: list[str]) -> int:
    """Print the key entry for one question and answer (for instructors writing a notebook)."""
    if len(argv) != 2:
        print(
            "usage: python -m course.checks.quiz QUESTION_ID ANSWER   (a set: comma-separated, e.g. A,B,D)",
            file=sys.stderr,
        )
        return 2
    question, answer = argv
    print(digest(question, answer.split(",") if "," in answer else answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
