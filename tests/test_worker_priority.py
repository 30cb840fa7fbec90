"""In `make test`'s pytest-xdist workers the machine's tests (Slurm, the virtual cluster, the hub: one chain, in one
worker) run first in the CPU's queue, and the tests beside them at a lower priority, as does everything those start
(tests/conftest.py). Only there: in one process nothing runs beside a test."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import MACHINE, OTHERS_NICENESS

NICENESS = [sys.executable, "-c", "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"]


@pytest.fixture
def worker(request):
    if not hasattr(request.config, "workerinput"):
        pytest.skip("a run in one process (no pytest-xdist workers): no test runs beside another")


def started() -> int:
    """The niceness of a process this test starts."""
    return int(subprocess.run(NICENESS, capture_output=True, text=True, check=True).stdout)


@pytest.mark.xdist_group(MACHINE)
def test_the_machines_tests_and_what_they_start_run_at_the_usual_priority(worker):
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0 and started() == 0


def test_the_tests_beside_them_and_what_those_start_run_nicer(worker):
    assert os.getpriority(os.PRIO_PROCESS, 0) == OTHERS_NICENESS and started() == OTHERS_NICENESS
