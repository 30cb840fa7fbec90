"""Conceptual questions: right answers are recognised from a digest, wrong ones fail with which question."""

import subprocess
import sys

import pytest

from course.checks import quiz

KEY = {1: quiz.digest(1, "b"), 2: quiz.digest(2, {"A", "B", "D"})}


def test_right_answers_pass_and_explain(capsys):
    quiz.check({1: " B ", 2: {"D", "A", "B"}}, KEY, explanations={1: "because init sets up communication"})
    out = capsys.readouterr().out
    assert "1: right. because init sets up communication" in out and "2: right." in out


def test_a_wrong_answer_names_its_question_without_the_key(capsys):
    with pytest.raises(AssertionError, match=r"question\(s\) \[2\]") as err:
        quiz.check({1: "b", 2: {"A", "B", "E"}}, KEY)
    assert "not yet" in capsys.readouterr().out
    assert KEY[2] not in str(err.value)


def test_missing_question_and_wrong_type_are_named():
    with pytest.raises(AssertionError, match=r"missing \[2\]"):
        quiz.check({1: "b"}, KEY)
    with pytest.raises(AssertionError, match="dict"):
        quiz.check(["b"], KEY)


def test_digest_depends_on_the_question():
    assert quiz.digest(1, "a") != quiz.digest(2, "a")


def test_command_line_prints_the_key_entry():
    out = subprocess.run(
        [sys.executable, "-m", "course.checks.quiz", "2", "A,B,D"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == KEY[2]
