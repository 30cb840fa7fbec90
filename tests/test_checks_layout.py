"""course.checks.layout, the layout chooser's check of notebook 14's part on expert parallelism, tried directly on
every answer the fixtures hold for it (tests/check_cases.py), in this process: visible and hidden cases."""

from __future__ import annotations

import pytest

from course.checks import layout
from tests.check_cases import cases, define, judge

NOTEBOOK = "14_expert_parallelism"
COVERED = {"ex-layout-answer"}


@pytest.mark.parametrize("case", cases(NOTEBOOK, COVERED), ids=str)
def test_layout(case):
    judge(case, lambda: layout.chosen(define(case, {})["layout"]))


@pytest.mark.parametrize("case", cases(NOTEBOOK, COVERED), ids=str)
def test_layout_hidden_cases(case):
    """The hidden cases catch every wrong answer too (each a case the notebook does not show)."""
    said = layout.chosen(define(case, {})["layout"], layout.HIDDEN_CASES)
    assert (said is None) == case.right, f"{case}: {said}"


def test_the_cases_cover_each_dimension_and_a_machine_too_small():
    """Among the visible cases and among the hidden ones: a layout with cp > 1, one with pp > 1, one with ep > 1,
    one with cp and pp both usable at the same size (the preference decides), and one where nothing fits."""
    for group in (layout.CASES, layout.HIDDEN_CASES):
        fitting = [[a for a in layout._allowed(c) if layout._fits(c, a)] for c in group]
        best = [min(f, key=layout._order) for f in fitting if f]
        assert any(b["cp"] > 1 for b in best) and any(b["pp"] > 1 for b in best) and any(b["ep"] > 1 for b in best)
        assert any(not f for f in fitting)
        assert any(
            any(
                layout._order(a)[0] == layout._order(b)[0] and a["pp"] > b["pp"] and a["cp"] < b["cp"]
                for a in f
                for b in [min(f, key=layout._order)]
            )
            for f in fitting
            if f
        ), "no case where cp and pp could each make the model fit at the same size"
