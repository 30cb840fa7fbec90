"""course.checks.activation_checkpoint, tried directly on every answer the fixtures hold for its exercises (tests/check_cases.py)."""

from __future__ import annotations

import pytest

from course.checks import activation_checkpoint
from tests.check_cases import cases, define, judge

NOTEBOOK = "13_pytorch_sharding"
COVERED: set[str] = {"ex-checkpoint-answer"} | set()  # the answer cells whose fixture answers this module tries


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-checkpoint-answer"}), ids=str)
def test_checkpoint(case):
    names = define(case, {})  # TODO: what the notebook defines before the exercise
    judge(case, lambda: activation_checkpoint.checkpoint(names["forward"]))
