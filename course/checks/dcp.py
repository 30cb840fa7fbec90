"""TODO: what these checks hold of notebook 13's answers, and how they measure it.

dcp(save)    # ex-dcp: TODO what it checks
"""

from __future__ import annotations

from course.checks import check, expect


@check
def dcp(save) -> None:
    """Exercise `ex-dcp`: TODO what must be true of an answer (its statements in
    solutions/exercises/13_pytorch_sharding.yml), each point measured from outside the answer."""
    expect(False, "TODO: one expect() per statement, its message saying what is wrong")
