"""Horovod really sums across ranks, launched both ways the course uses: horovodrun (Gloo) and mpiexec (MPI)."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from course import mpi
from tests.conftest import PROGRAMS

pytestmark = pytest.mark.slow
PROGRAM = str(PROGRAMS / "hvd_allreduce.py")


def sums(output: str) -> dict[int, tuple[int, list[float]]]:
    return {int(r): (int(s), json.loads(v)) for r, s, v in re.findall(r"RANK (\d+) SIZE (\d+) SUM (\[.*\])", output)}


def expect_two_ranks_summed(result):
    assert result.returncode == 0, result.stdout + result.stderr
    assert sums(result.stdout) == {0: (2, [3.0, 20.0]), 1: (2, [3.0, 20.0])}


def test_horovodrun_gloo_two_ranks():
    horovodrun = shutil.which("horovodrun", path=os.path.dirname(sys.executable))
    result = subprocess.run(
        [horovodrun, "-np", "2", "-H", "localhost:2", "--gloo", sys.executable, PROGRAM],
        capture_output=True,
        text=True,
        timeout=300,
        env=mpi.env(),
    )
    expect_two_ranks_summed(result)


def test_mpiexec_two_ranks():
    result = subprocess.run(
        mpi.command(2, sys.executable, PROGRAM), capture_output=True, text=True, timeout=300, env=mpi.env()
    )
    expect_two_ranks_summed(result)


def test_ranks_run_buffered_so_their_lines_do_not_mix():
    """Unbuffered ranks write a print's text and newline apart, and mpiexec then interleaves two ranks' lines
    mid-line (seen in CI, where PYTHONUNBUFFERED=1): the course's launches and job scripts run ranks buffered."""
    from course import jobs

    assert "PYTHONUNBUFFERED" not in mpi.env({"PYTHONUNBUFFERED": "1", "PATH": os.environ["PATH"]})
    script = jobs.script(jobs.Request("horovod", nodes=2))
    assert "unset PYTHONUNBUFFERED" in script.splitlines()
