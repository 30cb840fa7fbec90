"""course.checks.sgd, notebook 02's momentum check, tried directly on every answer the fixtures hold for it
(tests/check_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest

from course import nn
from course.checks import sgd
from tests.check_cases import cases, define, judge

NOTEBOOK = "02_sgd"
COVERED: set[str] = {"ex-momentum-answer"}  # the answer cells whose fixture answers this module tries


@pytest.mark.parametrize("case", cases(NOTEBOOK, {"ex-momentum-answer"}), ids=str)
def test_momentum(case):
    names = define(case, {"np": np, "nn": nn})
    judge(case, lambda: sgd.momentum(names["momentum_step"]))
