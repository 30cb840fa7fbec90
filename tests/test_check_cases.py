"""tests/check_cases.py itself: what `define` leaves behind lets the rest of the run start processes."""

from __future__ import annotations

import multiprocessing
import os

from tests.check_cases import Case, define


def test_define_runs_cells_and_spawn_still_starts_processes():
    names = define(Case("a case", {"ex-answer": "def twice(x):\n    return 2 * x\n"}, right=True), {"k": 3})
    assert names["twice"](names["k"]) == 6
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # reads sys.modules["__main__"].__spec__
        assert pool.apply(os.getpid) != os.getpid()
