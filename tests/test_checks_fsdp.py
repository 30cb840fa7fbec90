"""course.checks.fsdp, tried directly on every answer the fixtures hold for its exercises (tests/check_cases.py)."""

from __future__ import annotations

import pytest

from course.checks import fsdp
from tests.check_cases import cases, define, judge

NOTEBOOK = "13_pytorch_sharding"
COVERED: set[str] = {"ex-fsdp-answer"} | set()  # the answer cells whose fixture answers this module tries


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-fsdp-answer"}), ids=str)
def test_fsdp(case):
    names = define(case, {})  # TODO: what the notebook defines before the exercise
    judge(case, lambda: fsdp.fsdp(names["shard"]))
